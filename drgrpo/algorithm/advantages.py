"""Group-relative advantages: the one place where GRPO and Dr.GRPO differ in their baseline.

See ``docs``: the background for this project (section 1 of the GRPO background note) and
Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective" (arXiv 2503.20783).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def combine_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted sum of several reward functions' scores, one total per completion.

    A reward function may return ``None`` (NaN here) for a completion it cannot score; such entries are skipped in
    the sum. A completion that *every* function left unscored stays NaN, so that ``group_advantages`` can leave it
    out of its group's statistics instead of treating it as a reward of 0. This is TRL's ``sum_then_normalize``
    aggregation (``GRPOTrainer._generate_and_score_completions``).

    Args:
        rewards_per_func: ``(N, F)`` scores of ``F`` reward functions on ``N`` completions.
        weights: ``(F,)`` weight of each reward function.
    """
    weighted = rewards_per_func * weights.to(rewards_per_func.device, rewards_per_func.dtype).unsqueeze(0)
    total = weighted.nansum(dim=1)
    total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return total


def truncated_completions(completion_ids: list[list[int]], stop_token_ids: list[int]) -> torch.Tensor:
    """Which completions were cut at the generation limit: their last token is not a stop token (EOS or pad).

    TRL's own definition (``GRPOTrainer._generate_and_score_completions``, ``mask_truncated_completions``), applied
    to TRL's per-completion token lists, which end at and include the first EOS. An empty completion ended at once
    and is not truncated.
    """
    stops = set(stop_token_ids)
    return torch.tensor([bool(ids) and ids[-1] not in stops for ids in completion_ids], dtype=torch.bool)


def lowest_scores(
    names: Sequence[str], ranges: Sequence[tuple[float, float] | None], weights: Sequence[float]
) -> list[float]:
    """Per reward function, the score that makes the weighted total lowest: the lowest value of its declared
    ``reward_range`` for a weight >= 0, the highest for a negative weight (a truncated completion's scores under
    ``zero_reward_for_truncated``).

    Raises a ``ValueError`` (one line, naming the reward and the fix) when a function declares no range, or an
    unbounded side is needed: the truncated completion could then still score more than one that ended.
    """
    lowest = []
    for name, bounds, weight in zip(names, ranges, weights, strict=True):
        if bounds is None:
            raise ValueError(
                f"zero_reward_for_truncated needs the range of every reward function, and {name!r} declares none, so "
                "a truncated completion could still score more than one that ended. Fix: give the function a "
                f"reward_range attribute (e.g. `{name}.reward_range = (0.0, 1.0)`), or set zero_reward_for_truncated: "
                "false (mask_truncated_completions: true leaves truncated completions out of the loss instead)."
            )
        value = float(bounds[0] if weight >= 0 else bounds[1])
        if not math.isfinite(value):
            side = "lowest" if weight >= 0 else "highest (its reward_weights entry is negative)"
            raise ValueError(
                f"zero_reward_for_truncated needs the {side} value of {name!r}, whose reward_range {tuple(bounds)} "
                "is unbounded there. Fix: declare a finite reward_range, or set zero_reward_for_truncated: false."
            )
        lowest.append(value)
    return lowest


def floor_truncated_rewards(
    rewards_per_func: torch.Tensor, truncated: torch.Tensor, lowest: torch.Tensor
) -> torch.Tensor:
    """Every score of a truncated completion set to ``lowest`` (one entry per function, from ``lowest_scores``),
    unscored (NaN) ones included; and every missing score of a completion that ended, where another function scored
    it, set to that function's lowest as well. The other scores are unchanged.

    So a completion cut at the generation budget gets the lowest total the reward functions can give, and never
    scores more than a completion of its group that ended. With the Dr.GRPO paper's correctness-only 0/1 reward this
    is its rule, reward 0 (Liu et al. 2025, Table 6; understand-r1-zero's ``ZeroMathActor`` sets the reward to 0 when
    vLLM's ``finish_reason == "length"``). With DAPO's overlong penalty (``overlong``, -1 at the limit) it keeps that
    penalty's -1 and adds the correctness reward's lowest (0), instead of zeroing the penalty away. TRL's
    ``mask_truncated_completions`` (DAPO's "overlong filtering") instead drops a truncated completion from the loss.

    A missing score (a reward returned None: a custom reward's timeout or exception, counted in
    ``rewards/<name>/failures``) would be summed as 0 (``combine_rewards``, TRL's ``nansum``), which is below the floor
    of a function whose lowest value is above 0 (or, with a negative weight, whose highest is below 0): an ended
    completion would then total less than a truncated one. At the function's lowest it scores what a truncated
    completion scores there, so the floor stays the lowest total. A completion that no function scored stays
    unscored (NaN): left out of its group's statistics, advantage 0, as in TRL.

    Args:
        rewards_per_func: ``(N, F)`` scores of ``F`` reward functions on ``N`` completions.
        truncated: ``(N,)`` booleans from ``truncated_completions``.
        lowest: ``(F,)`` the score each function gives a truncated completion.
    """
    floor = lowest.to(rewards_per_func.device, rewards_per_func.dtype).unsqueeze(0).expand_as(rewards_per_func)
    missing = torch.isnan(rewards_per_func)
    partly_scored = ~missing.all(dim=1, keepdim=True)
    at_floor = truncated.to(rewards_per_func.device).unsqueeze(1) | (missing & partly_scored)
    return torch.where(at_floor, floor, rewards_per_func)


