"""Group-relative advantages: the one place where GRPO and Dr.GRPO differ in their baseline.

See ``docs``: the background for this project (section 1 of the GRPO background note) and
Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective" (arXiv 2503.20783).
"""

from __future__ import annotations

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


def zero_truncated_rewards(rewards_per_func: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """Every reward of a truncated completion set to 0, unscored (NaN) ones included; the others unchanged.

    The Dr.GRPO paper's runs score a response cut at the generation budget 0 (Liu et al. 2025, section 4 / Table 6;
    Oat's ``ZeroMathActor`` when vLLM's ``finish_reason == "length"``), so it stays in its group with the lowest
    reward instead of being graded on an unfinished answer (TRL's ``mask_truncated_completions`` instead drops it
    from the loss).

    Args:
        rewards_per_func: ``(N, F)`` scores of ``F`` reward functions on ``N`` completions.
        truncated: ``(N,)`` booleans from ``truncated_completions``.
    """
    return rewards_per_func.masked_fill(truncated.to(rewards_per_func.device).unsqueeze(1), 0.0)


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
    else:
        count = valid.sum(dim=1, keepdim=True)
        filled = torch.where(valid, grouped, torch.zeros_like(grouped))
        mean = filled.sum(dim=1, keepdim=True) / count.clamp(min=1)
        squared = torch.where(valid, (grouped - mean) ** 2, torch.zeros_like(grouped))
        dof = (count - std_ddof).clamp(min=1)
        std = torch.sqrt(squared.sum(dim=1, keepdim=True) / dof)
        std = torch.where(count > std_ddof, std, torch.zeros_like(std))

    advantages = grouped - mean
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
