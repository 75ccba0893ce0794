#!/usr/bin/env bash
# A verl launch of Dr.GRPO on Qwen2.5-Math-1.5B (verl's recipe form: `main_ppo` with Hydra overrides), written
# after verl's Dr.GRPO documentation (docs/algo/drgrpo.md: norm_adv_by_std_in_grpo=False,
# loss_agg_mode=seq-mean-token-sum-norm, use_kl_loss=False) with the paper's setup (Liu et al., arXiv 2503.20783,
# Table 6) and Oat's schedule: 128 prompts x 8 samples per rollout, updated in 8 optimizer steps of 16 prompts x 8
# = 128 completions, lr 1e-6, 3000-token responses, temperature 1.0.
# Converted into recipes/qwen2.5_math_1.5b_drgrpo_from_verl.yaml by:
#   python scripts/from_verl.py recipes/verl/qwen2.5_math_1.5b_drgrpo.sh -o recipes/qwen2.5_math_1.5b_drgrpo_from_verl.yaml
set -x

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.norm_adv_by_std_in_grpo=False \
    algorithm.use_kl_in_reward=False \
    data.train_files=data/math_l3to5/train.parquet \
    data.val_files=data/math500/test.parquet \
    data.train_batch_size=128 \
    data.max_prompt_length=1024 \
    data.max_response_length=3000 \
    data.filter_overlong_prompts=True \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-Math-1.5B \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.optim.weight_decay=0.0 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.actor.ppo_epochs=1 \
    actor_rollout_ref.actor.grad_clip=1.0 \
    actor_rollout_ref.actor.clip_ratio_low=0.2 \
    actor_rollout_ref.actor.clip_ratio_high=0.2 \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.fsdp_config.param_offload=False \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.top_p=1.0 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.3 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32 \
    trainer.logger='["console","wandb"]' \
    trainer.project_name=drgrpo \
    trainer.experiment_name=qwen2.5-math-1.5b-drgrpo-verl \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1 \
    trainer.save_freq=50 \
    trainer.test_freq=-1 \
    trainer.total_epochs=1 "$@"
