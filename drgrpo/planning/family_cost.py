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
    # What the trainer does with a batch the rounds cannot fill: "pad" (all-equal groups, advantage 0) or "raise"
    # (the run stops); None where the config has no `dynamic_sampling_exhausted` key (it pads).
    exhausted: str | None = None

    def rounds_to_fill(self, equal_share: float) -> float:
        """Rounds that fill the batch when a share `equal_share` of groups is all-equal (dropped): each round keeps
        (1 - share) of its groups, so ceil(1 / (1 - share)) rounds (infinite when every group is all-equal)."""
        if equal_share >= 1:
            return math.inf
        return math.ceil(1 / (1 - equal_share) - 1e-9)

    def rounds_needed(self, equal_share: float) -> int:
        """`rounds_to_fill`, at most `max_rounds` (the rounds actually generated)."""
        return int(min(self.max_rounds, self.rounds_to_fill(equal_share)))

    def signal_share(self, equal_share: float) -> float:
        """The share of the batch filled with groups that carry signal after the rounds run (1.0 when they fill it):
        `max_rounds` x (1 - share), at most 1."""
        return min(1.0, self.max_rounds * (1 - equal_share))


def dynamic_sampling_plan(batch: BatchPlan, max_rounds: int, exhausted: str | None = None) -> DynamicSamplingPlan:
    return DynamicSamplingPlan(
        prompts_per_round=int(batch.prompts_per_round),
        completions_per_round=batch.completions_per_round,
        max_rounds=max_rounds,
        exhausted=exhausted,
    )


def _short_batch(plan: DynamicSamplingPlan) -> str:
    """What the trainer does when the rounds run out before the batch is full."""
    if plan.exhausted == "raise":
        return "the run stops with an error (dynamic_sampling_exhausted: raise)"
    padded = "the rest is padded with all-equal groups (advantage 0: no policy signal)"
    if plan.exhausted == "pad":
        return padded + ", or the run stops, with dynamic_sampling_exhausted: raise"
    return padded


def dynamic_sampling_lines(plan: DynamicSamplingPlan) -> list[str]:
    """The report's lines: generation per rollout at several shares of all-equal groups, the worst case, and what
    happens at the shares where `max_rounds` cannot fill the batch."""
    costs = []
    for share in EQUAL_GROUP_SHARES:
        needed = plan.rounds_to_fill(share)
        cost = f"{share:.0%} -> {plan.rounds_needed(share)} round(s)"
        costs.append(cost if needed <= plan.max_rounds else f"{cost} ({needed} needed to fill the batch)")
    short = [share for share in EQUAL_GROUP_SHARES if plan.rounds_to_fill(share) > plan.max_rounds]
    lines = [
        "Dynamic sampling (all-equal groups dropped, refilled with fresh prompts):",
        f"  one round: {plan.prompts_per_round} prompts x {plan.completions_per_round // plan.prompts_per_round} = "
        f"{plan.completions_per_round} completions generated; the trained batch stays {plan.completions_per_round}",
        f"  rounds per rollout (about) by share of all-equal groups: {', '.join(costs)}",
        f"  at most {plan.max_rounds} rounds = {plan.max_rounds * plan.completions_per_round} completions generated "
        f"per rollout ({plan.max_rounds}x the generation time and prompts of a run without it)",
    ]
    for share in short:
        needed = plan.rounds_to_fill(share)
        fix = f"dynamic_sampling_max_rounds {needed} fills it" if needed < math.inf else "no bound fills it"
        lines.append(
            f"  at {share:.0%} all-equal groups, {plan.max_rounds} rounds (dynamic_sampling_max_rounds) fill only "
            f"{plan.signal_share(share):.0%} of the batch with groups that carry signal: {_short_batch(plan)} "
            f"({fix})"
        )
    return lines


def family_findings(args: Any) -> list[Finding]:
    """Cautions for the family keys: the reference model a KL in the reward loads; what the Python tool's turns mean for
    max_completion_length."""
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
    if getattr(args, "python_tool", False):
        findings.append(
            Finding(
                "warning",
                "python_tool",
                f"with the Python tool, max_completion_length ({args.max_completion_length}) counts the whole answer: "
                f"the model's tokens and the tool outputs' (masked out of the loss, up to {args.tool_max_calls} "
                f"outputs of {args.tool_output_chars} characters each), and the dr_grpo loss divides by it; the "
                "context and memory figures above hold for that whole answer. Generation runs once per turn, up to "
                f"{args.tool_max_calls + 1} rounds per rollout, with programs run in the sandbox between them.",
                "size max_completion_length for the model's text plus the tool outputs (docs/tools.md).",
            )
        )
    return findings
