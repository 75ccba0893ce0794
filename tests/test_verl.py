"""verl configs -> recipes: the shipped verl Dr.GRPO launch converts into the hand-written expected recipe, which the
planner accepts; Hydra YAML input, DAPO/KL/RLOO keys, and keys that cannot be mapped are listed with a reason."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from conftest import PYTHON, ROOT

from drgrpo.planning import plan_recipe
from drgrpo.recipe.verl import convert_verl, format_recipe, read_verl_config

VERL_EXAMPLE = ROOT / "recipes/verl/qwen2.5_math_1.5b_drgrpo.sh"
CONVERTED = ROOT / "recipes/qwen2.5_math_1.5b_drgrpo_from_verl.yaml"

# Written by hand from the verl launch: 16 prompts x 8 samples = 128 completions per update = 8 GPUs x 16 x 1 step;
# 128 / 16 = 8 updates per rollout of 128 prompts, so 8 micro-steps per generation.
EXPECTED = {
    "model_name_or_path": "Qwen/Qwen2.5-Math-1.5B",
    "dataset_path": "data/math_l3to5/train.parquet",
    "dataset_test_path": "data/math500/test.parquet",
    "max_prompt_tokens": 1024,
    "reward_funcs": ["accuracy"],
    "dr_grpo": True,
    "epsilon": 0.2,
    "num_iterations": 1,
    "entropy_coef": 0,
    "num_generations": 8,
    "per_device_train_batch_size": 16,
    "gradient_accumulation_steps": 1,
    "steps_per_generation": 8,
    "learning_rate": 1e-6,
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "num_train_epochs": 1,
    "max_completion_length": 3000,
    "temperature": 1.0,
    "top_p": 1.0,
    "use_vllm": True,
    "vllm_mode": "colocate",
    "vllm_gpu_memory_utilization": 0.3,
    "vllm_tensor_parallel_size": 1,
    "vllm_importance_sampling_correction": False,
    "bf16": True,
    "gradient_checkpointing": True,
    "save_strategy": "steps",
    "save_steps": 50,
    "eval_strategy": "no",
    "report_to": "wandb",
    "run_name": "qwen2.5-math-1.5b-drgrpo-verl",
}


def test_shipped_verl_example_converts_to_the_expected_recipe():
    conversion = convert_verl(read_verl_config(VERL_EXAMPLE))
    assert conversion.recipe == EXPECTED
    assert conversion.world_size == 8
    assert set(conversion.unmapped) == {
        "actor_rollout_ref.actor.fsdp_config.param_offload",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
        "actor_rollout_ref.model.use_remove_padding",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "data.filter_overlong_prompts",
        "trainer.project_name",
    }
    # The shipped recipe is exactly the converter's output, and reads back as the expected keys.
    assert CONVERTED.read_text() == format_recipe(conversion, "recipes/verl/qwen2.5_math_1.5b_drgrpo.sh")
    assert yaml.safe_load(CONVERTED.read_text()) == EXPECTED


def test_converted_recipe_passes_the_planner():
    report = plan_recipe(CONVERTED)
    assert report.errors == [], [f.message for f in report.errors]
    assert report.setup.world_size == 8 and report.setup.zero_stage == 3


def test_script_prints_recipe_and_lists_unmapped_keys():
    result = subprocess.run(
        [PYTHON, "scripts/from_verl.py", str(VERL_EXAMPLE)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout) == EXPECTED
    assert "not carried over: trainer.project_name: wandb project" in result.stderr


def test_hydra_yaml_with_dapo_kl_in_reward_and_unmappable_keys(tmp_path):
    config = tmp_path / "dapo.yaml"
    config.write_text(
        """
defaults: [ppo_trainer]
algorithm:
  adv_estimator: grpo
  use_kl_in_reward: true
  kl_penalty: low_var_kl
  kl_ctrl: {type: adaptive, kl_coef: 0.002}
  filter_groups: {enable: true, metric: acc, max_num_gen_batches: 10}
data: {train_batch_size: 32, max_response_length: 512, train_files: [a.parquet, b.parquet]}
actor_rollout_ref:
  model: {path: Qwen/Qwen3-8B}
  rollout: {n: 16, name: sglang}
  actor:
    loss_agg_mode: seq-mean-token-sum
    use_kl_loss: true
    kl_loss_coef: 0.01
    kl_loss_type: k1
    clip_ratio_low: 0.2
    clip_ratio_high: 0.28
    ppo_mini_batch_size: 8
    ppo_micro_batch_size_per_gpu: 4
    optim: {lr: "${data.lr}"}
reward_model:
  overlong_buffer: {enable: true, len: 128, penalty_factor: 1.0}
trainer: {n_gpus_per_node: 4, nnodes: 2, save_freq: -1}
"""
    )
    conversion = convert_verl(read_verl_config(config))
    recipe, unmapped = conversion.recipe, conversion.unmapped
    assert recipe["scale_rewards"] == "group" and recipe["advantage_epsilon"] == 1e-6
    assert recipe["beta"] == 0.01 and "kl_loss_type" in " ".join(unmapped)
    assert (recipe["kl_in_reward_coef"], recipe["kl_estimator"]) == (0.002, "low_var_kl")
    assert (recipe["dynamic_sampling"], recipe["dynamic_sampling_max_rounds"]) == (True, 10)
    assert recipe["dynamic_sampling_exhausted"] == "raise"  # verl raises when the rounds are spent
    assert (recipe["epsilon"], recipe["epsilon_high"]) == (0.2, 0.28)
    # 8 prompts x 16 = 128 completions per update over 8 GPUs x 4 -> 4 accumulation steps; 32 / 8 = 4 updates per
    # rollout -> 16 micro-steps per generation.
    assert (recipe["per_device_train_batch_size"], recipe["gradient_accumulation_steps"]) == (4, 4)
    assert recipe["steps_per_generation"] == 16
    assert recipe["reward_funcs"] == ["accuracy", "overlong"] and recipe["overlong_buffer_length"] == 128
    assert recipe["save_strategy"] == "no"
    assert "loss_type" not in recipe and "seq-mean-token-sum" in unmapped["actor_rollout_ref.actor.loss_agg_mode"]
    assert "adaptive" in unmapped["algorithm.kl_ctrl.type"]
    assert "sglang" in unmapped["actor_rollout_ref.rollout.name"]
    assert "dataset_mixture" in unmapped["data.train_files"]
    assert "cannot resolve" in unmapped["actor_rollout_ref.actor.optim.lr"] and "learning_rate" not in recipe
    assert "defaults" not in unmapped


def test_launch_script_values(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo \\\n  algorithm.adv_estimator=rloo \\\n"
        "  +actor_rollout_ref.actor.optim.lr=3e-7 actor_rollout_ref.rollout.n=4 # a comment\n"
    )
    flat = read_verl_config(script)
    assert flat == {
        "algorithm.adv_estimator": "rloo",
        "actor_rollout_ref.actor.optim.lr": pytest.approx(3e-7),
        "actor_rollout_ref.rollout.n": 4,
    }
    recipe = convert_verl(flat).recipe
    assert recipe["advantage_estimator"] == "leave_one_out" and recipe["scale_rewards"] == "none"
    assert recipe["loss_type"] == "dapo"  # verl's default loss_agg_mode token-mean
    with pytest.raises(ValueError, match="found no verl `key=value` overrides"):
        (tmp_path / "empty.sh").write_text("echo hello\n")
        read_verl_config(tmp_path / "empty.sh")
