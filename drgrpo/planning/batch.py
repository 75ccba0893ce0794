"""Batch arithmetic (pure): TRL 1.16's GRPO batch rules redone for a target world size."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from drgrpo.algorithm.schedule_keys import check_schedule_values
from drgrpo.core.errors import RecipeError
from drgrpo.planning.findings import Finding
from drgrpo.recipe.batch_rules import generation_batch_fix, nearest_per_device


@dataclass(frozen=True)
class BatchPlan:
    """TRL's batch sizes at one world size. A micro-step is one `training_step` call on every process."""

    world_size: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    steps_per_generation: int
    num_generations: int
    num_iterations: int

    def __post_init__(self) -> None:
        check_schedule_keys(
            self.world_size,
            per_device_train_batch_size=self.per_device_train_batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            steps_per_generation=self.steps_per_generation,
            num_generations=self.num_generations,
            num_iterations=self.num_iterations,
        )

    @property
    def completions_per_step(self) -> int:
        """Completions in one optimizer step: per_device x world x gradient_accumulation_steps."""
        return self.per_device_train_batch_size * self.world_size * self.gradient_accumulation_steps

    @property
    def completions_per_round(self) -> int:
        """Completions generated at once (TRL's generation_batch_size): per_device x world x steps_per_generation."""
        return self.per_device_train_batch_size * self.world_size * self.steps_per_generation

    @property
    def prompts_per_step(self) -> Fraction:
        return Fraction(self.completions_per_step, self.num_generations)

    @property
    def prompts_per_round(self) -> Fraction:
        return Fraction(self.completions_per_round, self.num_generations)

    @property
    def optimizer_steps_per_round(self) -> Fraction:
        """TRL generates every steps_per_generation x num_iterations micro-steps and steps the optimizer every
        gradient_accumulation_steps micro-steps (`GRPOTrainer._prepare_inputs`)."""
        return Fraction(self.steps_per_generation * self.num_iterations, self.gradient_accumulation_steps)


def check_schedule_keys(world_size: int, **values: int | None) -> None:
    """The one range check of the schedule keys (`drgrpo.algorithm.schedule_keys`) for the planner's library, plus
    the world size: a `RecipeError` naming the key instead of a `ZeroDivisionError` later."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise RecipeError(f"world size {world_size!r}: it takes a whole number of processes, 1 or more.")
    check_schedule_values(values, "batch plan")


def batch_plan(
    world_size: int,
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    num_generations: int,
    *,
    steps_per_generation: int | None = None,
    generation_batch_size: int | None = None,
    num_iterations: int = 1,
) -> tuple[BatchPlan | None, list[Finding]]:
    """TRL 1.16's `GRPOConfig.__post_init__` batch rules, for `world_size` processes instead of the current one.

    `steps_per_generation` / `generation_batch_size` are the values the recipe itself set (None: unset). Returns the
    plan (None when TRL would refuse to start) and the batch findings.
    """
    check_schedule_keys(
        world_size,
        per_device_train_batch_size=per_device_train_batch_size,
        gradient_accumulation_steps=gradient_accumulation_steps,
        steps_per_generation=steps_per_generation,
        generation_batch_size=generation_batch_size,
        num_generations=num_generations,
        num_iterations=num_iterations,
    )
    findings: list[Finding] = []
    local = per_device_train_batch_size * world_size
    if generation_batch_size is not None and steps_per_generation is not None:
        findings.append(
            Finding(
                "error",
                "generation_batch_size",
                "generation_batch_size and steps_per_generation are both set; TRL refuses that.",
                "keep one of them (steps_per_generation is the world-size independent one).",
            )
        )
        return None, findings
    if generation_batch_size is not None:
        if generation_batch_size % local:
            findings.append(
                Finding(
                    "error",
                    "generation_batch_size",
                    f"generation_batch_size={generation_batch_size} is not a multiple of per_device_train_batch_size "
                    f"x world size = {local}; TRL refuses to start.",
                    _generation_batch_fix_text(
                        world_size, per_device_train_batch_size, num_generations, generation_batch_size
                    ),
                )
            )
            return None, findings
        steps = generation_batch_size // local
    else:
        steps = steps_per_generation if steps_per_generation is not None else gradient_accumulation_steps
    plan = BatchPlan(
        world_size=world_size,
        per_device_train_batch_size=per_device_train_batch_size,
        gradient_accumulation_steps=gradient_accumulation_steps,
        steps_per_generation=steps,
        num_generations=num_generations,
        num_iterations=num_iterations,
    )
    fix = _per_device_fix(plan, steps_per_generation, generation_batch_size)
    if plan.completions_per_round % num_generations:
        findings.append(
            Finding(
                "error",
                "per_device_train_batch_size",
                f"A generation round holds {plan.completions_per_round} completions (per_device_train_batch_size "
                f"{per_device_train_batch_size} x {world_size} processes x {steps} steps_per_generation), not a "
                f"multiple of num_generations={num_generations}: the last group would be cut; TRL refuses to start.",
                fix,
            )
        )
    return plan, findings


def _per_device_fix(plan: BatchPlan, steps_per_generation: int | None, generation_batch_size: int | None) -> str:
    """The nearest per-device batches for which every batch rule holds (the round's whole groups among them)."""
    below, above = nearest_per_device(
        plan.world_size,
        plan.per_device_train_batch_size,
        plan.gradient_accumulation_steps,
        plan.num_generations,
        steps_per_generation=steps_per_generation,
        generation_batch_size=generation_batch_size,
    )
    nearest = " or ".join(str(value) for value in (below, above) if value is not None)
    if generation_batch_size is not None and not nearest:
        return _generation_batch_fix_text(
            plan.world_size, plan.per_device_train_batch_size, plan.num_generations, generation_batch_size
        )
    if generation_batch_size is not None:
        return f"set per_device_train_batch_size to {nearest} (the nearest values for which every batch rule holds)."
    multiple = per_device_multiple(plan.num_generations, plan.world_size * plan.steps_per_generation)
    return f"set per_device_train_batch_size to a multiple of {multiple}; the nearest: {nearest}."


def _generation_batch_fix_text(
    world_size: int, per_device: int, num_generations: int, generation_batch_size: int
) -> str:
    """The fix when no per-device batch fits the recipe's generation_batch_size: change it, or use
    steps_per_generation."""
    new_generation_batch = generation_batch_fix(world_size, per_device, num_generations, generation_batch_size)
    return (
        f"set generation_batch_size to {new_generation_batch} (every batch rule then holds), or set "
        "steps_per_generation instead of generation_batch_size."
    )


def per_device_multiple(num_generations: int, other_factors: int) -> int:
    """Smallest k such that k x other_factors is a multiple of num_generations: G / gcd(G, other_factors)."""
    return num_generations // math.gcd(num_generations, other_factors)
