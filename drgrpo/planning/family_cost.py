"""What the GRPO-family keys (drgrpo/algorithm/family.py) imply for a run's cost: the extra generation of DAPO dynamic
sampling and the reference model a KL needs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from drgrpo.planning.batch import BatchPlan
from drgrpo.planning.findings import Finding

# Shares of all-equal groups the plan shows the cost at (early RLVR runs on hard data see 50-90%).
EQUAL_GROUP_SHARES = (0.25, 0.5, 0.75, 0.9)


@dataclass(frozen=True)
class DynamicSamplingPlan:
    """Generation rounds per rollout of dynamic sampling; each round generates a full rollout's worth of prompts."""

    prompts_per_round: int
    completions_per_round: int
    max_rounds: int

    def rounds_needed(self, equal_share: float) -> int:
        """Rounds to fill the batch when a share `equal_share` of groups is all-equal (dropped): each round keeps
        (1 - share) of its groups, so ceil(1 / (1 - share)) rounds, at most `max_rounds`."""
        if equal_share >= 1:
            return self.max_rounds
        return min(self.max_rounds, math.ceil(1 / (1 - equal_share) - 1e-9))


def dynamic_sampling_plan(batch: BatchPlan, max_rounds: int) -> DynamicSamplingPlan:
    return DynamicSamplingPlan(
        prompts_per_round=int(batch.prompts_per_round),
        completions_per_round=batch.completions_per_round,
        max_rounds=max_rounds,
    )


def dynamic_sampling_lines(plan: DynamicSamplingPlan) -> list[str]:
    """The report's lines: generation per rollout at several shares of all-equal groups, and the worst case."""
    costs = ", ".join(f"{share:.0%} -> {plan.rounds_needed(share)} round(s)" for share in EQUAL_GROUP_SHARES)
    return [
        "Dynamic sampling (all-equal groups dropped, refilled with fresh prompts):",
        f"  one round: {plan.prompts_per_round} prompts x {plan.completions_per_round // plan.prompts_per_round} = "
        f"{plan.completions_per_round} completions generated; the trained batch stays {plan.completions_per_round}",
        f"  rounds per rollout (about) by share of all-equal groups: {costs}",
        f"  at most {plan.max_rounds} rounds = {plan.max_rounds * plan.completions_per_round} completions generated "
        f"per rollout ({plan.max_rounds}x the generation time and prompts of a run without it)",
    ]


def family_findings(args: Any) -> list[Finding]:
    """Cautions for the family keys: the reference model a KL in the reward loads."""
    findings = []
    if getattr(args, "kl_in_reward_coef", 0) > 0:
        findings.append(
            Finding(
                "warning",
                "kl_in_reward_coef",
                "a KL in the reward loads a reference model (one more copy of the weights, sharded like the policy "
                "under ZeRO-3) and runs one more forward pass per completion; the memory estimates above leave it out.",
                "leave headroom for it, or set kl_in_reward_coef: 0.",
            )
        )
    return findings
