"""Convert a verl PPO-trainer config (Hydra YAML, or the `key=value` overrides of a verl launch script) into a recipe.

verl (https://github.com/volcengine/verl) configures GRPO-family runs through `verl.trainer.main_ppo` with dotted
Hydra keys. `convert_verl` maps the algorithmic ones onto this project's recipe keys (the knob table is in
docs/grpo-family.md), with verl's defaults for the keys a config leaves out. What it cannot carry over falls in three
kinds, none dropped silently:
- `invalid`: what verl itself refuses (batch sizes that do not divide, a mini-batch above the batch, a group of one,
  a value that is not a number, an estimator that needs a critic): never written;
- `lossy`: keys whose meaning the recipe cannot keep (an unknown or misspelt key, a loss or KL without a TRL
  counterpart, a value left as an unresolved interpolation): refused unless `--allow_lossy`, then listed as such;
- `unmapped`: infrastructure settings with no effect on what is trained (FSDP, worker batching): listed.
`scripts/from_verl.py` is the command line around it (it runs the planner's checks before writing);
`drgrpo.recipe.verl_config` reads verl's files and holds its keys and checks; `drgrpo.recipe.verl_recipe` holds the
`Conversion` and the keys verl counts differently (per-rollout frequencies, data files, eval batch, Dr.GRPO opt-ins).
"""

from __future__ import annotations

from typing import Any

import yaml

from drgrpo.algorithm.schedule_keys import check_schedule_values
from drgrpo.recipe.verl_config import (
    ACTOR,
    CRITIC_ESTIMATORS,
    GROUP_ESTIMATORS,
    MODEL,
    NEEDS_ITS_VALUE,
    ROLLOUT,
    VERL_DEFAULTS,
    VERL_LOSS_AGG_MODES,
    batch_problems,
    shell_variables,
    unknown_key_reason,
    value_problems,
)
from drgrpo.recipe.verl_recipe import (
    NO_DATA,
    Conversion,
    data_files,
    dr_grpo_opt_ins,
    eval_batch,
    per_rollout_counts,
    set_frequency,
)

__all__ = ["NO_DATA", "Conversion", "convert_verl", "format_recipe"]

