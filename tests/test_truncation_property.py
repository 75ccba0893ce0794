"""The truncation guarantee over every combination of the keys that enter the advantage (issue 30, item 2).

Under `zero_reward_for_truncated`, in every group of seeded random completions (scores of reward functions with
positive and negative ranges and weights, missing scores, truncated completions that are the longest, sequence KLs
of every estimator folded into the reward):

- no truncated completion's advantage exceeds that of any completion of its group that ended;
- no truncated completion gets a positive advantage where every ended one is wrong (and, as the rule is written,
  none gets a positive advantage at all).

The product runs over `advantage_estimator`, `scale_rewards`, `multi_objective_aggregation`, `kl_in_reward_coef`
with each `kl_estimator`, `dynamic_sampling`, missing scores and the weights; each combination that
`DrGRPOConfig` accepts gets a few hundred groups. `trained_advantages` composes the pure functions in the order
`DrGRPOTrainer` calls them (`_calculate_rewards`, then TRL's advantage or `_score_generation`'s, then the dynamic
sampler's padding); `trl_advantages` is TRL 1.16's inline advantage code for the cases the trainer leaves to TRL,
checked against TRL itself in tests/test_truncation_trainer.py, which also checks the trainer against this
composition.
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
import zlib

import pytest
import torch
from trl.trainer.utils import nanstd

from drgrpo.algorithm.advantages import (
    combine_rewards,
    floor_truncated_rewards,
    group_advantages,
    lowest_scores,
    truncated_at_group_lowest,
)
from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.dynamic_sampling import informative_groups
from drgrpo.algorithm.kl import KL_ESTIMATORS, kl_penalised_rewards, kl_penalty, sequence_kl

# Three reward functions: a 0/1 accuracy, a bonus whose lowest value is above 0 (the (0.5, 1)), a penalty
# with a negative range (DAPO's overlong, -1 to 0).
RANGES = ((0.0, 1.0), (0.5, 1.0), (-1.0, 0.0))
WEIGHTS = ((1.0, 1.0, 1.0), (1.0, -0.5, 2.0), (2.0, 1.0, -1.0))
GROUPS = 256  # per combination
MAX_LENGTH = 16  # tokens; a truncated completion has all of them
TOLERANCE = 1e-5  # float32 rounding (TRL's batch mean under normalize_then_sum is 0 only to rounding)


def trl_advantages(
    rewards_per_func: torch.Tensor, weights: torch.Tensor, group_size: int, scale_rewards: str, aggregation: str
) -> torch.Tensor:
    """TRL 1.16 `GRPOTrainer._generate_and_score_completions`'s advantage, line for line (eps 1e-4, `nanstd`)."""
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    if aggregation == "sum_then_normalize":
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        mean = torch.nanmean(rewards.view(-1, group_size), dim=1).repeat_interleave(group_size)
        if scale_rewards == "batch":
            std = nanstd(rewards).expand_as(rewards)
        else:
            std = nanstd(rewards.view(-1, group_size), dim=1).repeat_interleave(group_size)
        advantages = rewards - mean
        if scale_rewards != "none":
            advantages = advantages / (std + 1e-4)
    else:
        grouped = rewards_per_func.view(-1, group_size, rewards_per_func.size(1))
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = nanstd(grouped, dim=1, keepdim=True)
        reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, rewards_per_func.size(1))
        rewards = (reward_k * weights.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        std = nanstd(rewards).expand_as(rewards)
        advantages = (rewards - torch.nanmean(rewards)) / (std + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def trained_advantages(
    config: DrGRPOConfig,
    scores: torch.Tensor,
    truncated: torch.Tensor,
    sequence_kls: torch.Tensor,
    group_size: int,
    ranges: tuple[tuple[float, float], ...] = RANGES,
) -> torch.Tensor:
    """The advantages `DrGRPOTrainer` trains on, from the reward functions' raw scores (NaN: None)."""
    weights = torch.tensor(config.reward_weights or [1.0] * len(ranges), dtype=scores.dtype)
    lowest = torch.tensor(lowest_scores([f"r{i}" for i in range(len(ranges))], ranges, weights.tolist()))
    rewards_per_func = floor_truncated_rewards(scores, truncated, lowest)  # _calculate_rewards
    if config.trl_advantage_scaling is not None:  # _score_generation keeps TRL's advantages
        advantages = trl_advantages(
            rewards_per_func, weights, group_size, config.scale_rewards, config.multi_objective_aggregation
        )
    else:
        rewards = combine_rewards(rewards_per_func, weights)
        if config.kl_in_reward_coef > 0:
            rewards = kl_penalised_rewards(rewards, sequence_kls, config.kl_in_reward_coef)
        rewards = truncated_at_group_lowest(rewards, truncated, group_size)
        advantages = group_advantages(
            rewards,
            group_size,
            scale_by_std=config.scale_rewards == "group",
            std_ddof=config.advantage_std_ddof,
            epsilon=config.advantage_epsilon,
            leave_one_out=config.advantage_estimator == "leave_one_out",
        )
    if config.dynamic_sampling:  # all-equal groups (on the task reward) are dropped, or padding with advantage 0
        kept = informative_groups(combine_rewards(rewards_per_func, weights), group_size)
        advantages = (advantages.view(-1, group_size) * kept.unsqueeze(1)).view(-1)
    return advantages


def random_groups(generator: torch.Generator, group_size: int, missing: bool, estimator: str | None):
    """Scores (N, 3) with NaN for None, truncation flags, sequence KLs of `estimator` (zeros when None)."""
    n = GROUPS * group_size

    def uniform(low: float, high: float) -> torch.Tensor:
        return low + (high - low) * torch.rand(n, generator=generator)

    accuracy = (torch.rand(n, generator=generator) < 0.3).float()
    scores = torch.stack([accuracy, uniform(0.5, 1.0), uniform(-1.0, 0.0)], dim=1)
    truncated = torch.rand(n, generator=generator) < 0.35
    grouped = truncated.view(GROUPS, group_size)
    grouped[: GROUPS // 10] = True  # some groups cut entirely
    grouped[GROUPS // 10 : GROUPS // 5] = False  # some not at all
    grouped[GROUPS // 5 : GROUPS // 4, 1:] = True  # some with one completion that ended
    if missing:  # a custom reward's timeout or exception: None for some scores, for every score of a few rows
        scores = scores.masked_fill(torch.rand(n, 3, generator=generator) < 0.2, math.nan)
        scores[torch.rand(n, generator=generator) < 0.05] = math.nan
    # Truncated completions are the longest: all MAX_LENGTH tokens; the others end anywhere before.
    lengths = torch.where(truncated, MAX_LENGTH, torch.randint(1, MAX_LENGTH, (n,), generator=generator))
    mask = (torch.arange(MAX_LENGTH).unsqueeze(0) < lengths.unsqueeze(1)).int()
    if estimator is None:
        return scores, truncated, torch.zeros(n)
    drift = 0.3 * torch.randn(n, 1, generator=generator)  # per completion: log pi_old - log pi_ref
    logprob = -2.0 * torch.rand(n, MAX_LENGTH, generator=generator)
    ref = logprob - drift - 0.5 * torch.randn(n, MAX_LENGTH, generator=generator)
    return scores, truncated, sequence_kl(kl_penalty(logprob, ref, estimator), mask)


def violations(advantages: torch.Tensor, scores: torch.Tensor, truncated: torch.Tensor, group_size: int) -> dict:
    """Groups breaking each promise, by kind: (count, the first such group's advantages and truncation flags)."""
    a, cut = advantages.view(-1, group_size), truncated.view(-1, group_size)
    highest_cut = torch.where(cut, a, -math.inf).amax(dim=1)
    lowest_ended = torch.where(cut, math.inf, a).amin(dim=1)
    right = scores[:, 0].view(-1, group_size) == 1.0  # missing (NaN) or 0 is not right
    all_ended_wrong = (cut | ~right).all(dim=1)
    found = {
        "a truncated completion above one that ended": highest_cut > lowest_ended + TOLERANCE,
        "a truncated completion positive where every ended one is wrong": all_ended_wrong & (highest_cut > TOLERANCE),
        "a truncated completion positive": highest_cut > TOLERANCE,
    }
    report = {}
    for kind, bad in found.items():
        if bad.any():
            first = int(bad.nonzero()[0])
            report[kind] = (int(bad.sum()), [round(x, 4) for x in a[first].tolist()], cut[first].int().tolist())
    return report


@functools.cache
def accepted_configs(kl_in_reward: bool) -> tuple[DrGRPOConfig, ...]:
    """Every combination of the keys that enter the advantage that DrGRPOConfig accepts (the others are one-line
    errors: leave-one-out, a KL in the reward and dynamic sampling refuse TRL's batch scaling and normalize_then_sum).
    The weights, the std convention and the KL estimator and coefficient are set per case on a copy."""
    accepted = []
    product = itertools.product(
        ("group_mean", "leave_one_out"),
        ("none", "group", "batch"),
        ("sum_then_normalize", "normalize_then_sum"),
        (False, True),
    )
    for baseline, scale, aggregation, dynamic in product:
        try:
            config = DrGRPOConfig(
                output_dir="unused", use_cpu=True, report_to="none", num_generations=2, per_device_train_batch_size=2,
                advantage_estimator=baseline, scale_rewards=scale, multi_objective_aggregation=aggregation,
                dynamic_sampling=dynamic, kl_in_reward_coef=1.0 if kl_in_reward else 0.0,
                zero_reward_for_truncated=True,
            )  # fmt: skip
        except ValueError:
            continue
        accepted.append(config)
    return tuple(accepted)


def cases(estimator: str | None, generator: torch.Generator):
    """The accepted configurations x weights x std conventions, each a copy with those set."""
    for base, weights, (ddof, epsilon) in itertools.product(
        accepted_configs(estimator is not None), WEIGHTS, ((1, 1e-4), (0, 1e-8), (1, 0.0))
    ):
        config = copy.copy(base)
        config.reward_weights, config.advantage_std_ddof, config.advantage_epsilon = list(weights), ddof, epsilon
        if estimator is not None:  # coefficients from a slight to a dominant penalty
            config.kl_estimator = estimator
            config.kl_in_reward_coef = float(10 ** torch.empty(1).uniform_(-2, 0, generator=generator))
        yield config


@pytest.mark.parametrize("missing", [False, True], ids=["all scored", "missing scores"])
@pytest.mark.parametrize("estimator", [None, *KL_ESTIMATORS], ids=["no KL", *(f"KL {k}" for k in KL_ESTIMATORS)])
def test_no_truncated_completion_is_reinforced_above_one_that_ended(one_torch_thread, estimator, missing):
    generator = torch.Generator().manual_seed(zlib.crc32(f"{estimator}-{missing}".encode()))
    broken, checked = [], 0
    for config in cases(estimator, generator):
        group_size = (2, 3, 4, 8)[checked % 4]
        scores, truncated, kls = random_groups(generator, group_size, missing, estimator)
        advantages = trained_advantages(config, scores, truncated, kls, group_size)
        checked += 1
        for kind, (count, example, cut) in violations(advantages, scores, truncated, group_size).items():
            keys = (
                f"advantage_estimator={config.advantage_estimator} scale_rewards={config.scale_rewards} "
                f"{config.multi_objective_aggregation} dynamic_sampling={config.dynamic_sampling} "
                f"weights={config.reward_weights} kl_in_reward_coef={config.kl_in_reward_coef:.3g} G={group_size}"
            )
            broken.append(f"{kind}: {count}/{GROUPS} groups [{keys}], e.g. advantages {example} truncated {cut}")
    # 12 accepted configurations without a KL in the reward (8 with), x 3 weights x 3 std conventions.
    assert checked == (72 if estimator else 108)
    assert not broken, f"{len(broken)} failures in {checked} combinations:\n" + "\n".join(broken[:12])
