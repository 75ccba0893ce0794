"""Per-step diagnostics of a GRPO / Dr.GRPO run: the settings of the warnings and the per-batch metrics.

What to watch comes from the background note's section 5 ("When training fails: what to look at first"): pass rate,
the share of groups whose rewards are all equal split into all-correct / all-wrong, response length split into correct
/ incorrect (the key curve of Liu et al., "Understanding R1-Zero-Like Training", arXiv 2503.20783, figure 5),
truncation, entropy, KL, clip fraction, and the current/old probability ratio before the first update.

Every formula is a small pure function on tensors or lists of floats, so it can be tested against hand-computed
numbers; `DrGRPOTrainer` only gathers the batch tensors and calls them. The warnings that read these metrics are in
`drgrpo.observe.failure_warnings`. All metric names share the `diag/` prefix so
that dashboards (wandb, TensorBoard) group them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

# The metric names live in an import-light module, so that plots read them without loading torch.
from drgrpo.observe.metric_names import (
    GROUPS_ALL_CORRECT,
    GROUPS_ALL_WRONG,
    LENGTH_CORRECT,
    LENGTH_INCORRECT,
    PASS_AT_GROUP,
    PASS_RATE,
    TRUNCATED_SHARE_OF_CORRECT,
    TRUNCATION_RATE,
)


# ----------------------------------------------------------------------------------------------------------------------
# Settings (mixed into DrGRPOConfig, so a recipe sets them like any other trainer key)
# ----------------------------------------------------------------------------------------------------------------------
@dataclass
class DiagnosticsArguments:
    """Which reward counts as "correct", and the thresholds of the warnings that point at a failure's cause."""

    correctness_reward: str | None = field(
        default=None,
        metadata={
            "help": "Name of the reward function whose score says whether a completion is correct (pass rate, pass@G, "
            "correct/incorrect lengths). Unset: 'accuracy' when it is among reward_funcs, else no correctness metrics."
        },
    )
    correctness_threshold: float = field(
        default=1.0,
        metadata={
            "help": "A completion counts as correct when its correctness reward is >= this (1.0 for 0/1 rewards)."
        },
    )
    diagnostics_warnings: bool = field(
        default=True,
        metadata={"help": "Warn (once per kind) when the logged metrics match a row of the failure checklist."},
    )
    diagnostics_window: int = field(
        default=5,
        metadata={"help": "Number of consecutive log entries a warning condition is averaged over."},
    )
    warn_zero_std_share: float = field(
        default=0.9,
        metadata={"help": "Warn when the share of groups with all-equal rewards (no gradient) exceeds this."},
    )
    warn_truncation_rate: float = field(
        default=0.5,
        metadata={"help": "Warn when the share of completions cut at max_completion_length exceeds this."},
    )
    warn_truncated_correct_share: float = field(
        default=0.2,
        metadata={
            "help": "Warn (truncation collapse) when more than this share of the completions graded correct were cut "
            "off at max_completion_length: the reward pays for numbers in unfinished text. Fix: "
            "zero_reward_for_truncated: true."
        },
    )
    warn_entropy_below: float = field(
        default=0.05,
        metadata={"help": "Warn when the mean per-token entropy (nats) falls below this."},
    )
    warn_jump_factor: float = field(
        default=5.0,
        metadata={"help": "Warn when clip fraction or KL exceeds this many times its median over the window."},
    )
    warn_clip_fraction_floor: float = field(
        default=0.05,
        metadata={"help": "A clip-fraction jump is reported only above this absolute value."},
    )
    warn_kl_floor: float = field(
        default=0.1,
        metadata={"help": "A KL jump is reported only above this absolute value."},
    )

    def check_diagnostics_settings(self) -> None:
        """Raise a `ValueError` naming the key when a diagnostics setting is out of range."""
        if self.diagnostics_window < 1:
            raise ValueError(f"diagnostics_window must be >= 1, got {self.diagnostics_window}.")
        for key in ("warn_zero_std_share", "warn_truncation_rate", "warn_truncated_correct_share"):
            value = getattr(self, key)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{key} is a share of the batch and must be in [0, 1], got {value}.")
        if self.warn_jump_factor <= 1.0:
            raise ValueError(
                f"warn_jump_factor must be > 1 (a jump is a multiple of the recent median), got "
                f"{self.warn_jump_factor}."
            )
        for key in ("warn_entropy_below", "warn_clip_fraction_floor", "warn_kl_floor"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key} must be >= 0, got {getattr(self, key)}.")


def resolve_correctness_reward(reward_func_names: Sequence[str], correctness_reward: str | None) -> int | None:
    """Index of the correctness reward among the trainer's reward functions, or None when there is none.

    `correctness_reward` unset means "the accuracy reward when present". A name that is set but not among the reward
    functions is an error (a typo would otherwise silently switch the correctness metrics off).
    """
    names = list(reward_func_names)
    if correctness_reward is None:
        return names.index("accuracy") if "accuracy" in names else None
    if correctness_reward not in names:
        raise ValueError(
            f"correctness_reward={correctness_reward!r} is not one of the run's reward functions {names}. Set "
            "correctness_reward to the name of the reward that scores correctness (e.g. 'accuracy'), or remove it."
        )
    return names.index(correctness_reward)


