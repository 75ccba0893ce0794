"""The importance-sampling correction of a sampler that is not the learner: TRL's, applied to the CPU engine's samples.

The CPU engine samples from bf16 weights (drgrpo/algorithm/rollout/engine.py) while the loss computes the learner's
log-probs from float32 weights under autocast: the completions are slightly off-policy, as vLLM's are. TRL corrects
vLLM's samples by weighting each token's clipped loss with the ratio pi_learner / pi_sampler (truncated importance
sampling, Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"; Oat weights by
min(ratio, 2) by default). `sampler_weights` is that weight with TRL 1.16's semantics
(`GRPOTrainer._generate_and_score_completions`, the `vllm_importance_sampling_*` keys):

- `token_truncate`: w_t = clamp(pi_learner_t / pi_sampler_t, clip_min, clip_max);
- `token_mask`: w_t = the ratio where it lies in [clip_min, clip_max], else 0;
- `sequence_truncate` / `sequence_mask`: the same on one ratio per completion, prod_t over its tokens, given to all
  of them (a product over many tokens: long completions are cut or dropped far more often, a length bias).

The weight is not the PPO ratio pi_theta / pi_old, which stays exactly 1 at the first update: it multiplies the
clipped term, detached. A token whose sampler log-prob is unknown (NaN) gets weight 1, as in TRL.

Its metrics are TRL's, with TRL's meaning, so that a CPU run's dashboard reads like a GPU run's: for each generation
batch, on each rank, `sampling/sampling_logp_difference/{mean,max}` of |log pi_learner - log pi_sampler| over the
completion tokens (tool tokens and unknown log-probs left out) and `sampling/importance_sampling_ratio/{min,mean,max}`
of the weight TRL applies (after truncation or masking; one per completion in the sequence modes, one per token
otherwise), an empty rank giving 0; then over ranks the mean of the means and the extremes of the extremes
(`trl_sampling_metrics`). What TRL does not log is the engine's own: the ratio before truncation or masking and the
share of ratios truncation or masking changed, `engine/sampler_ratio/{min,mean,max,truncated_share}`
(`engine_ratio_metrics`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from drgrpo.observe import metric_names as names

SEQUENCE_MODES = ("sequence_mask", "sequence_truncate")
TRUNCATE_MODES = ("token_truncate", "sequence_truncate")
MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
TRL_MODE = "sequence_mask"  # TRL 1.16's default (GRPOConfig), kept for vLLM
ENGINE_MODE = "token_truncate"  # the CPU engine's default: per token, no length bias


@dataclass
class SamplerCorrectionArguments:
    """The correction's mode, unset by default: the CPU engine then takes `token_truncate`, vLLM TRL's default
    (`sequence_mask`). A recipe that leaves it unset on the CPU engine got TRL's sequence mask silently before issue
    54, a length bias (a product of per-token ratios over a long completion leaves [clip_min, clip_max] far more often
    than over a short one); every shipped CPU recipe sets `token_truncate`. Mixed into `DrGRPOConfig` ahead of TRL's
    `GRPOConfig`, whose field of the same name it replaces; `resolve_sampler_mode` fills it."""

    vllm_importance_sampling_mode: str | None = field(
        default=None,
        metadata={
            "help": "How the sampler-vs-learner mismatch is corrected (vllm_importance_sampling_correction: true): "
            "'token_truncate' (per-token ratio, clipped), 'token_mask' (out-of-range tokens masked), "
            "'sequence_truncate', 'sequence_mask' (one ratio per completion: a product over its tokens, so long "
            "completions are cut or dropped more often, a length bias). Unset: 'token_truncate' on the CPU engine, "
            "TRL's 'sequence_mask' with vLLM; the family card says which, and why."
        },
    )

    def resolve_sampler_mode(self, engine: str) -> None:
        """Fill an unset mode for `engine` ('cpu' or 'trl'), remembering that it was unset (the card says so once)."""
        self.sampler_mode_unset = self.vllm_importance_sampling_mode is None
        if self.sampler_mode_unset:
            self.vllm_importance_sampling_mode = ENGINE_MODE if engine == "cpu" else TRL_MODE
        if self.vllm_importance_sampling_mode not in MODES:
            raise ValueError(
                f"vllm_importance_sampling_mode={self.vllm_importance_sampling_mode!r}: choose one of "
                f"{', '.join(MODES)}, or leave it unset."
            )


@dataclass(frozen=True)
class SamplerWeights:
    """`weights` (rows, tokens), or (rows, 1) for the sequence modes; |log learner - log sampler| per masked token
    (unknown ones left out); and in TRL's units (each completion in the sequence modes, each masked token otherwise)
    the weight applied, the ratio before truncation or masking, and whether truncation or masking changed it."""

    weights: torch.Tensor
    logp_difference: torch.Tensor
    applied: torch.Tensor
    ratios: torch.Tensor
    changed: torch.Tensor


def sampler_weights(
    learner_logps: torch.Tensor,
    sampler_logps: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    clip_min: float | None,
    clip_max: float | None,
) -> SamplerWeights:
    """TRL's importance-sampling weight of each token (module docstring), from the learner's and the sampler's
    per-token log-probs (rows, tokens) and the loss mask."""
    if mode not in MODES:
        raise ValueError(f"vllm_importance_sampling_mode={mode!r}: choose one of {', '.join(MODES)}.")
    learner, sampler = learner_logps.detach().float(), sampler_logps.float()
    valid = mask.bool()
    difference = torch.nan_to_num((learner - sampler) * valid, nan=0.0)
    if mode in SEQUENCE_MODES:
        difference = difference.sum(dim=-1, keepdim=True)
    ratios = torch.exp(difference)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    outside = (ratios < low) | (ratios > high)
    if mode in TRUNCATE_MODES:
        weights = ratios.clamp(min=clip_min, max=clip_max)
    else:
        weights = ratios.masked_fill(outside, 0.0)
    units = (lambda values: values.flatten()) if mode in SEQUENCE_MODES else (lambda values: values[valid])
    gap = (learner - sampler).abs()[valid]
    return SamplerWeights(
        weights=weights,
        logp_difference=gap[~torch.isnan(gap)],
        applied=units(weights),
        ratios=units(ratios),
        changed=units(outside),
    )


def corrected_advantages(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-token advantages A_i * w_it (rows, tokens). TRL multiplies each token's clipped loss -min(r A, clip(r) A)
    by w; for w >= 0 that equals the clipped loss of A * w, so the weight can ride on the advantage, which TRL's loss
    takes per token (for cispo, sapo and the KL term alike: they are linear in A or independent of it)."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    return advantages * weights


# One rank's figures of the correction, summed over the micro-batches of a generation batch (`CorrectionFigures`) and
# gathered over ranks as rows of these columns.
FIGURES = (
    "gap_sum", "gaps", "gap_max", "weight_sum", "weights", "weight_min", "weight_max", "ratio_sum", "ratio_min",
    "ratio_max", "changed",
)  # fmt: skip
_COLUMN = {name: index for index, name in enumerate(FIGURES)}


def local_figures(
    gaps: torch.Tensor, applied: torch.Tensor, ratios: torch.Tensor | None = None, changed: torch.Tensor | None = None
) -> torch.Tensor:
    """(len(FIGURES),) float64 figures of one rank's |log-prob differences| `gaps` and applied weights `applied`, with
    the ratios before truncation and the changed flags where known (the same units as `applied`). Empty extremes are
    +-inf, so that `merge_figures` takes the other side's."""
    ratios = applied if ratios is None else ratios
    changed = torch.zeros_like(applied, dtype=torch.bool) if changed is None else changed

    def extreme(values: torch.Tensor, reduce, empty: float) -> float:
        return reduce(values).item() if values.numel() else empty

    inf = float("inf")
    return torch.tensor(
        [
            gaps.sum().item(), gaps.numel(), extreme(gaps, torch.max, -inf),
            applied.sum().item(), applied.numel(), extreme(applied, torch.min, inf), extreme(applied, torch.max, -inf),
            ratios.sum().item(), extreme(ratios, torch.min, inf), extreme(ratios, torch.max, -inf),
            changed.sum().item(),
        ],
        dtype=torch.float64,
    )  # fmt: skip