def truncated_at_group_lowest(rewards: torch.Tensor, truncated: torch.Tensor, group_size: int) -> torch.Tensor:
    """Every truncated completion's total set to the lowest total of its group (its own and the other truncated ones'
    included), after every term that enters the advantage; the other totals unchanged.

    ``floor_truncated_rewards`` makes a truncated completion's *score* the lowest, but a KL folded into the reward
    (``kl_in_reward_coef``, ``R - coef * sum_t KL_t``) comes after it, and truncated completions are the longest, so
    their summed KL varies most (a k1 sum can be negative): a cut completion with a small penalty would otherwise end
    above an ended one, or above its group's mean. Clamped here, it is never above any completion of its group, so
    its advantage is at most every other one's, and at most 0, under every baseline and std scaling (all are
    increasing in the total within a group). Truncated completions of one group all get the same total: a group in
    which every completion was cut carries no signal, as it does without a KL. Without a KL the floor is already the
    lowest total and this changes nothing. (Oat subtracts the KL after zeroing the reward, as we did before.)

    Args:
        rewards: flat ``(N,)`` totals, groups contiguous; NaN marks an unscored completion (ignored here).
        truncated: ``(N,)`` booleans from ``truncated_completions``.
        group_size: completions per prompt.
    """
    grouped = rewards.view(-1, group_size)
    lowest = torch.where(torch.isnan(grouped), math.inf, grouped).amin(dim=1, keepdim=True).expand_as(grouped)
    cut = truncated.to(rewards.device).view(-1, group_size)
    return torch.where(cut & torch.isfinite(lowest), lowest, grouped).reshape(-1)