# verl algorithm.kl_penalty / actor.kl_loss_type names -> our kl_estimator (drgrpo/algorithm/kl.py); verl spells k1 "kl"
# and k2 "mse" as well.
VERL_KL_NAMES = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "k3": "k3", "low_var_kl": "low_var_kl"}
# verl actor.loss_agg_mode -> TRL loss_type (background note, section 2).
LOSS_AGG_MODES = {"seq-mean-token-sum-norm": "dr_grpo", "token-mean": "dapo", "seq-mean-token-mean": "grpo"}
# verl keys that are one-to-one with a recipe key (value unchanged).
DIRECT = {
    ROLLOUT + "n": "num_generations",
    ROLLOUT + "temperature": "temperature",
    ROLLOUT + "top_p": "top_p",
    ROLLOUT + "top_k": "top_k",
    ROLLOUT + "gpu_memory_utilization": "vllm_gpu_memory_utilization",
    ROLLOUT + "tensor_model_parallel_size": "vllm_tensor_parallel_size",
    ACTOR + "optim.lr": "learning_rate",
    ACTOR + "optim.weight_decay": "weight_decay",
    ACTOR + "grad_clip": "max_grad_norm",
    ACTOR + "optim.clip_grad": "max_grad_norm",
    ACTOR + "ppo_epochs": "num_iterations",
    ACTOR + "entropy_coeff": "entropy_coef",
    MODEL + "path": "model_name_or_path",
    MODEL + "enable_gradient_checkpointing": "gradient_checkpointing",
    "data.max_prompt_length": "max_prompt_tokens",
    "data.max_response_length": "max_completion_length",
    "data.prompt_key": "prompt_column",
    "trainer.total_epochs": "num_train_epochs",
    "trainer.total_training_steps": "max_steps",
    "trainer.default_local_dir": "output_dir",
    "trainer.experiment_name": "run_name",
}
# Keys read by the rules below (mapped together with others, or only informing them).
COMBINED = {
    "algorithm.adv_estimator", "algorithm.norm_adv_by_std_in_grpo", ACTOR + "loss_agg_mode", ACTOR + "use_kl_loss",
    ACTOR + "kl_loss_coef", ACTOR + "kl_loss_type", "algorithm.use_kl_in_reward", "algorithm.kl_ctrl.kl_coef",
    "algorithm.kl_ctrl.type", "algorithm.kl_penalty", "algorithm.filter_groups.enable",
    "algorithm.filter_groups.max_num_gen_batches", "algorithm.filter_groups.metric", ACTOR + "clip_ratio",
    ACTOR + "clip_ratio_low", ACTOR + "clip_ratio_high", ROLLOUT + "name", "data.train_batch_size",
    "data.gen_batch_size", ACTOR + "ppo_mini_batch_size", ACTOR + "ppo_micro_batch_size_per_gpu",
    "trainer.n_gpus_per_node", "trainer.nnodes", "data.train_files", "data.val_files", "trainer.save_freq",
    "trainer.test_freq", "trainer.logger", "reward_model.overlong_buffer.enable", "reward_model.overlong_buffer.len",
    "reward_model.overlong_buffer.penalty_factor", ACTOR + "optim.warmup_style", ACTOR + "optim.lr_scheduler_type",
    ACTOR + "optim.lr_warmup_steps", ACTOR + "optim.lr_warmup_steps_ratio", ACTOR + "optim.min_lr_ratio",
    ACTOR + "optim.num_cycles", ACTOR + "optim.betas",
}  # fmt: skip
# Keys that change what is trained, with the values a recipe reproduces; any other value is lossy, for the reason.
FAITHFUL_ONLY_AT = {
    "data.shuffle": ((True,), "TRL shuffles the prompts every epoch"),
    ROLLOUT + "do_sample": ((True,), "TRL always samples (temperature, top_p, top_k)"),
    ROLLOUT + "ignore_eos": ((False,), "TRL ends each completion at its end-of-sequence token"),
    ROLLOUT + "use_fire_sampling": ((False,), "FIRE sampling has no TRL counterpart"),
    "reward_model.enable": ((False,), "a learned reward model: rewards here are rule-based functions (reward_funcs)"),
    "reward_model.reward_manager": (("naive", "dapo"), "a reward manager other than verl's naive/dapo scoring"),
    "custom_reward_function.path": (
        (None,),
        "a custom verl reward: port it (docs/rewards.md), name it in reward_funcs",
    ),
    ACTOR + "policy_loss.loss_mode": (("vanilla",), "TRL's loss is verl's vanilla PPO clip loss"),
    MODEL + "lora_rank": ((0,), "LoRA: set use_peft: true, lora_r, lora_alpha and lora_target_modules by hand"),
    "algorithm.use_pf_ppo": ((False,), "PF-PPO reweighting has no TRL counterpart"),
}
# Prefixes of infrastructure settings with no recipe counterpart (DeepSpeed/accelerate take their place).
INFRASTRUCTURE = {
    ACTOR + "fsdp_config.": "FSDP sharding/offload: this project shards with DeepSpeed ZeRO (accelerate config)",
    "actor_rollout_ref.ref.": "reference-worker batching/offload: TRL computes reference log-probs in the trainer",
    ROLLOUT + "log_prob_micro_batch_size": "rollout log-prob batching: TRL batches by per_device_train_batch_size",
    ACTOR + "ppo_micro_batch_size": "use per_device_train_batch_size (micro-batch per GPU)",
    ACTOR + "use_dynamic_bsz": "token-budget micro-batching has no TRL counterpart; batches are counted in completions",
    ACTOR + "ppo_max_token_len_per_gpu": "token-budget micro-batching has no TRL counterpart",
    ACTOR + "clip_ratio_c": "verl's dual-clip bound on the loss of A < 0 tokens whose ratio is above it; TRL has none",
    ROLLOUT + "enforce_eager": "vLLM engine setting, not exposed by TRL's colocated vLLM",
    ROLLOUT + "free_cache_engine": "vLLM engine setting; TRL's counterpart is vllm_enable_sleep_mode",
    ROLLOUT + "val_kwargs.": "validation sampling: TRL evaluates with the training sampling settings",
    MODEL + "use_remove_padding": "padding-free packing is a verl worker optimisation",
    "algorithm.gamma": "used by GAE only (a group estimator has no discounting)",
    "algorithm.lam": "used by GAE only (a group estimator has no discounting)",
    "trainer.project_name": "wandb project: set WANDB_PROJECT in the environment",
    "trainer.val_before_train": "TRL evaluates on eval_strategy; no pre-training evaluation switch",
    "trainer.critic_warmup": "critic setting; GRPO has no critic",
    "critic.": "critic settings; GRPO has no critic",
    "data.filter_overlong_prompts": "max_prompt_tokens (from data.max_prompt_length) already drops longer prompts",
    "data.truncation": "max_prompt_tokens drops, never truncates, a longer prompt",
}
# Order of the keys in the written recipe: model, data, rewards, algorithm, batch, optimiser, generation, logging.
ORDER = (
    "model_name_or_path", "dataset_path", "dataset_mixture", "dataset_test_path", "prompt_column",
    "max_prompt_tokens", "reward_funcs", "reward_weights", "overlong_buffer_length", "dr_grpo", "dr_grpo_allow",
    "scale_rewards", "loss_type", "beta",
    "advantage_estimator", "advantage_std_ddof", "advantage_epsilon", "kl_in_reward_coef", "kl_estimator",
    "dynamic_sampling", "dynamic_sampling_max_rounds", "dynamic_sampling_exhausted", "epsilon", "epsilon_high",
    "num_iterations",
    "entropy_coef", "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
    "steps_per_generation", "learning_rate", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps",
    "weight_decay", "adam_beta1", "adam_beta2", "max_grad_norm", "num_train_epochs",
    "max_steps", "max_completion_length", "temperature", "top_p", "top_k", "use_vllm", "vllm_mode",
    "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size", "vllm_importance_sampling_correction", "bf16",
    "gradient_checkpointing", "output_dir",
    "save_strategy", "save_steps", "eval_strategy", "eval_steps", "per_device_eval_batch_size", "report_to",
    "run_name",
)  # fmt: skip


