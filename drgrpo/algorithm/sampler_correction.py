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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

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
    """`weights` (rows, tokens), or (rows, 1) for the sequence modes; and per masked token: |log learner - log
    sampler|, the ratio before truncation, and whether truncation or masking changed it."""

    weights: torch.Tensor
    logp_difference: torch.Tensor
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
    token_ratios = ratios.expand_as(learner)[valid]
    gap = (learner - sampler).abs()[valid]
    return SamplerWeights(
        weights=weights,
        logp_difference=gap[~torch.isnan(gap)],
        ratios=token_ratios,
        changed=outside.expand_as(learner)[valid],
    )


def corrected_advantages(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-token advantages A_i * w_it (rows, tokens). TRL multiplies each token's clipped loss -min(r A, clip(r) A)
    by w; for w >= 0 that equals the clipped loss of A * w, so the weight can ride on the advantage, which TRL's loss
    takes per token (for cispo, sapo and the KL term alike: they are linear in A or independent of it)."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    return advantages * weights
