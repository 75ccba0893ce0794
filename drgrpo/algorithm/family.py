"""The GRPO family as recipe keys, and the card that says which member a resolved config is.

"GRPO" names a family: implementations differ in how the advantage is baselined and normalised, how the ratio is
formed and clipped, how token losses are aggregated, where the log-probs come from, where the KL goes and how stale
the rollouts are (the five questions of the background note, section 6). `FamilyArguments` adds the members TRL
1.16 lacks (leave-one-out baseline, KL in the reward, DAPO dynamic sampling); `family_card` answers the questions for
a resolved `DrGRPOConfig`, logged at start-up and printed by `scripts/train.py RECIPE --explain`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from drgrpo.algorithm.dr_grpo_keys import algorithm_name
from drgrpo.algorithm.kl import KL_ESTIMATORS

ADVANTAGE_ESTIMATORS = ("group_mean", "leave_one_out")
EXHAUSTED_CHOICES = ("pad", "raise")  # dynamic_sampling_exhausted


@dataclass
class FamilyArguments:
    """Advantage baseline, KL in the reward and dynamic sampling (mixed into `DrGRPOConfig`)."""

    advantage_estimator: str = field(
        default="group_mean",
        metadata={
            "help": "Baseline of the group advantage: 'group_mean' (GRPO/Dr.GRPO: R_i - mean of the group) or "
            "'leave_one_out' (RLOO: R_i - mean of the *other* completions of the prompt)."
        },
    )
    kl_in_reward_coef: float = field(
        default=0.0,
        metadata={
            "help": "KL penalty folded into the reward (verl use_kl_in_reward + kl_ctrl.kl_coef, Oat kl_penalty_coef): "
            "each completion's reward becomes R - coef * sum_t KL_t before the group advantage. 0 = off. Loads a "
            "reference model. Independent of beta (KL in the loss); allowed with dr_grpo."
        },
    )
    kl_estimator: str = field(
        default="k1",
        metadata={
            "help": "Per-token KL estimator of kl_in_reward_coef, as verl's kl_penalty: 'k1' (log ratio), 'k2' "
            "(half squared log ratio), 'k3' / 'low_var_kl' (clamped exp(-x) + x - 1)."
        },
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO dynamic sampling (verl algorithm.filter_groups): drop groups whose rewards are all equal and "
            "generate for fresh training prompts until the generation batch is full again. The batch size, hence the "
            "dr_grpo normaliser, never changes."
        },
    )
    dynamic_sampling_max_rounds: int = field(
        default=4,
        metadata={
            "help": "Generation rounds per batch at most (the first included; verl max_num_gen_batches). What happens "
            "if the batch is still short: dynamic_sampling_exhausted."
        },
    )
    dynamic_sampling_exhausted: str = field(
        default="pad",
        metadata={
            "help": "When dynamic_sampling_max_rounds rounds leave the batch short of groups whose rewards differ: "
            "'pad' fills it with the last round's all-equal groups, each with advantage exactly 0 (whatever "
            "kl_in_reward_coef and scale_rewards say) and trained as TRL trains any all-equal group: in every "
            "loss_type's normaliser, under beta's KL; warned once and counted in dynamic_sampling/groups_padded; "
            "'raise' stops the run, as verl does."
        },
    )

    def check_family_settings(self) -> None:
        """Raise a `ValueError` naming the key when a family setting is unknown or contradicts another."""
        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            raise ValueError(
                f"advantage_estimator={self.advantage_estimator!r} is not one of {list(ADVANTAGE_ESTIMATORS)}."
            )
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"kl_estimator={self.kl_estimator!r} is not one of {list(KL_ESTIMATORS)} (verl's 'kl' is 'k1' and "
                "'mse' is 'k2')."
            )
        if self.kl_in_reward_coef < 0:
            raise ValueError(f"kl_in_reward_coef must be >= 0 (0 turns it off), got {self.kl_in_reward_coef}.")
        if self.dynamic_sampling_exhausted not in EXHAUSTED_CHOICES:
            raise ValueError(
                f"dynamic_sampling_exhausted={self.dynamic_sampling_exhausted!r} is not one of "
                f"{list(EXHAUSTED_CHOICES)} ('pad': fill with zero-weight groups; 'raise': stop, as verl does)."
            )
        ours = {
            "advantage_estimator=leave_one_out": self.advantage_estimator == "leave_one_out",
            "kl_in_reward_coef > 0": self.kl_in_reward_coef > 0,
            "dynamic_sampling": self.dynamic_sampling,
        }
        for name, on in ours.items():
            if not on:
                continue
            if getattr(self, "scale_rewards", None) == "batch":
                raise ValueError(
                    f"{name} works on group advantages; scale_rewards='batch' keeps TRL's batch-wide advantage, which "
                    "ignores it. Use scale_rewards: group or none."
                )
            if getattr(self, "multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize":
                raise ValueError(
                    f"{name} works on summed rewards; multi_objective_aggregation='normalize_then_sum' keeps TRL's "
                    "own advantage. Use multi_objective_aggregation: sum_then_normalize."
                )

    @property
    def uses_reference_model(self) -> bool:
        """Whether a reference policy is needed: a KL in the loss (`beta`) or in the reward."""
        return bool(getattr(self, "beta", 0.0)) or self.kl_in_reward_coef > 0


# ----------------------------------------------------------------------------------------------------------------------
# The family card
# ----------------------------------------------------------------------------------------------------------------------
_LOSS_AGGREGATION = {
    "grpo": "per sequence first: mean_i( sum_t L_it / |o_i| ) (length-biased; verl seq-mean-token-mean)",
    "bnpo": "per token over the local micro-batch: sum_it L_it / sum_i |o_i|",
    "dapo": "per token over the generation batch, all processes: sum_it L_it / total tokens (verl token-mean)",
    "dr_grpo": "sum_it L_it / (B x {max_len}), B = {batch} completions per micro-batch (verl seq-mean-token-sum-norm, "
    "up to the batch factor)",
}


def _advantage_line(config: Any) -> str:
    baseline = (
        "leave-one-out mean of the other completions" if config.advantage_estimator == "leave_one_out" else "group mean"
    )
    trl_scaling = getattr(config, "trl_advantage_scaling", None)
    if trl_scaling is not None:
        return trl_scaling
    if config.scale_rewards == "group":
        scale = f"divided by the group std (ddof={config.advantage_std_ddof}, eps={config.advantage_epsilon:g})"
    else:
        scale = "not divided by any std (Dr.GRPO)"
    return f"per group of {config.num_generations}; baseline: {baseline}; {scale}"


def _ratio_line(config: Any) -> str:
    high = config.epsilon_high if config.epsilon_high is not None else config.epsilon
    clip = f"clip [1 - {config.epsilon:g}, 1 + {high:g}]"
    if config.delta is not None:
        clip += f", two-sided cap {config.delta:g}"
    threshold = getattr(config, "off_policy_mask_threshold", None)
    if threshold is not None:
        clip += f", off-policy mask: negative-advantage completions with mean KL(sampler||pi_theta) > {threshold:g}"
    level = "sequence" if config.importance_sampling_level == "sequence" else "token"
    return f"{level}-level pi_theta/pi_old, {clip} (loss_type={config.loss_type})"


def _loss_line(config: Any) -> str:
    template = _LOSS_AGGREGATION.get(config.loss_type)
    if template is None:
        return f"TRL loss_type={config.loss_type} (see TRL's GRPOConfig docs)"
    return template.format(max_len=config.max_completion_length, batch=config.per_device_train_batch_size)


def recomputes_old_logprobs(config: Any) -> bool:
    """Whether TRL computes pi_old with the trainer after generating, exactly when TRL 1.16 does
    (`GRPOTrainer._generate_and_score_completions`): gradient_accumulation_steps not a multiple of
    steps_per_generation x num_iterations (later micro-steps then train on rollouts of an older policy), or vLLM's
    importance-sampling correction on (it needs the trainer's log-probs of vLLM's samples). Otherwise TRL uses
    pi_theta itself, detached, so the ratio pi_theta / pi_old is exactly 1 on every micro-step."""
    generate_every = config.steps_per_generation * config.num_iterations
    aligned = config.gradient_accumulation_steps % generate_every == 0
    return not aligned or bool(config.use_vllm and config.vllm_importance_sampling_correction)


def _correction(config: Any, sampler: str) -> str:
    """How the sampler-vs-learner mismatch is handled: TRL's importance-sampling correction, its mode and bounds."""
    if not config.vllm_importance_sampling_correction:
        return (
            f"{sampler}-vs-trainer mismatch not corrected (vllm_importance_sampling_correction: false; the loss "
            f"treats the {sampler} samples as the trainer's own)"
        )
    mode = config.vllm_importance_sampling_mode
    cap = config.vllm_importance_sampling_clip_max or config.vllm_importance_sampling_cap
    floor = getattr(config, "vllm_importance_sampling_clip_min", None)
    bounds = f"cap {cap}" if floor is None else f"floor {floor}, cap {cap}"
    if getattr(config, "sampler_mode_unset", False):  # said once, here: the mode the recipe left to its default
        default = "the CPU engine's default" if sampler == "engine" else "TRL's default"
        bounds += f"; {mode}: {default}, vllm_importance_sampling_mode unset"
    line = f"{sampler}-vs-trainer mismatch corrected by IS {mode} ({bounds})"
    if mode.startswith("sequence"):
        line += (
            "; a sequence-level ratio is a product over its tokens, so long completions are cut or dropped more "
            "often: a length bias (token_truncate has none)"
        )
    return line