def convert_verl(flat: dict[str, Any], *, source: str = "verl config") -> Conversion:
    """Map a flat verl config onto recipe keys, with verl's defaults for the keys it leaves out; what verl refuses
    goes to `invalid` (nothing else is converted then), what the recipe cannot keep to `lossy`, infrastructure to
    `unmapped`, each with its reason."""
    out = Conversion(given={key for key, value in flat.items() if value is not None and "$" not in str(value)})
    for key in flat:
        reason = unknown_key_reason(key)
        if reason is not None:
            out.lossy[key] = reason
    # `${a.b}` left after read_verl_config (another file's key, a resolver) or a launch script's `$VAR` that is set
    # neither in the script nor in the environment (drgrpo/recipe/launch_script.py): unknown here.
    unresolved = {key for key, value in flat.items() if isinstance(value, str) and "$" in value}
    for key in sorted(unresolved):
        why = f"{flat[key]}: an interpolation or shell variable this converter cannot resolve"
        variables = shell_variables(flat[key])
        if key in NEEDS_ITS_VALUE and variables:  # a recipe without its data, model or batch size: never written
            for name in variables:
                out.unset.setdefault(name, []).append(key)
        elif key in DIRECT or key in COMBINED:
            out.lossy[key] = f"{why}; set the value by hand (converted as if unset: verl's default, else the recipe's)"
        else:
            out.unmapped[key] = why
    for key, value in flat.items():
        if value is None:
            out.unmapped[key] = "null in the verl config (unset)"
    out.invalid += value_problems({key: value for key, value in flat.items() if key not in unresolved})
    if out.invalid or out.unset:
        return out
    set_values = {key: value for key, value in flat.items() if value is not None and key not in unresolved}
    config = {**VERL_DEFAULTS, **set_values}
    estimator = config["algorithm.adv_estimator"]
    if estimator not in GROUP_ESTIMATORS:
        given = "" if "algorithm.adv_estimator" in set_values else " (not set: verl's default)"
        kind = "PPO with a learned value function (a critic)" if estimator in CRITIC_ESTIMATORS else "no group baseline"
        out.invalid.append(
            f"algorithm.adv_estimator={estimator}{given}: {kind}; this trainer implements the group estimators "
            "grpo and rloo only. For GRPO set algorithm.adv_estimator=grpo in the verl config"
        )
        return out
    mode = config.get(ACTOR + "loss_agg_mode", "token-mean")
    if mode not in VERL_LOSS_AGG_MODES:
        out.invalid.append(f"{ACTOR}loss_agg_mode={mode!r}: verl knows only {list(VERL_LOSS_AGG_MODES)}")
    out.invalid += batch_problems(config)
    if out.invalid:
        return out
    for key, target in DIRECT.items():
        if key in config:
            out.set(target, config[key], out.source(key))
    out.set("bf16", True, "verl's FSDP mixed precision (bf16 parameters in compute)")
    _algorithm(config, out)
    _batch(config, out)
    _schedule(config, out)
    _data_and_logging(config, out)
    name = config.get(ROLLOUT + "name")
    if name == "vllm":
        out.set("use_vllm", True, ROLLOUT + "name")
        out.set("vllm_mode", "colocate", ROLLOUT + "name")  # verl's hybrid engine shares the GPUs
        out.set(
            "vllm_importance_sampling_correction",
            False,
            "verl's PPO ratio uses the actor's recomputed old_log_prob; vLLM's log-probs are not weighted in",
        )
    elif name == "hf":
        out.set("use_vllm", False, ROLLOUT + "name")
    elif name is not None:
        out.unmapped[ROLLOUT + "name"] = f"rollout engine {name!r}: TRL generates with vLLM or transformers"
    for key, value in flat.items():
        if key in out.lossy or key in out.unmapped or key in DIRECT or key in COMBINED:
            continue
        if key in FAITHFUL_ONLY_AT:
            faithful, why = FAITHFUL_ONLY_AT[key]
            if value not in faithful:
                out.lossy[key] = f"{value!r}: {why}"
            continue
        reason = next((why for prefix, why in INFRASTRUCTURE.items() if key.startswith(prefix)), None)
        out.unmapped[key] = reason or "no counterpart in a drgrpo recipe"
    if (out.recipe.get("scale_rewards"), out.recipe.get("loss_type"), out.recipe.get("beta")) == (
        "none",
        "dr_grpo",
        0.0,
    ):
        sources = ", ".join(out.sources[k] for k in ("scale_rewards", "loss_type", "beta"))
        for key in ("scale_rewards", "loss_type", "beta"):
            out.recipe.pop(key)
            out.sources.pop(key)
        out.set("dr_grpo", True, sources)
    dr_grpo_opt_ins(out)  # a verl run's entropy bonus under Dr.GRPO: kept with dr_grpo_allow
    per_rollout_counts(out)  # verl counts rollouts, a recipe optimizer steps
    eval_batch(out)
    # Whatever the verl values, the recipe's schedule keys are in range (the checks above make this hold).
    check_schedule_values(out.recipe, f"the recipe converted from {source}")
    return out