# ----------------------------------------------------------------------------------------------------------------------
# Per-batch metrics (pure functions)
# ----------------------------------------------------------------------------------------------------------------------
def correct_mask(correctness: torch.Tensor, threshold: float = 1.0) -> torch.Tensor:
    """Boolean mask of correct completions: correctness reward >= `threshold`; an unscored (NaN) one is not correct."""
    return torch.nan_to_num(correctness.float(), nan=-math.inf) >= threshold


def pass_rate(correctness: torch.Tensor, threshold: float = 1.0) -> float:
    """Share of scored completions that are correct; NaN when none is scored.

    For a 0/1 reward (Math-Verify accuracy) this is the mean reward, the curve the Dr.GRPO paper plots as "reward".
    """
    scored = ~torch.isnan(correctness.float())
    if not scored.any():
        return math.nan
    return correct_mask(correctness, threshold)[scored].float().mean().item()


def zero_signal_groups(totals: torch.Tensor, group_size: int) -> torch.Tensor:
    """Which groups carry no signal: their total (weighted) rewards are all equal, by TRL's own rule for
    `frac_reward_zero_std` (the NaN-skipping std of each group's summed rewards, `isclose` to 0)."""
    from trl.trainer.utils import nanstd

    std = nanstd(totals.float().view(-1, group_size), dim=1) if group_size > 1 else torch.zeros(totals.numel())
    return torch.isclose(std, torch.zeros_like(std))


def group_outcome_shares(
    correctness: torch.Tensor, group_size: int, threshold: float = 1.0, totals: torch.Tensor | None = None
) -> dict[str, float]:
    """Share of groups with no signal that are all correct, and all wrong, and of groups that hold at least one
    correct completion (pass@G).

    Groups are `group_size` contiguous completions of one prompt (TRL's `RepeatSampler` order). A group carries no
    gradient when its total rewards (`totals`: the weighted sum TRL trains on) are all equal (background note,
    section 1); TRL logs the share of such groups (`frac_reward_zero_std`), split here by correctness. Under a 0/1
    reward alone that is every all-correct or all-wrong group; with several rewards an all-correct group whose second
    reward still differs has signal and is not counted (`totals` None: the correctness reward is the total).
    Unscored (NaN) completions are left out of their group; a group with none scored counts in none of the shares.
    """
    if group_size < 1 or correctness.numel() % group_size != 0:
        raise ValueError(f"{correctness.numel()} completions do not split into groups of {group_size}.")
    grouped = correctness.float().view(-1, group_size)
    scored = ~torch.isnan(grouped)
    correct = correct_mask(grouped, threshold)
    has_scored = scored.any(dim=1)
    if totals is not None:
        has_scored = has_scored & zero_signal_groups(totals.to(grouped.device), group_size)
    all_correct = has_scored & (correct | ~scored).all(dim=1)
    all_wrong = has_scored & (~correct).all(dim=1)
    any_correct = correct.any(dim=1)
    return {
        GROUPS_ALL_CORRECT: all_correct.float().mean().item(),
        GROUPS_ALL_WRONG: all_wrong.float().mean().item(),
        PASS_AT_GROUP: any_correct.float().mean().item(),
    }


def mean_length_by_correctness(
    lengths: torch.Tensor, correctness: torch.Tensor, threshold: float = 1.0
) -> tuple[float, float]:
    """(mean length of correct completions, mean length of incorrect ones); NaN for an empty side.

    Liu et al. (arXiv 2503.20783, figure 5) show that under GRPO the length of *incorrect* answers keeps growing
    (the 1/|o_i| term penalises a long wrong answer less per token), while Dr.GRPO keeps it flat. Unscored (NaN)
    completions are in neither mean.
    """
    lengths = lengths.float()
    scored = ~torch.isnan(correctness.float())
    correct = correct_mask(correctness, threshold)
    incorrect = scored & ~correct

    def mean(selected: torch.Tensor) -> float:
        return lengths[selected].mean().item() if selected.any() else math.nan

    return mean(correct), mean(incorrect)


