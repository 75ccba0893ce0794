"""verl's configs as verl reads them: the files (Hydra YAML, a launch script's `key=value` overrides) as one flat
mapping, verl's config keys, the defaults the converter relies on, and verl's own value and batch checks.

Written from verl's `verl/trainer/config/ppo_trainer.yaml` (v0.4-v0.5, plus the DAPO recipe's `filter_groups`,
`gen_batch_size` and `overlong_buffer` keys) and `RayPPOTrainer._validate_config` / the FSDP workers' batch
normalisation, so that `drgrpo.recipe.verl` refuses what verl refuses (with verl's reason) and spots a misspelt key
(with verl's nearest key) instead of dropping it. Standard library and PyYAML only.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from drgrpo.core.errors import RecipeError, RecipeFileNotFoundError
from drgrpo.recipe.launch_script import script_words

ACTOR = "actor_rollout_ref.actor."
ROLLOUT = "actor_rollout_ref.rollout."
MODEL = "actor_rollout_ref.model."

_EXPONENT = re.compile(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+")


def _keys(prefix: str, names: str) -> set[str]:
    return {prefix + name for name in names.split()}


# The keys of verl's PPO trainer config, by section.
VERL_KEYS: frozenset[str] = frozenset(
    _keys("data.", "tokenizer use_shm train_files val_files prompt_key reward_fn_key max_prompt_length "
          "max_response_length train_batch_size val_batch_size gen_batch_size return_raw_input_ids return_raw_chat "
          "return_full_prompt shuffle seed dataloader_num_workers validation_shuffle filter_overlong_prompts "
          "filter_overlong_prompts_workers truncation image_key video_key trust_remote_code "
          "return_multi_modal_inputs custom_cls.path custom_cls.name sampler.class_path sampler.class_name "
          "datagen.path datagen.name")
    | _keys("actor_rollout_ref.", "hybrid_engine nccl_timeout")
    | _keys(MODEL, "path custom_chat_template use_shm external_lib enable_gradient_checkpointing "
            "enable_activation_offload use_remove_padding lora_rank lora_alpha target_modules exclude_modules "
            "use_liger use_fused_kernels trust_remote_code")
    | _keys(ACTOR, "strategy ppo_mini_batch_size ppo_micro_batch_size ppo_micro_batch_size_per_gpu use_dynamic_bsz "
            "ppo_max_token_len_per_gpu grad_clip clip_ratio clip_ratio_low clip_ratio_high clip_ratio_c "
            "loss_agg_mode entropy_coeff use_kl_loss use_torch_compile kl_loss_coef kl_loss_type ppo_epochs shuffle "
            "ulysses_sequence_parallel_size entropy_from_logits_with_chunking entropy_checkpointing "
            "policy_loss.loss_mode optim.lr optim.lr_warmup_steps optim.lr_warmup_steps_ratio optim.min_lr_ratio "
            "optim.num_cycles optim.warmup_style optim.lr_scheduler_type optim.total_training_steps "
            "optim.weight_decay optim.betas optim.clip_grad")
    | _keys(ROLLOUT, "name mode chat_scheduler temperature top_k top_p use_fire_sampling prompt_length "
            "response_length dtype gpu_memory_utilization ignore_eos enforce_eager free_cache_engine load_format "
            "layered_summon tensor_model_parallel_size data_parallel_size expert_parallel_size "
            "max_num_batched_tokens max_model_len max_num_seqs log_prob_micro_batch_size "
            "log_prob_micro_batch_size_per_gpu log_prob_use_dynamic_bsz log_prob_max_token_len_per_gpu "
            "disable_log_stats enable_chunked_prefill do_sample n calculate_log_probs multi_stage_wake_up "
            "update_weights_bucket_megabytes skip_tokenizer_init")
    | _keys("reward_model.", "enable strategy micro_batch_size micro_batch_size_per_gpu max_length "
            "ulysses_sequence_parallel_size use_dynamic_bsz forward_max_token_len_per_gpu reward_manager "
            "launch_reward_fn_async overlong_buffer.enable overlong_buffer.len overlong_buffer.penalty_factor "
            "overlong_buffer.log")
    | _keys("custom_reward_function.", "path name")
    | _keys("algorithm.", "_target_ gamma lam adv_estimator norm_adv_by_std_in_grpo use_kl_in_reward kl_penalty "
            "kl_ctrl._target_ kl_ctrl.type kl_ctrl.kl_coef kl_ctrl.horizon kl_ctrl.target_kl use_pf_ppo "
            "filter_groups._target_ filter_groups.enable filter_groups.metric filter_groups.max_num_gen_batches")
    | _keys("trainer.", "balance_batch total_epochs total_training_steps profile_steps project_name experiment_name "
            "logger log_val_generations rollout_data_dir validation_data_dir nnodes n_gpus_per_node save_freq "
            "esi_redundant_time resume_mode resume_from_path val_before_train val_only test_freq critic_warmup "
            "default_hdfs_dir del_local_ckpt_after_load default_local_dir max_actor_ckpt_to_keep "
            "max_critic_ckpt_to_keep ray_wait_register_center_timeout device use_legacy_worker_impl")
)  # fmt: skip
# Sections whose keys are free-form or engine settings (any key under them is a verl key).
OPEN_PREFIXES = (
    "data.apply_chat_template_kwargs.", MODEL + "override_config.", MODEL + "fused_kernel_options.",
    ACTOR + "fsdp_config.", ACTOR + "megatron.", ACTOR + "checkpoint.", ACTOR + "profiler.", ACTOR + "policy_loss.",
    "actor_rollout_ref.ref.", ROLLOUT + "engine_kwargs.", ROLLOUT + "val_kwargs.", ROLLOUT + "multi_turn.",
    ROLLOUT + "agent.", ROLLOUT + "trace.", ROLLOUT + "profiler.", "critic.", "reward_model.model.",
    "reward_model.sandbox_fusion.", "reward_model.reward_kwargs.", "reward_model.profiler.",
    "custom_reward_function.reward_kwargs.", "algorithm.pf_ppo.", "algorithm.rollout_is", "trainer.npu_profile.",
    "trainer.controller_nsight_options.", "trainer.worker_nsight_options.", "ray_init.", "global_profiler.",
    "hydra.",
)  # fmt: skip
# verl's defaults for the keys whose absence changes the converted run (recipes' defaults differ).
VERL_DEFAULTS: dict[str, Any] = {
    "algorithm.adv_estimator": "gae",
    "data.train_batch_size": 1024,
    ACTOR + "ppo_mini_batch_size": 256,
    ROLLOUT + "n": 1,
    "data.max_prompt_length": 512,
    "data.max_response_length": 512,
    ACTOR + "optim.weight_decay": 0.01,
    "trainer.total_epochs": 30,
    "trainer.n_gpus_per_node": 8,
    "trainer.nnodes": 1,
    "trainer.save_freq": -1,
    "trainer.test_freq": -1,
}
# Keys whose value a recipe cannot do without (its data, its model, its batch sizes): one that uses an unset shell
# variable refuses the conversion, --allow_lossy or not, naming the variable.
NEEDS_ITS_VALUE = {
    "data.train_files", "data.val_files", MODEL + "path", "data.train_batch_size", "data.gen_batch_size",
    ACTOR + "ppo_mini_batch_size", ACTOR + "ppo_micro_batch_size_per_gpu", ROLLOUT + "n", "trainer.n_gpus_per_node",
    "trainer.nnodes",
}  # fmt: skip
# `$NAME`, `${NAME}`, `${NAME:-...}`: a shell variable (a Hydra interpolation `${a.b}` has a dot, and is not one).
_SHELL_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)(?![A-Za-z0-9_.])")


def shell_variables(value: str) -> list[str]:
    """The shell variables a value left unexpanded still names (`$HOME/data` -> ["HOME"])."""
    return _SHELL_VARIABLE.findall(value)


# Estimators with a group baseline that this trainer implements, by verl name; every other one is refused.
GROUP_ESTIMATORS = {"grpo": "grpo", "grpo_vectorized": "grpo", "rloo": "rloo", "rloo_vectorized": "rloo"}
CRITIC_ESTIMATORS = {"gae"}
VERL_LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# Keys verl reads as whole numbers, and as numbers (checked before any arithmetic).
WHOLE_KEYS = {
    "data.train_batch_size", "data.max_prompt_length", "data.max_response_length", "data.gen_batch_size",
    ACTOR + "ppo_mini_batch_size", ACTOR + "ppo_micro_batch_size", ACTOR + "ppo_micro_batch_size_per_gpu",
    ACTOR + "ppo_epochs", ACTOR + "optim.lr_warmup_steps", ROLLOUT + "n", ROLLOUT + "top_k",
    ROLLOUT + "tensor_model_parallel_size", "trainer.n_gpus_per_node", "trainer.nnodes", "trainer.total_epochs",
    "trainer.total_training_steps", "trainer.save_freq", "trainer.test_freq",
    "algorithm.filter_groups.max_num_gen_batches", "reward_model.overlong_buffer.len",
}  # fmt: skip
NUMBER_KEYS = {
    ACTOR + "optim.lr", ACTOR + "optim.weight_decay", ACTOR + "optim.lr_warmup_steps_ratio",
    ACTOR + "optim.min_lr_ratio", ACTOR + "optim.num_cycles", ACTOR + "grad_clip", ACTOR + "optim.clip_grad",
    ACTOR + "clip_ratio",
    ACTOR + "clip_ratio_low", ACTOR + "clip_ratio_high", ACTOR + "clip_ratio_c", ACTOR + "entropy_coeff",
    ACTOR + "kl_loss_coef", ROLLOUT + "temperature", ROLLOUT + "top_p", ROLLOUT + "gpu_memory_utilization",
    "algorithm.kl_ctrl.kl_coef", "reward_model.overlong_buffer.penalty_factor",
}  # fmt: skip
# Whole-number keys that count something (1 or more); the others may be -1 or 0 ("off").
POSITIVE_KEYS = {
    "data.train_batch_size", ACTOR + "ppo_mini_batch_size", ACTOR + "ppo_micro_batch_size",
    ACTOR + "ppo_micro_batch_size_per_gpu", ACTOR + "ppo_epochs", ROLLOUT + "n", "trainer.n_gpus_per_node",
    "trainer.nnodes", "data.max_response_length",
}  # fmt: skip


def is_verl_key(key: str) -> bool:
    return key in VERL_KEYS or key.startswith(OPEN_PREFIXES)


def unknown_key_reason(key: str) -> str | None:
    """Why `key` is not a verl key, with verl's nearest key; None when verl knows it."""
    if is_verl_key(key):
        return None
    close = difflib.get_close_matches(key, sorted(VERL_KEYS), n=1, cutoff=0.8)
    hint = f"did you mean {close[0]}?" if close else "check its spelling against verl's ppo_trainer.yaml"
    return f"not a key of verl's PPO trainer config: {hint}"