def _algorithm(config: dict[str, Any], out: Conversion) -> None:
    get = config.get
    estimator = GROUP_ESTIMATORS[config["algorithm.adv_estimator"]]
    if estimator == "rloo":
        out.set("advantage_estimator", "leave_one_out", "algorithm.adv_estimator")
        out.set("scale_rewards", "none", "algorithm.adv_estimator")
    else:
        by_std = get("algorithm.norm_adv_by_std_in_grpo", True)  # verl's default
        out.set("scale_rewards", "group" if by_std else "none", "algorithm.norm_adv_by_std_in_grpo")
        if by_std:  # verl's std convention: torch.std (ddof 1) + 1e-6
            out.set("advantage_std_ddof", 1, "algorithm.norm_adv_by_std_in_grpo (verl's torch.std)")
            out.set("advantage_epsilon", 1e-6, "algorithm.norm_adv_by_std_in_grpo (verl's epsilon)")
    mode = get(ACTOR + "loss_agg_mode", "token-mean")  # verl's default
    if mode in LOSS_AGG_MODES:
        out.set("loss_type", LOSS_AGG_MODES[mode], ACTOR + "loss_agg_mode")
    else:
        out.lossy[ACTOR + "loss_agg_mode"] = f"{mode!r} has no TRL loss_type (use one of {list(LOSS_AGG_MODES)})"
    if get(ACTOR + "use_kl_loss", False):
        out.set("beta", float(get(ACTOR + "kl_loss_coef", 0.001)), ACTOR + "use_kl_loss, kl_loss_coef")
        kind = get(ACTOR + "kl_loss_type", "low_var_kl")
        if VERL_KL_NAMES.get(kind) not in ("k3", "low_var_kl"):
            out.lossy[ACTOR + "kl_loss_type"] = f"{kind!r}: TRL's loss-side KL (beta) is k3 only"
        else:
            out.notes.append(f"{ACTOR}kl_loss_type={kind}: TRL's k3 for beta is the same formula without clamps")
    else:
        out.set("beta", 0.0, ACTOR + "use_kl_loss")
        if ACTOR + "kl_loss_coef" in config:
            out.notes.append(f"{ACTOR}kl_loss_coef is unused: use_kl_loss is off")
    if get("algorithm.use_kl_in_reward", False):
        out.set("kl_in_reward_coef", float(get("algorithm.kl_ctrl.kl_coef", 0.001)), "algorithm.kl_ctrl.kl_coef")
        kind = get("algorithm.kl_penalty", "kl")
        if kind in VERL_KL_NAMES:
            out.set("kl_estimator", VERL_KL_NAMES[kind], "algorithm.kl_penalty")
        else:
            out.lossy["algorithm.kl_penalty"] = f"{kind!r}: the estimators are {sorted(VERL_KL_NAMES)}"
        if get("algorithm.kl_ctrl.type", "fixed") != "fixed":
            out.lossy["algorithm.kl_ctrl.type"] = "adaptive KL control: only a fixed kl_in_reward_coef exists here"
    if get("algorithm.filter_groups.enable", False):
        out.set("dynamic_sampling", True, "algorithm.filter_groups.enable")
        # verl never trains on a short batch: it raises once max_num_gen_batches rounds are spent.
        out.set("dynamic_sampling_exhausted", "raise", "algorithm.filter_groups.enable")
        rounds = get("algorithm.filter_groups.max_num_gen_batches", 0)
        if rounds > 0:
            out.set("dynamic_sampling_max_rounds", int(rounds), "algorithm.filter_groups.max_num_gen_batches")
        else:
            out.lossy["algorithm.filter_groups.max_num_gen_batches"] = (
                f"{rounds} (unlimited in verl): a recipe needs a bound; dynamic_sampling_max_rounds keeps its "
                "default 4, after which the run stops (dynamic_sampling_exhausted: raise)"
            )
        gen_batch = get("data.gen_batch_size")
        if gen_batch is not None and gen_batch != config["data.train_batch_size"]:
            out.lossy["data.gen_batch_size"] = (
                f"{gen_batch} prompts per generation round: dynamic sampling here generates data.train_batch_size "
                f"({config['data.train_batch_size']}) prompts a round"
            )
        metric = get("algorithm.filter_groups.metric", "acc")
        out.notes.append(f"filter_groups.metric={metric}: dynamic sampling here compares the summed task reward")
    low = get(ACTOR + "clip_ratio_low", get(ACTOR + "clip_ratio"))
    high = get(ACTOR + "clip_ratio_high", get(ACTOR + "clip_ratio"))
    if low is not None:
        out.set(
            "epsilon", float(low), ACTOR + ("clip_ratio_low" if ACTOR + "clip_ratio_low" in config else "clip_ratio")
        )
    if high is not None and high != low:
        out.set("epsilon_high", float(high), ACTOR + "clip_ratio_high")


