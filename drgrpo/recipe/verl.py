"""Convert a verl PPO-trainer config (Hydra YAML, or the `key=value` overrides of a verl launch script) into a recipe.

verl (https://github.com/volcengine/verl) configures GRPO-family runs through `verl.trainer.main_ppo` with dotted
Hydra keys. `convert_verl` maps the algorithmic ones onto this project's recipe keys (the knob table is in
docs/grpo-family.md) and lists every key it cannot map with the reason, so nothing is dropped silently.
`scripts/from_verl.py` is the command line around it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from drgrpo.core.errors import RecipeError, RecipeFileNotFoundError

# verl algorithm.kl_penalty / actor.kl_loss_type names -> our kl_estimator (drgrpo/algorithm/kl.py); verl spells k1 "kl"
# and k2 "mse" as well.
VERL_KL_NAMES = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "k3": "k3", "low_var_kl": "low_var_kl"}
# verl actor.loss_agg_mode -> TRL loss_type (background note, section 2).
LOSS_AGG_MODES = {"seq-mean-token-sum-norm": "dr_grpo", "token-mean": "dapo", "seq-mean-token-mean": "grpo"}
ACTOR = "actor_rollout_ref.actor."
ROLLOUT = "actor_rollout_ref.rollout."
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
    ACTOR + "optim.lr_warmup_steps_ratio": "warmup_ratio",
    ACTOR + "grad_clip": "max_grad_norm",
    ACTOR + "ppo_epochs": "num_iterations",
    ACTOR + "entropy_coeff": "entropy_coef",
    "actor_rollout_ref.model.path": "model_name_or_path",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "gradient_checkpointing",
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
    ACTOR + "ppo_mini_batch_size", ACTOR + "ppo_micro_batch_size_per_gpu", "trainer.n_gpus_per_node",
    "trainer.nnodes", "data.train_files", "data.val_files", "trainer.save_freq", "trainer.test_freq",
    "trainer.logger", "reward_model.overlong_buffer.enable", "reward_model.overlong_buffer.len",
    "reward_model.overlong_buffer.penalty_factor",
}  # fmt: skip
# Prefixes of infrastructure settings with no recipe counterpart (DeepSpeed/accelerate take their place).
INFRASTRUCTURE = {
    ACTOR + "fsdp_config.": "FSDP sharding/offload: this project shards with DeepSpeed ZeRO (accelerate config)",
    "actor_rollout_ref.ref.": "reference-worker batching/offload: TRL computes reference log-probs in the trainer",
    ROLLOUT + "log_prob_micro_batch_size": "rollout log-prob batching: TRL batches by per_device_train_batch_size",
    ACTOR + "ppo_micro_batch_size": "use per_device_train_batch_size (micro-batch per GPU)",
    ACTOR + "use_dynamic_bsz": "token-budget micro-batching has no TRL counterpart; batches are counted in completions",
    ACTOR + "ppo_max_token_len_per_gpu": "token-budget micro-batching has no TRL counterpart",
    ROLLOUT + "enforce_eager": "vLLM engine setting, not exposed by TRL's colocated vLLM",
    ROLLOUT + "free_cache_engine": "vLLM engine setting; TRL's counterpart is vllm_enable_sleep_mode",
    "actor_rollout_ref.model.use_remove_padding": "padding-free packing is a verl worker optimisation",
    "trainer.project_name": "wandb project: set WANDB_PROJECT in the environment",
    "trainer.val_before_train": "TRL evaluates on eval_strategy; no pre-training evaluation switch",
    "trainer.critic_warmup": "critic setting; GRPO has no critic",
    "critic.": "critic settings; GRPO has no critic",
    "data.filter_overlong_prompts": "max_prompt_tokens (from data.max_prompt_length) already drops longer prompts",
    "data.truncation": "max_prompt_tokens drops, never truncates, a longer prompt",
}
# Order of the keys in the written recipe: model, data, rewards, algorithm, batch, optimiser, generation, logging.
ORDER = (
    "model_name_or_path", "dataset_path", "dataset_test_path", "prompt_column", "max_prompt_tokens", "reward_funcs",
    "reward_weights", "overlong_buffer_length", "dr_grpo", "scale_rewards", "loss_type", "beta",
    "advantage_estimator", "advantage_std_ddof", "advantage_epsilon", "kl_in_reward_coef", "kl_estimator",
    "dynamic_sampling", "dynamic_sampling_max_rounds", "dynamic_sampling_exhausted", "epsilon", "epsilon_high",
    "num_iterations",
    "entropy_coef", "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
    "steps_per_generation", "learning_rate", "weight_decay", "warmup_ratio", "max_grad_norm", "num_train_epochs",
    "max_steps", "max_completion_length", "temperature", "top_p", "top_k", "use_vllm", "vllm_mode",
    "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size", "vllm_importance_sampling_correction", "bf16",
    "gradient_checkpointing", "output_dir",
    "save_strategy", "save_steps", "eval_strategy", "eval_steps", "report_to", "run_name",
)  # fmt: skip


@dataclass
class Conversion:
    """A converted recipe: its keys (with the verl keys each came from), unmapped keys with reasons, notes."""

    recipe: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    unmapped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    world_size: int | None = None

    def set(self, key: str, value: Any, source: str) -> None:
        self.recipe[key] = value
        self.sources[key] = source


def _parse_value(raw: str) -> Any:
    """A Hydra command-line value: YAML scalars/lists, plus `1e-6` (which YAML 1.1 reads as a string)."""
    value = yaml.safe_load(raw) if raw != "" else None
    if isinstance(value, str):
        try:
            return float(value) if re.fullmatch(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+", value) else value
        except ValueError:
            return value
    return value


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def read_verl_config(path: str | Path) -> dict[str, Any]:
    """Flat `{dotted.key: value}` of a verl Hydra YAML, or of the `key=value` overrides in a launch script.

    A missing file, YAML that does not parse or a script line that is not shell syntax is a `RecipeError` naming the
    file (and line)."""
    file = Path(path)
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
        flat = {key: value for key, value in _flatten(tree).items() if key != "defaults"}
    else:
        joined = re.sub(r"\\\n", " ", text)
        flat = {}
        for line in joined.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("#"):
                continue
            try:
                tokens = shlex.split(line)
            except ValueError as error:  # "No closing quotation"
                raise RecipeError(
                    f"verl config {str(path)!r}: cannot read {line[:60]!r} as shell ({error})."
                ) from error
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
    return flat


def convert_verl(flat: dict[str, Any], *, source: str = "verl config") -> Conversion:
    """Map a flat verl config onto recipe keys; every other key goes to `unmapped` with its reason."""
    out = Conversion()
    get = flat.get
    for key, value in flat.items():
        if value is None:
            out.unmapped[key] = "null in the verl config (unset)"
        elif isinstance(value, str) and "${" in value:
            out.unmapped[key] = f"{value}: an interpolation this converter cannot resolve; set the value by hand"
        elif key in DIRECT:
            out.set(DIRECT[key], value, key)
    out.set("bf16", True, "verl's FSDP mixed precision (bf16 parameters in compute)")
    _algorithm(flat, out)
    _batch(flat, out)
    _data_and_logging(flat, out)
    if get(ROLLOUT + "name") is not None:
        name = get(ROLLOUT + "name")
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
        else:
            out.unmapped[ROLLOUT + "name"] = f"rollout engine {name!r}: TRL generates with vLLM or transformers"
    for key, value in flat.items():
        if value is None or key in DIRECT or key in COMBINED or key in out.unmapped:
            continue
        reason = next((why for prefix, why in INFRASTRUCTURE.items() if key.startswith(prefix)), None)
        out.unmapped[key] = reason or "no counterpart in a drgrpo recipe"
    if {"scale_rewards", "loss_type", "beta"} <= out.recipe.keys() and (
        out.recipe["scale_rewards"],
        out.recipe["loss_type"],
        out.recipe["beta"],
    ) == ("none", "dr_grpo", 0.0):
        sources = ", ".join(out.sources[k] for k in ("scale_rewards", "loss_type", "beta"))
        for key in ("scale_rewards", "loss_type", "beta"):
            out.recipe.pop(key)
            out.sources.pop(key)
        out.set("dr_grpo", True, sources)
    return out


def _algorithm(flat: dict[str, Any], out: Conversion) -> None:
    get = flat.get
    estimator = get("algorithm.adv_estimator", "gae")
    if estimator == "rloo":
        out.set("advantage_estimator", "leave_one_out", "algorithm.adv_estimator")
        out.set("scale_rewards", "none", "algorithm.adv_estimator")
    elif estimator != "grpo":
        out.unmapped["algorithm.adv_estimator"] = (
            f"{estimator!r}: only grpo and rloo are group-relative estimators this trainer implements"
        )
    if estimator == "grpo":
        by_std = get("algorithm.norm_adv_by_std_in_grpo", True)  # verl's default
        out.set("scale_rewards", "group" if by_std else "none", "algorithm.norm_adv_by_std_in_grpo")
        if by_std:  # verl's std convention: torch.std (ddof 1) + 1e-6
            out.set("advantage_std_ddof", 1, "algorithm.norm_adv_by_std_in_grpo (verl's torch.std)")
            out.set("advantage_epsilon", 1e-6, "algorithm.norm_adv_by_std_in_grpo (verl's epsilon)")
    mode = get(ACTOR + "loss_agg_mode", "token-mean")  # verl's default
    if mode in LOSS_AGG_MODES:
        out.set("loss_type", LOSS_AGG_MODES[mode], ACTOR + "loss_agg_mode")
    else:
        out.unmapped[ACTOR + "loss_agg_mode"] = f"{mode!r} has no TRL loss_type (use one of {list(LOSS_AGG_MODES)})"
    if get(ACTOR + "use_kl_loss", False):
        out.set("beta", float(get(ACTOR + "kl_loss_coef", 0.001)), ACTOR + "use_kl_loss, kl_loss_coef")
        kind = get(ACTOR + "kl_loss_type", "low_var_kl")
        if VERL_KL_NAMES.get(kind) not in ("k3", "low_var_kl"):
            out.unmapped[ACTOR + "kl_loss_type"] = f"{kind!r}: TRL's loss-side KL (beta) is k3 only"
        else:
            out.notes.append(f"{ACTOR}kl_loss_type={kind}: TRL's k3 for beta is the same formula without clamps")
    else:
        out.set("beta", 0.0, ACTOR + "use_kl_loss")
        if ACTOR + "kl_loss_coef" in flat:
            out.notes.append(f"{ACTOR}kl_loss_coef is unused: use_kl_loss is off")
    if get("algorithm.use_kl_in_reward", False):
        out.set("kl_in_reward_coef", float(get("algorithm.kl_ctrl.kl_coef", 0.001)), "algorithm.kl_ctrl.kl_coef")
        kind = get("algorithm.kl_penalty", "kl")
        if kind in VERL_KL_NAMES:
            out.set("kl_estimator", VERL_KL_NAMES[kind], "algorithm.kl_penalty")
        else:
            out.unmapped["algorithm.kl_penalty"] = f"{kind!r}: the estimators are {sorted(VERL_KL_NAMES)}"
        if get("algorithm.kl_ctrl.type", "fixed") != "fixed":
            out.unmapped["algorithm.kl_ctrl.type"] = "adaptive KL control: only a fixed kl_in_reward_coef exists here"
    if get("algorithm.filter_groups.enable", False):
        out.set("dynamic_sampling", True, "algorithm.filter_groups.enable")
        # verl never trains on a short batch: it raises once max_num_gen_batches rounds are spent.
        out.set("dynamic_sampling_exhausted", "raise", "algorithm.filter_groups.enable")
        rounds = get("algorithm.filter_groups.max_num_gen_batches", 0)
        if rounds and rounds > 0:
            out.set("dynamic_sampling_max_rounds", int(rounds), "algorithm.filter_groups.max_num_gen_batches")
        else:
            out.unmapped["algorithm.filter_groups.max_num_gen_batches"] = (
                f"{rounds} (unlimited in verl): a recipe needs a bound; dynamic_sampling_max_rounds keeps its default 4"
            )
        metric = get("algorithm.filter_groups.metric", "acc")
        out.notes.append(f"filter_groups.metric={metric}: dynamic sampling here compares the summed task reward")
    low = get(ACTOR + "clip_ratio_low", get(ACTOR + "clip_ratio"))
    high = get(ACTOR + "clip_ratio_high", get(ACTOR + "clip_ratio"))
    if low is not None:
        out.set("epsilon", float(low), ACTOR + ("clip_ratio_low" if ACTOR + "clip_ratio_low" in flat else "clip_ratio"))
    if high is not None and high != low:
        out.set("epsilon_high", float(high), ACTOR + "clip_ratio_high")


def _batch(flat: dict[str, Any], out: Conversion) -> None:
    """verl counts prompts (train_batch_size per rollout, ppo_mini_batch_size per update) and completions per GPU
    micro-batch; a recipe counts completions per device, accumulation steps and micro-steps per generation."""
    get = flat.get
    world = int(get("trainer.n_gpus_per_node", 8)) * int(get("trainer.nnodes", 1))
    out.world_size = world
    n = get(ROLLOUT + "n")
    rollout_prompts = get("data.train_batch_size")
    update_prompts = get(ACTOR + "ppo_mini_batch_size", rollout_prompts)
    micro = get(ACTOR + "ppo_micro_batch_size_per_gpu")
    if n is None or update_prompts is None:
        for key in ("data.train_batch_size", ACTOR + "ppo_mini_batch_size", ACTOR + "ppo_micro_batch_size_per_gpu"):
            if key in flat:
                out.unmapped[key] = "batch sizes need actor_rollout_ref.rollout.n and data.train_batch_size as well"
        return
    per_update = update_prompts * n
    source = f"{ACTOR}ppo_micro_batch_size_per_gpu" if micro else "ppo_mini_batch_size x rollout.n / world"
    micro = micro or max(1, per_update // world)
    out.set("per_device_train_batch_size", int(micro), source)
    if per_update % (world * micro):
        out.notes.append(f"{per_update} completions per update do not split into {world} GPUs x {micro}")
    accumulation = max(1, per_update // (world * micro))
    out.set("gradient_accumulation_steps", accumulation, f"{ACTOR}ppo_mini_batch_size x rollout.n / (world x micro)")
    if rollout_prompts and rollout_prompts != update_prompts:
        updates = rollout_prompts // update_prompts
        out.set("steps_per_generation", updates * accumulation, "data.train_batch_size / ppo_mini_batch_size")


def _data_and_logging(flat: dict[str, Any], out: Conversion) -> None:
    get = flat.get
    for key, target in (("data.train_files", "dataset_path"), ("data.val_files", "dataset_test_path")):
        files = get(key)
        if files is None:
            continue
        files = files if isinstance(files, list) else [files]
        if len(files) == 1:
            out.set(target, files[0], key)
        else:
            out.unmapped[key] = f"{len(files)} files: use dataset_mixture (one entry per file) or one folder"
    if "data.train_files" in flat:
        out.notes.append(
            "verl's parquet keeps the gold answer in reward_model.ground_truth and the prompt as chat messages: "
            "flatten them to a question column (prompt_column) and an answer column (answer_column) first"
        )
    save = get("trainer.save_freq")
    if save is not None and save > 0:
        out.set("save_strategy", "steps", "trainer.save_freq")
        out.set("save_steps", int(save), "trainer.save_freq")
    elif save is not None:
        out.set("save_strategy", "no", "trainer.save_freq")
    test = get("trainer.test_freq")
    if test is not None and test > 0:
        out.set("eval_strategy", "steps", "trainer.test_freq")
        out.set("eval_steps", int(test), "trainer.test_freq")
    elif test is not None:
        out.set("eval_strategy", "no", "trainer.test_freq")
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