# TRL's sampling keys that make the sampler draw from a processed distribution rather than pi_theta, each with the
# values that leave the distribution alone (drgrpo/algorithm/dr_grpo_keys.py: card keys).
_SAMPLING_AS_IS: dict[str, tuple[Any, ...]] = {
    "top_p": (1.0,), "top_k": (0, None), "min_p": (None, 0.0), "repetition_penalty": (1.0,),
    "generation_kwargs": (None, {}), "vllm_structured_outputs_regex": (None, ""),
}  # fmt: skip


def _sampling(config: Any) -> str:
    """'' when the sampler draws from pi_theta (at its temperature), else the keys that process its distribution."""
    changed = [
        f"{key}={getattr(config, key)!r}" for key, as_is in _SAMPLING_AS_IS.items() if getattr(config, key) not in as_is
    ]
    if not changed:
        return ""
    return f"; samples drawn with {', '.join(changed)}, not from pi_theta, whose log-probs the loss uses"


def _logprob_line(config: Any) -> str:
    return _sampled_from(config) + _sampling(config)


def _sampled_from(config: Any) -> str:
    if recomputes_old_logprobs(config):
        old = "pi_old recomputed by the trainer before the updates"
    else:
        old = "pi_old = pi_theta (not recomputed: the ratio is exactly 1)"
    if getattr(config, "engine", None) == "cpu":
        if old.startswith("pi_old ="):
            old = "pi_old = pi_theta (on-policy, not recomputed; the sampler weights use the loss's own forward)"
        weights = (
            "a bf16 copy synced once per optimizer step"
            if config.bf16
            else "the trained weights themselves (their linear layers packed for oneDNN once per step, unless LoRA)"
        )
        return f"sampled by the CPU engine from {weights}; {old}; {_correction(config, 'engine')}"
    if not config.use_vllm:
        if old.startswith("pi_old ="):
            old = "pi_old = pi_theta (on-policy, not recomputed)"
        return f"sampled by the trainer (transformers generate); {old}"
    return f"sampled by vLLM ({config.vllm_mode}); {old}; {_correction(config, 'vLLM')}"