def value_problems(flat: Mapping[str, Any]) -> list[str]:
    """`key = value: why` for every value verl cannot use as a number (a string, a fraction, a count below 1)."""
    problems = []
    for key, value in flat.items():
        if value is None or (isinstance(value, str) and "${" in value):
            continue
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if key in WHOLE_KEYS and not (is_number and float(value).is_integer()):
            problems.append(f"{key}={value!r}: verl reads it as a whole number")
        elif key in NUMBER_KEYS and not is_number:
            problems.append(f"{key}={value!r}: verl reads it as a number")
        elif key in POSITIVE_KEYS and value < 1:
            problems.append(f"{key}={value!r}: it counts something, so verl needs 1 or more")
    return problems


def batch_problems(config: Mapping[str, Any]) -> list[str]:
    """verl's own batch checks (`RayPPOTrainer._validate_config`, the FSDP workers' normalisation), in verl's units:
    prompts per rollout (`data.train_batch_size`) and per update (`ppo_mini_batch_size`), completions per GPU
    micro-batch. `config` holds the values with verl's defaults filled in; all of them already whole numbers >= 1."""
    world = int(config["trainer.n_gpus_per_node"]) * int(config["trainer.nnodes"])
    n = int(config[ROLLOUT + "n"])
    rollout, update = int(config["data.train_batch_size"]), int(config[ACTOR + "ppo_mini_batch_size"])
    micro = config.get(ACTOR + "ppo_micro_batch_size_per_gpu")
    problems = []
    estimator = config["algorithm.adv_estimator"]
    if estimator in GROUP_ESTIMATORS and n < 2:
        problems.append(
            f"{ROLLOUT}n={n}: {estimator} compares each completion with the others of its prompt, so it needs 2 or "
            "more completions per prompt (verl's default is 1; GRPO runs use 8-64)"
        )
    if (rollout * n) % world:
        problems.append(
            f"data.train_batch_size x rollout.n = {rollout} x {n} = {rollout * n} completions per rollout do not "
            f"split over {world} GPUs (trainer.n_gpus_per_node x trainer.nnodes); verl refuses this"
        )
    if update > rollout:
        problems.append(
            f"{ACTOR}ppo_mini_batch_size={update} is larger than data.train_batch_size={rollout}: an update cannot "
            f"hold more prompts than a rollout (verl refuses this); set ppo_mini_batch_size to {rollout} or a divisor "
            "of it"
        )
    per_gpu = update * n // world
    if per_gpu < 1:
        problems.append(
            f"ppo_mini_batch_size x rollout.n / GPUs = {update} x {n} / {world} is below 1 completion per GPU per "
            "update (verl refuses this); raise ppo_mini_batch_size or use fewer GPUs"
        )
    elif micro is not None and per_gpu % int(micro):
        problems.append(
            f"each GPU's share of an update ({update} x {n} / {world} = {per_gpu} completions) is not a multiple of "
            f"{ACTOR}ppo_micro_batch_size_per_gpu={micro} (verl refuses this)"
        )
    return problems