def merge_figures(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """The figures of two parts of one rank's batch together: sums and counts add, extremes are the extremes."""
    merged = first + second
    for name in ("gap_max", "weight_max", "ratio_max"):
        merged[_COLUMN[name]] = max(first[_COLUMN[name]], second[_COLUMN[name]])
    for name in ("weight_min", "ratio_min"):
        merged[_COLUMN[name]] = min(first[_COLUMN[name]], second[_COLUMN[name]])
    return merged


def trl_sampling_metrics(ranks: torch.Tensor) -> dict[str, float]:
    """TRL 1.16's `sampling/` metrics (`GRPOTrainer._generate_and_score_completions`) from every rank's figures
    (ranks, len(FIGURES)): per rank the mean and max of the differences and the min, mean and max of the applied
    weights, 0 where the rank has none; over ranks the mean of the means (`.mean()`, the weight's `.nanmean()`), the max
    of the maxima and the min of the minima (`nanmax`, `nanmin`)."""
    column = {name: ranks[:, index] for index, name in enumerate(FIGURES)}

    def per_rank(value: torch.Tensor, count: str) -> torch.Tensor:  # TRL's torch.tensor(0.0) for an empty rank
        return torch.where(column[count] > 0, value, torch.zeros_like(value))

    return {
        names.SAMPLING_LOGP_DIFFERENCE_MEAN: per_rank(column["gap_sum"] / column["gaps"], "gaps").mean().item(),
        names.SAMPLING_LOGP_DIFFERENCE_MAX: per_rank(column["gap_max"], "gaps").max().item(),
        names.IMPORTANCE_RATIO_MIN: per_rank(column["weight_min"], "weights").min().item(),
        names.IMPORTANCE_RATIO_MEAN: per_rank(column["weight_sum"] / column["weights"], "weights").nanmean().item(),
        names.IMPORTANCE_RATIO_MAX: per_rank(column["weight_max"], "weights").max().item(),
    }


def engine_ratio_metrics(ranks: torch.Tensor) -> dict[str, float]:
    """The engine's own figures over every rank's units (empty: none): the ratio pi_learner / pi_sampler before
    truncation or masking (min, mean, max) and the share of them that truncation or masking changed."""
    column = {name: ranks[:, index] for index, name in enumerate(FIGURES)}
    units = column["weights"].sum().item()
    if not units:
        return {}
    return {
        names.ENGINE_SAMPLER_RATIO_MIN: column["ratio_min"].min().item(),
        names.ENGINE_SAMPLER_RATIO_MEAN: column["ratio_sum"].sum().item() / units,
        names.ENGINE_SAMPLER_RATIO_MAX: column["ratio_max"].max().item(),
        names.ENGINE_SAMPLER_RATIO_TRUNCATED: column["changed"].sum().item() / units,
    }


class CorrectionFigures:
    """One rank's figures of the correction over the micro-batches of one generation batch, taken once it is whole."""

    def __init__(self) -> None:
        self.figures: torch.Tensor | None = None

    def add(self, result: SamplerWeights) -> None:
        figures = local_figures(result.logp_difference, result.applied, result.ratios, result.changed)
        self.figures = figures if self.figures is None else merge_figures(self.figures, figures)

    def take(self) -> torch.Tensor:
        figures = self.figures if self.figures is not None else local_figures(torch.zeros(0), torch.zeros(0))
        self.figures = None
        return figures