def _kl_line(config: Any) -> str:
    parts = []
    if config.beta:
        parts.append(f"in the loss, beta={config.beta:g} (TRL k3)")
    if config.kl_in_reward_coef > 0:
        parts.append(f"in the reward, coef={config.kl_in_reward_coef:g}, estimator {config.kl_estimator} (summed)")
    if not parts:
        return "none (no reference model)"
    return "; ".join(parts) + "; reference model loaded"


def _staleness_line(config: Any) -> str:
    line = (
        f"num_iterations={config.num_iterations}, steps_per_generation={config.steps_per_generation} "
        f"(gradient_accumulation_steps={config.gradient_accumulation_steps})"
    )
    if config.dynamic_sampling:
        line += (
            f"; dynamic sampling: all-equal groups dropped and refilled, up to "
            f"{config.dynamic_sampling_max_rounds} generation rounds per batch, then "
            + ("zero-weight padding" if config.dynamic_sampling_exhausted == "pad" else "stop (raise)")
        )
    return line


def family_card(config: Any) -> str:
    """A block answering the background note's five questions for a resolved `DrGRPOConfig`.

    Its name is "Dr.GRPO" only for the paper's objective: the family members this project adds follow it ("+
    leave-one-out"), and TRL keys kept with `dr_grpo_allow` come last, "opted in: not the paper's objective"
    (`drgrpo.algorithm.dr_grpo_keys.algorithm_name`). Keys that act only off the first update or through the sampler
    are named on their line (ratio, log-probs, staleness)."""
    members = (
        ("leave-one-out", config.advantage_estimator == "leave_one_out"),
        ("KL in the reward", config.kl_in_reward_coef > 0),
        ("dynamic sampling", config.dynamic_sampling),
    )
    name = algorithm_name(config, tuple(member for member, on in members if on))
    rows = [
        ("advantage", _advantage_line(config)),
        ("ratio", _ratio_line(config)),
        ("loss", _loss_line(config)),
        ("log-probs", _logprob_line(config)),
        ("KL", _kl_line(config)),
        ("staleness", _staleness_line(config)),
    ]
    if getattr(config, "tool_summary", None):  # python_tool: true (drgrpo/algorithm/rollout/arguments.py)
        rows.append(("rollout", config.tool_summary))
    width = max(len(key) for key, _ in rows)
    lines = [f"GRPO family card: {name}", *(f"  {key:<{width}}  {value}" for key, value in rows)]
    return "\n".join(lines)
