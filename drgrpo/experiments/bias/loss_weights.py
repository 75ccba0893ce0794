"""How much each token of a group is pushed, under TRL 1.16's `grpo`, `dapo` and `dr_grpo` loss aggregations.

With one update per batch of rollouts the importance ratio is 1 when the gradient is taken, so the clipped surrogate
`-min(rho * A, clip(rho) * A)` has derivative `-A_i` with respect to each token's log-probability, and the loss
aggregation alone decides how that is scaled. TRL 1.16 (`GRPOTrainer._compute_loss`), one process, one micro-batch of
`B` completions, completion `i` with `|o_i|` tokens, `C = max_completion_length`:

| loss_type | loss | gradient of the objective w.r.t. each token's log-prob |
|---|---|---|
| grpo | `mean_i( sum_t L_it / |o_i| )` | `A_i / (B * |o_i|)`: a token of a long completion gets less |
| dapo | `sum_it L_it / sum_i |o_i|` (`num_items_in_batch`) | `A_i / sum_j |o_j|`: the same for every token |
| dr_grpo | `sum_it L_it / (B * C)` | `A_i / (B * C)`: a constant |

Under `grpo` a completion's total push, `|o_i| * weight`, is `A_i / B` whatever its length, so a long wrong answer is
penalised less per token than a short one (and a short right answer rewarded more): Liu et al., "Understanding
R1-Zero-Like Training: A Critical Perspective" (arXiv 2503.20783), section 3.1. The std division of the advantage is
the second bias: it gives a question whose group is almost all right or all wrong more total advantage than a
half-right one (`advantage_mass`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from drgrpo.algorithm.advantages import group_advantages

LOSS_TYPES = ("grpo", "dapo", "dr_grpo")


def token_weights(
    advantages: Sequence[float], lengths: Sequence[int], loss_type: str, max_completion_length: int
) -> list[float]:
    """Each completion's per-token weight: the gradient of TRL 1.16's objective (minus its loss) with respect to one
    of its tokens' log-probabilities at ratio 1, for a micro-batch of exactly these completions on one process.

    Source: `trl.GRPOTrainer._compute_loss` (TRL 1.16), the `grpo`, `dapo` and `dr_grpo` branches (table above).
    """
    if len(advantages) != len(lengths) or not lengths:
        raise ValueError(f"need one length per advantage, got {len(advantages)} advantages and {len(lengths)} lengths")
    if any(length < 1 for length in lengths):
        raise ValueError(f"every completion has at least one token (its end-of-sequence), got lengths {list(lengths)}")
    if any(length > max_completion_length for length in lengths):
        raise ValueError(
            f"lengths {list(lengths)} exceed max_completion_length={max_completion_length}: TRL stops generating "
            "there; raise --max_completion_length."
        )
    num = len(lengths)
    if loss_type == "grpo":
        return [a / (num * length) for a, length in zip(advantages, lengths, strict=True)]
    if loss_type == "dapo":
        total = sum(lengths)
        return [a / total for a in advantages]
    if loss_type == "dr_grpo":
        return [a / (num * max_completion_length) for a in advantages]
    raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")


@dataclass(frozen=True)
class LossWeights:
    """One group's advantages and per-token weights under each loss (see `group_loss_weights`)."""

    rewards: list[float]
    lengths: list[int]
    advantage_scaled: list[float]  # std-scaled (scale_rewards=group): GRPO, and TRL's default
    advantage_unscaled: list[float]  # no std division (scale_rewards=none): Dr.GRPO
    weights: dict[str, list[float]]  # loss_type -> per-token weight of each completion
    max_completion_length: int


# Which advantage each loss is paired with: the algorithms as this project runs them. `grpo` is the paper's GRPO
# baseline (std-scaled advantages, per-completion mean), `dapo` TRL 1.16's default (std-scaled, token mean), and
# `dr_grpo` Dr.GRPO (no std division, constant normaliser).
SCALED_ADVANTAGE = {"grpo": True, "dapo": True, "dr_grpo": False}