def _batch(config: dict[str, Any], out: Conversion) -> None:
    """verl counts prompts (train_batch_size per rollout, ppo_mini_batch_size per update) and completions per GPU
    micro-batch; a recipe counts completions per device, accumulation steps and micro-steps per generation. The
    values have passed verl's own checks (`verl_config.batch_problems`)."""
    world = int(config["trainer.n_gpus_per_node"]) * int(config["trainer.nnodes"])
    out.world_size = world
    n = int(config[ROLLOUT + "n"])
    rollout_prompts = int(config["data.train_batch_size"])
    update_prompts = int(config[ACTOR + "ppo_mini_batch_size"])
    micro = config.get(ACTOR + "ppo_micro_batch_size_per_gpu")
    per_update = update_prompts * n
    defaults = [key for key in ("data.train_batch_size", ACTOR + "ppo_mini_batch_size") if key not in out.given]
    source = f"{ACTOR}ppo_micro_batch_size_per_gpu" if micro else "ppo_mini_batch_size x rollout.n / world"
    micro = int(micro) if micro else per_update // world
    out.set("per_device_train_batch_size", micro, source)
    if per_update % world:
        out.lossy[ACTOR + "ppo_mini_batch_size"] = (
            f"{update_prompts} prompts x {n} = {per_update} completions per update do not split over {world} GPUs: "
            f"verl trains on {per_update // world} per GPU and drops the rest; set it so that they split"
        )
    accumulation = per_update // world // micro
    out.set("gradient_accumulation_steps", accumulation, f"{ACTOR}ppo_mini_batch_size x rollout.n / (world x micro)")
    if rollout_prompts % update_prompts:
        out.lossy["data.train_batch_size"] = (
            f"{rollout_prompts} prompts per rollout are not a whole number of updates of {update_prompts} "
            "(ppo_mini_batch_size): verl's last update is smaller, a recipe's optimizer steps are all one size"
        )
    updates = rollout_prompts // update_prompts
    out.steps_per_rollout = updates * int(config.get(ACTOR + "ppo_epochs", 1))
    if rollout_prompts != update_prompts:
        out.set("steps_per_generation", updates * accumulation, "data.train_batch_size / ppo_mini_batch_size")
    for key in defaults:
        out.notes.append(f"{key} is not set: verl's default {VERL_DEFAULTS[key]} is used")