def completion_lengths_and_truncation(
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    stop_token_ids: Sequence[int],
    max_completion_length: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-completion token count and whether it was cut at the generation limit, from TRL's padded batch tensors.

    A completion is truncated when its last token is not a stop token (EOS or pad), TRL's own definition
    (`completions/clipped_ratio`). With `mask_truncated_completions` TRL zeroes a truncated completion's mask: such
    a row (mask sum 0; a generated completion has at least one token) counts as truncated at `max_completion_length`.
    """
    lengths = completion_mask.sum(dim=1).long()
    masked_out = lengths == 0
    last_index = (lengths - 1).clamp(min=0)
    last_token = completion_ids.gather(1, last_index.unsqueeze(1)).squeeze(1)
    stops = torch.tensor(sorted(set(stop_token_ids)), device=completion_ids.device, dtype=completion_ids.dtype)
    truncated = masked_out | ~torch.isin(last_token, stops)
    lengths = torch.where(masked_out, torch.full_like(lengths, max_completion_length), lengths)
    return lengths, truncated


def truncated_share_of_correct(truncated: torch.Tensor, correctness: torch.Tensor, threshold: float = 1.0) -> float:
    """Share of the completions graded correct that were cut off at the generation limit; NaN when none is correct.

    A truncated completion never wrote its final answer, so a grader that credits it credited a number from the
    unfinished text. When this share is high the policy is paid for rambling past the limit: the truncation collapse
    that Liu et al. (arXiv 2503.20783) avoid by scoring truncated completions 0 (`zero_reward_for_truncated`).
    """
    correct = correct_mask(correctness, threshold)
    if not correct.any():
        return math.nan
    return truncated.bool()[correct].float().mean().item()


def batch_diagnostics(
    lengths: torch.Tensor,
    truncated: torch.Tensor,
    correctness: torch.Tensor | None,
    group_size: int,
    threshold: float = 1.0,
    totals: torch.Tensor | None = None,
) -> dict[str, float]:
    """All per-batch `diag/` metrics of one generation batch (every process's completions, in group order); `totals`:
    each completion's weighted total reward, which decides whether a group has signal (`group_outcome_shares`).

    Without a correctness reward (`correctness` None) only the truncation rate is returned.
    """
    metrics = {TRUNCATION_RATE: truncated.float().mean().item()}
    if correctness is None:
        return metrics
    metrics[PASS_RATE] = pass_rate(correctness, threshold)
    metrics.update(group_outcome_shares(correctness, group_size, threshold, totals))
    metrics[LENGTH_CORRECT], metrics[LENGTH_INCORRECT] = mean_length_by_correctness(lengths, correctness, threshold)
    metrics[TRUNCATED_SHARE_OF_CORRECT] = truncated_share_of_correct(truncated, correctness, threshold)
    return metrics


def log_ratio_sums(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One process's share of the ratio statistics, as a tensor that can be gathered across processes.

    Returns a float tensor `[sum_t exp(logp - old_logp), number of tokens, max_t |logp - old_logp|]` over tokens with
    mask 1 and a finite old log-prob (vLLM marks tokens it could not score with NaN). The ratio
    rho = pi_theta / pi_old is the PPO importance ratio of the background note, section 2: before the first update on
    a batch of rollouts it must be ~1, otherwise the sampler's and the trainer's log-probs disagree.
    """
    log_ratio = logps.detach().float() - old_logps.float()
    valid = mask.bool() & torch.isfinite(log_ratio)
    if not valid.any():
        return torch.tensor([0.0, 0.0, 0.0], device=logps.device)
    selected = log_ratio[valid]
    return torch.stack(
        [selected.exp().sum(), torch.tensor(float(selected.numel()), device=logps.device), selected.abs().max()]
    )


def ratio_statistics(sums: torch.Tensor) -> tuple[float, float]:
    """(mean ratio, max |log ratio|) from `log_ratio_sums` rows of every process, stacked `(P, 3)`; NaN if no token."""
    sums = sums.view(-1, 3)
    count = sums[:, 1].sum().item()
    if count == 0:
        return math.nan, math.nan
    return sums[:, 0].sum().item() / count, sums[:, 2].max().item()


def reduce_to_max(metrics: dict[str, list[float]], names: Sequence[str], reduce=max) -> None:
    """Replace each named metric's list of values by a one-element list holding their maximum (NaNs left out; or
    their `reduce`, e.g. `min`).

    TRL's `GRPOTrainer.log` averages each metric's values since the last log; a maximum over micro-steps must be
    reduced with max before that, or it becomes a mean of maxima. A list with only NaNs is left as it is (TRL then
    logs None); a metric absent from `metrics` stays absent.
    """
    for name in names:
        values = metrics.get(name)
        if not values:
            continue
        finite = [v for v in values if not math.isnan(v)]
        if finite:
            metrics[name] = [reduce(finite)]


def before_first_update(micro_step: int, generate_every: int, gradient_accumulation_steps: int) -> bool:
    """Whether micro-step `micro_step` still runs on the weights that generated its rollouts.

    TRL generates at micro-steps that are multiples of `generate_every` (= steps_per_generation * num_iterations)
    and steps the optimizer after every `gradient_accumulation_steps` micro-steps. A micro-step sees the sampling
    weights exactly when no optimizer step happened since its rollouts were generated, i.e. when it is in the same
    accumulation window as the micro-step that generated them.
    """
    generated_at = micro_step - micro_step % generate_every
    return generated_at // gradient_accumulation_steps == micro_step // gradient_accumulation_steps