def group_loss_weights(
    rewards: Sequence[float],
    lengths: Sequence[int],
    max_completion_length: int,
    *,
    std_ddof: int = 1,
    epsilon: float = 1e-4,
) -> LossWeights:
    """Advantages (`drgrpo.algorithm.advantages.group_advantages`, TRL's std convention by default) and
    `token_weights` of one group taken as the whole micro-batch, each loss with the advantage its algorithm uses
    (`SCALED_ADVANTAGE`)."""
    if len(rewards) != len(lengths):
        raise ValueError(f"REWARDS has {len(rewards)} values but LENGTHS has {len(lengths)}: give one length each.")
    tensor = torch.tensor(list(rewards), dtype=torch.float64)
    scaled = group_advantages(tensor, len(rewards), scale_by_std=True, std_ddof=std_ddof, epsilon=epsilon).tolist()
    unscaled = group_advantages(tensor, len(rewards), scale_by_std=False).tolist()
    weights = {
        loss: token_weights(scaled if SCALED_ADVANTAGE[loss] else unscaled, lengths, loss, max_completion_length)
        for loss in LOSS_TYPES
    }
    return LossWeights(list(rewards), list(lengths), scaled, unscaled, weights, max_completion_length)


def advantage_mass(num_correct: int, group_size: int, *, scale_by_std: bool, std_ddof: int = 1, epsilon: float = 1e-4):
    """`sum_i |A_i|` of a group of binary rewards with `num_correct` right answers: how hard the question pulls.

    Without std scaling it is `2 G p (1 - p)` (p = num_correct / G), largest for a half-right group; with it, it is
    divided by the group std, which lifts groups that are nearly all right or all wrong (Liu et al. 2025, section 3.1).
    """
    if not 0 <= num_correct <= group_size:
        raise ValueError(f"num_correct must be in 0..{group_size}, got {num_correct}")
    rewards = torch.tensor([1.0] * num_correct + [0.0] * (group_size - num_correct), dtype=torch.float64)
    advantages = group_advantages(rewards, group_size, scale_by_std=scale_by_std, std_ddof=std_ddof, epsilon=epsilon)
    return advantages.abs().sum().item()


def loss_weight_table(result: LossWeights) -> str:
    """The per-completion table: reward, length, both advantages, per-token weight and total under each loss."""
    header = f"{'i':>2} {'reward':>6} {'len':>4} {'A (std)':>8} {'A (Dr)':>7}" + "".join(
        f" {loss + ' /token':>14} {'total':>8}" for loss in LOSS_TYPES
    )
    lines = [header]
    for i, (reward, length) in enumerate(zip(result.rewards, result.lengths, strict=True)):
        scaled, unscaled = result.advantage_scaled[i], result.advantage_unscaled[i]
        row = f"{i:>2} {reward:>6.3g} {length:>4} {scaled:>+8.4f} {unscaled:>+7.4f}"
        for loss in LOSS_TYPES:
            weight = result.weights[loss][i]
            row += f" {weight:>+14.6f} {weight * length:>+8.4f}"
        lines.append(row)
    lines.append(
        f"advantages: 'A (std)' divided by the group std (grpo, dapo columns), 'A (Dr)' not (dr_grpo column); "
        f"per-token weight = d(objective)/d(log-prob of one token) in TRL 1.16 at ratio 1, the group as one "
        f"micro-batch (B={len(result.lengths)}, dapo tokens={sum(result.lengths)}, dr_grpo C="
        f"{result.max_completion_length}); total = weight x length."
    )
    return "\n".join(lines)


def advantage_mass_table(group_size: int = 8, *, std_ddof: int = 1, epsilon: float = 1e-4) -> str:
    """For 0..G right answers: sum |A| with and without std scaling, and each relative to a half-right group."""
    half = group_size // 2
    scaled_half = advantage_mass(half, group_size, scale_by_std=True, std_ddof=std_ddof, epsilon=epsilon)
    unscaled_half = advantage_mass(half, group_size, scale_by_std=False)
    lines = [f"{'right':>5} {'sum|A| std-scaled':>18} {'(vs half)':>9} {'sum|A| Dr.GRPO':>15} {'(vs half)':>9}"]
    for k in range(group_size + 1):
        scaled = advantage_mass(k, group_size, scale_by_std=True, std_ddof=std_ddof, epsilon=epsilon)
        unscaled = advantage_mass(k, group_size, scale_by_std=False)
        lines.append(
            f"{k:>2}/{group_size:<2} {scaled:>18.4f} {scaled / scaled_half:>9.2f} {unscaled:>15.4f} "
            f"{unscaled / unscaled_half:>9.2f}"
        )
    lines.append(f"binary rewards, G={group_size}, std ddof={std_ddof}, eps={epsilon:g}")
    return "\n".join(lines)