def _schedule(config: dict[str, Any], out: Conversion) -> None:
    """verl's learning-rate schedule (actor.optim): constant (its default) or cosine, after a linear warm-up."""
    get = config.get
    style = get(ACTOR + "optim.lr_scheduler_type", get(ACTOR + "optim.warmup_style", "constant"))
    key = ACTOR + ("optim.lr_scheduler_type" if ACTOR + "optim.lr_scheduler_type" in config else "optim.warmup_style")
    source = key if key in config else f"{key} (verl's default constant)"
    steps, ratio = get(ACTOR + "optim.lr_warmup_steps", -1), get(ACTOR + "optim.lr_warmup_steps_ratio", 0.0)
    if steps is not None and steps > 0:  # verl: warm-up steps take priority over the ratio
        out.set("warmup_steps", int(steps), ACTOR + "optim.lr_warmup_steps")
    elif ratio:
        if not 0 < ratio < 1:
            out.lossy[ACTOR + "optim.lr_warmup_steps_ratio"] = f"{ratio}: a warm-up share must be in [0, 1)"
        else:
            out.set("warmup_steps", float(ratio), ACTOR + "optim.lr_warmup_steps_ratio (a share of all steps)")
    warm = "warmup_steps" in out.recipe
    if style == "constant":
        out.set("lr_scheduler_type", "constant_with_warmup" if warm else "constant", source)
    elif style == "cosine":
        kwargs = {}
        min_ratio = get(ACTOR + "optim.min_lr_ratio")
        if min_ratio:
            kwargs["min_lr_rate"] = float(min_ratio)
        cycles = get(ACTOR + "optim.num_cycles", 0.5)
        if cycles != 0.5:
            kwargs["num_cycles"] = float(cycles)
        out.set("lr_scheduler_type", "cosine_with_min_lr" if min_ratio else "cosine", source)
        if kwargs:
            out.set("lr_scheduler_kwargs", kwargs, f"{ACTOR}optim.min_lr_ratio, num_cycles")
    else:
        out.lossy[key] = f"{style!r}: verl's schedules are constant and cosine"
    betas = get(ACTOR + "optim.betas")
    if isinstance(betas, list) and len(betas) == 2:
        out.set("adam_beta1", float(betas[0]), ACTOR + "optim.betas")
        out.set("adam_beta2", float(betas[1]), ACTOR + "optim.betas")
    elif betas is not None:
        out.lossy[ACTOR + "optim.betas"] = f"{betas!r}: two numbers expected"


