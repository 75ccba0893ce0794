"""The published runs a recipe reproduces, with their schedule per rollout, to print and check beside the recipe's.

A recipe names the run in its header ("Paper reproduction: Oat-Zero-1.5B"); the planner then prints the reference's
prompts, completions and optimizer steps per rollout next to the recipe's and warns where they differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from drgrpo.planning.batch import BatchPlan
from drgrpo.planning.findings import Finding
from drgrpo.recipe.batch_rules import keep_schedule_fix


@dataclass(frozen=True)
class ReferenceSchedule:
    """A published run's batch schedule: one rollout of `prompts_per_rollout` x `num_generations` completions, then
    `num_iterations` passes over it in optimizer steps of `completions_per_step` completions."""

    name: str
    source: str
    prompts_per_rollout: int
    num_generations: int
    completions_per_step: int
    num_iterations: int = 1

    @property
    def completions_per_rollout(self) -> int:
        return self.prompts_per_rollout * self.num_generations

    @property
    def optimizer_steps_per_rollout(self) -> Fraction:
        return Fraction(self.completions_per_rollout * self.num_iterations, self.completions_per_step)


# Oat's launch script for the paper (sail-sg/understand-r1-zero, examples/qwen2.5-math-*.sh; the same schedule for
# 1.5B and 7B): --rollout_batch_size 128 --num_samples 8 --train_batch_size 128 --num_ppo_epochs 1.
_OAT_SOURCE = "Oat's launch script in sail-sg/understand-r1-zero"
REFERENCE_SCHEDULES: dict[str, ReferenceSchedule] = {
    name: ReferenceSchedule(name, _OAT_SOURCE, prompts_per_rollout=128, num_generations=8, completions_per_step=128)
    for name in ("Oat-Zero-1.5B", "Oat-Zero-7B")
}


def reference_findings(plan: BatchPlan, reference: ReferenceSchedule) -> list[Finding]:
    """A warning naming each quantity of the schedule per rollout where `plan` differs from the reference run."""
    pairs = {
        "samples per prompt": (plan.num_generations, reference.num_generations),
        "completions per rollout": (plan.completions_per_round, reference.completions_per_rollout),
        "completions per optimizer step": (plan.completions_per_step, reference.completions_per_step),
        "optimizer steps per rollout": (plan.optimizer_steps_per_round, reference.optimizer_steps_per_rollout),
        "passes over a rollout": (plan.num_iterations, reference.num_iterations),
    }
    differing = [f"{what} {ours} (paper {theirs})" for what, (ours, theirs) in pairs.items() if ours != theirs]
    if not differing:
        return []
    fix = keep_schedule_fix(
        plan.per_device_train_batch_size,
        reference.completions_per_step,
        reference.completions_per_rollout,
        plan.world_size,
        whose="the paper's",
        num_generations=reference.num_generations,
    )
    if plan.num_generations != reference.num_generations or plan.num_iterations != reference.num_iterations:
        fix = (
            f"set num_generations {reference.num_generations} and num_iterations {reference.num_iterations}, then "
            + fix
        )
    return [
        Finding(
            "warning",
            "schedule",
            f"Not the schedule of {reference.name}, the run this recipe reproduces: {'; '.join(differing)}.",
            fix,
        )
    ]