def group_advantages(
    rewards: torch.Tensor,
    group_size: int,
    *,
    scale_by_std: bool = True,
    std_ddof: int = 1,
    epsilon: float = 1e-4,
    verl_single_sample_rule: bool = False,
    leave_one_out: bool = False,
) -> torch.Tensor:
    """Group-relative advantage of every completion, ``A_i = (R_i - mean_g(R)) / (std_g(R) + eps)``.

    Sources: GRPO, Shao et al., "DeepSeekMath" (arXiv 2402.03300), eq. for outcome supervision; Dr.GRPO,
    Liu et al. (arXiv 2503.20783), section 3.2, which drops the std division (``scale_by_std=False``:
    ``A_i = R_i - mean_g(R)``) because it up-weights questions that are too easy or too hard.

    Conventions differ between implementations only when ``scale_by_std`` is on:
    TRL ``GRPOTrainer``: ``std_ddof=1, epsilon=1e-4`` (the defaults here); verl ``compute_grpo_outcome_advantage``:
    ``std_ddof=1, epsilon=1e-6``; population std as in the hand-computed reference: ``std_ddof=0, epsilon=1e-8``.

    Args:
        rewards: flat ``(N,)`` tensor of total rewards, the ``group_size`` completions of one prompt contiguous
            (TRL's ``RepeatSampler`` order). NaN marks a completion that could not be scored.
        group_size: completions per prompt (TRL ``num_generations``, verl ``rollout.n``).
        scale_by_std: divide by the group's std (GRPO) or not (Dr.GRPO).
        std_ddof: delta degrees of freedom of the std (0: population std, 1: Bessel-corrected sample std).
        epsilon: added to the std before dividing, so that an all-equal group gives 0 rather than NaN.
        verl_single_sample_rule: only for ``group_size == 1``. Off (default, TRL's rule): a lone sample is its own
            mean, so its advantage is 0; it carries no signal. On: verl's ``compute_grpo_outcome_advantage`` rule
            (``mean = 0``, ``std = 1``), so the advantage is the raw reward (divided by ``1 + epsilon`` when scaling).
        leave_one_out: baseline each completion with the mean of its *siblings* instead of the whole group,
            ``A_i = R_i - mean_{j != i} R_j`` (RLOO: Ahmadian et al., "Back to Basics", arXiv 2402.14740, eq. 6;
            Kool et al. 2019). With ``n`` scored samples this equals ``n / (n - 1) * (R_i - mean_g(R))``. When
            ``scale_by_std`` is on, the result is divided by the same group std as above. A group with a single scored
            sample has no sibling and gets 0.

    Returns:
        ``(N,)`` float tensor. NaN rewards are excluded from their group's mean and std and get advantage 0.
        A group with fewer than ``std_ddof + 1`` scored samples has std 0. An all-equal group gives all zeros, and
        so does every group of one sample unless ``verl_single_sample_rule`` is on.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if rewards.dim() != 1 or rewards.numel() % group_size != 0:
        raise ValueError(
            f"rewards must be a flat tensor whose length is a multiple of group_size={group_size}, "
            f"got shape {tuple(rewards.shape)}"
        )
    rewards = rewards if rewards.is_floating_point() else rewards.float()
    grouped = rewards.view(-1, group_size)
    valid = ~torch.isnan(grouped)

    if leave_one_out and group_size == 1:
        raise ValueError(
            "leave_one_out needs at least 2 completions per prompt (num_generations >= 2): a lone completion has no "
            "sibling to baseline it with. Use advantage_estimator: group_mean or raise num_generations."
        )
    if group_size == 1 and verl_single_sample_rule:
        mean = torch.zeros_like(grouped)
        std = torch.ones_like(grouped)
        all_equal = torch.zeros_like(valid)
    else:
        count = valid.sum(dim=1, keepdim=True)
        filled = torch.where(valid, grouped, torch.zeros_like(grouped))
        mean = filled.sum(dim=1, keepdim=True) / count.clamp(min=1)
        squared = torch.where(valid, (grouped - mean) ** 2, torch.zeros_like(grouped))
        dof = (count - std_ddof).clamp(min=1)
        std = torch.sqrt(squared.sum(dim=1, keepdim=True) / dof)
        std = torch.where(count > std_ddof, std, torch.zeros_like(std))
        # An all-equal group gets exactly 0: its float mean can miss its value by a rounding step (a sum of three
        # equal floats is not always exact), which a small epsilon would turn into an advantage of order 1.
        high = torch.where(valid, grouped, -math.inf).amax(dim=1, keepdim=True)
        low = torch.where(valid, grouped, math.inf).amin(dim=1, keepdim=True)
        all_equal = (high == low).expand_as(grouped)

    advantages = torch.where(all_equal, torch.zeros_like(grouped), grouped - mean)
    if leave_one_out:
        # R_i - (S - R_i) / (n - 1) = n / (n - 1) * (R_i - S / n); no sibling (n <= 1) -> 0.
        n = count.to(advantages.dtype)
        advantages = advantages * torch.where(count > 1, n / (n - 1).clamp(min=1), 0.0)
    if scale_by_std:
        # A sample at its group's mean stays exactly 0, also with epsilon 0 and std 0 (no 0/0 = NaN).
        advantages = torch.where(advantages == 0, advantages, advantages / (std + epsilon))
    advantages = torch.where(valid, advantages, torch.zeros_like(advantages))
    return advantages.view(-1)


def advantage_table(rewards: list[float], *, std_ddof: int = 1, epsilon: float = 1e-4) -> str:
    """A plain-text table of one group: reward, GRPO advantage, Dr.GRPO advantage, reinforced or not; mean and std."""
    tensor = torch.tensor(rewards, dtype=torch.float64)
    grpo = group_advantages(tensor, len(rewards), scale_by_std=True, std_ddof=std_ddof, epsilon=epsilon)
    dr_grpo = group_advantages(tensor, len(rewards), scale_by_std=False)
    mean = tensor.mean().item()
    std = tensor.std(correction=std_ddof).item() if len(rewards) > std_ddof else 0.0
    lines = [
        f"{'i':>3} {'reward':>9} {'GRPO A':>10} {'Dr.GRPO A':>10}  reinforced",
        *(
            f"{i:>3} {r:>9.4f} {g:>+10.4f} {d:>+10.4f}  {'yes' if d > 0 else 'no'}"
            for i, (r, g, d) in enumerate(zip(rewards, grpo.tolist(), dr_grpo.tolist(), strict=True))
        ),
        f"group: G={len(rewards)} mean={mean:.4f} std={std:.6f} (ddof={std_ddof}, eps={epsilon:g})",
    ]
    return "\n".join(lines)