def _data_and_logging(config: dict[str, Any], out: Conversion) -> None:
    get = config.get
    data_files(config, out)
    if "data.train_files" in config:
        out.notes.append(
            "verl's parquet keeps the gold answer in reward_model.ground_truth and the prompt as chat messages: "
            "flatten them to a question column (prompt_column) and an answer column (answer_column) first"
        )
    set_frequency(config, out, "trainer.save_freq", "save")
    set_frequency(config, out, "trainer.test_freq", "eval")
    loggers = get("trainer.logger")
    if loggers is not None:
        loggers = loggers if isinstance(loggers, list) else [loggers]
        reports = [name for name in loggers if name in ("wandb", "tensorboard", "mlflow")]
        out.set("report_to", reports[0] if len(reports) == 1 else (reports or "none"), "trainer.logger")
    if get("reward_model.overlong_buffer.enable", False):
        out.set("reward_funcs", ["accuracy", "overlong"], "reward_model.overlong_buffer.enable")
        out.set("overlong_buffer_length", int(get("reward_model.overlong_buffer.len", 0)), "overlong_buffer.len")
        factor = float(get("reward_model.overlong_buffer.penalty_factor", 1.0))
        out.set("reward_weights", [1.0, factor], "reward_model.overlong_buffer.penalty_factor")
    else:
        out.set("reward_funcs", ["accuracy"], "verl's default_compute_score for math data (rule-based correctness)")


def format_recipe(conversion: Conversion, source: str) -> str:
    """The recipe YAML: a header (world size for the planner, what was not carried over), then one key per line."""
    lines = [
        f"# Converted from the verl config {source} by scripts/from_verl.py.",
        f"# World size: {conversion.world_size} GPUs (verl trainer.n_gpus_per_node x trainer.nnodes), DeepSpeed ZeRO-3",
        "# (in place of verl's FSDP): accelerate launch --config_file accelerate_configs/zero3.yaml scripts/train.py "
        "RECIPE",
    ]
    if conversion.no_data:
        lines.append(f"# NO DATASET: {conversion.no_data}")
    if conversion.expanded:
        lines.append(
            "# Shell variables expanded from the environment when converted (as bash would): "
            + ", ".join(f"${name}={value}" for name, value in sorted(conversion.expanded.items()))
        )
    if conversion.lossy:
        lines.append("# NOT FAITHFUL to the verl run (written with --allow_lossy; verl key: what differs):")
        lines += [f"#   {key}: {why}" for key, why in sorted(conversion.lossy.items())]
    if conversion.notes:
        lines.append("# Notes:")
        lines += [f"#   {note}" for note in conversion.notes]
    if conversion.unmapped:
        lines.append("# Not carried over (verl key = value: reason):")
        lines += [f"#   {key}: {why}" for key, why in sorted(conversion.unmapped.items())]
    lines.append("")
    rank = {key: index for index, key in enumerate(ORDER)}
    for key, value in sorted(conversion.recipe.items(), key=lambda item: rank.get(item[0], len(ORDER))):
        dumped = yaml.safe_dump({key: value}, default_flow_style=True, width=1000).strip()[1:-1]
        lines.append(f"{dumped}  # verl: {conversion.sources[key]}")
    return "\n".join(lines) + "\n"