def _number_or_text(value: Any) -> Any:
    """`1e-6` as a number: YAML 1.1 (PyYAML) reads an exponent without a dot as a string; Hydra reads a float."""
    return float(value) if isinstance(value, str) and _EXPONENT.fullmatch(value) else value


def _parse_value(raw: str) -> Any:
    """A Hydra command-line value: YAML scalars/lists, plus `1e-6` (which YAML 1.1 reads as a string)."""
    return _number_or_text(yaml.safe_load(raw) if raw != "" else None)


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@dataclass
class VerlSource:
    """A verl config as read: its flat keys, and the shell variables a launch script's values were expanded from."""

    flat: dict[str, Any]
    from_environment: dict[str, str] = field(default_factory=dict)
    from_script: dict[str, str] = field(default_factory=dict)


def read_verl_config(path: str | Path, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Flat `{dotted.key: value}` of a verl Hydra YAML, or of the `key=value` overrides in a launch script (its
    variables expanded from the script and `environ`, default the process environment, as bash would)."""
    return read_verl_source(path, environ).flat


def read_verl_source(path: str | Path, environ: Mapping[str, str] | None = None) -> VerlSource:
    """`read_verl_config` with the variables that were expanded (`drgrpo.recipe.launch_script`).

    A missing file, YAML that does not parse or a script line that is not shell syntax is a `RecipeError` naming the
    file (and line)."""
    file = Path(path)
    source = VerlSource({})
    if not file.is_file():
        where = "is a folder, not a file" if file.is_dir() else f"not found (from {Path.cwd()})"
        raise RecipeFileNotFoundError(
            f"verl config {str(path)!r} {where}. Pass verl's Hydra YAML, or a launch script with its key=value "
            "overrides."
        )
    text = file.read_text()
    if file.suffix in (".yaml", ".yml"):
        try:
            tree = yaml.safe_load(text) or {}
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            line = f" line {mark.line + 1}" if mark is not None else ""
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise RecipeError(f"verl config {str(path)!r}{line}: not valid YAML ({problem}).") from error
        if not isinstance(tree, dict):
            raise ValueError(f"{path}: a verl YAML config must be a mapping of sections (algorithm:, data:, ...).")
        flat = {key: _number_or_text(value) for key, value in _flatten(tree).items() if key != "defaults"}
    else:
        try:
            words = script_words(text, os.environ if environ is None else environ)
        except ValueError as error:  # "No closing quotation"
            raise RecipeError(f"verl config {str(path)!r}: cannot read it as a shell script ({error}).") from error
        source.from_environment, source.from_script = words.from_environment, words.from_script
        flat = {}
        for tokens in words.lines:
            for token in tokens:
                match = re.fullmatch(r"\+{0,2}([A-Za-z_][\w.]*)=(.*)", token, flags=re.DOTALL)
                if match:
                    flat[match.group(1)] = _parse_value(match.group(2))
        if not flat:
            raise ValueError(f"{path}: found no verl `key=value` overrides (e.g. algorithm.adv_estimator=grpo).")
    # Resolve ${a.b} interpolations between keys of the same file.
    for key, value in flat.items():
        if isinstance(value, str) and re.fullmatch(r"\$\{[\w.]+\}", value) and value[2:-1] in flat:
            flat[key] = flat[value[2:-1]]
    source.flat = flat
    return source
