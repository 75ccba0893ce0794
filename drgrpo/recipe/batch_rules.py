"""Batch settings that fit a world size: whole numbers that satisfy every batch rule at once (pure).

The planner's fixes come from here, so that a suggestion is never a fraction ("scale by 8/3"), never negative, and
never one that fixes one divisibility rule while breaking another. The rules are TRL 1.16's
(`GRPOConfig.__post_init__`) plus ours; `batch_rules_hold` states them all, and `batch.batch_plan` explains each one
that fails.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import NamedTuple

MAX_SEARCH = 4096  # per-device batch sizes and multiples tried before giving up (the recipes use 1-64)


class ScheduleChoice(NamedTuple):
    """Per-device batch, accumulation and generation steps (None: set by generation_batch_size) at a world size."""

    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    steps_per_generation: int | None

    def completions_per_step(self, world_size: int) -> int:
        return self.per_device_train_batch_size * world_size * self.gradient_accumulation_steps


def batch_rules_hold(
    world_size: int,
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    num_generations: int,
    *,
    steps_per_generation: int | None = None,
    generation_batch_size: int | None = None,
) -> bool:
    """Whether TRL starts with these values at `world_size` (TRL 1.16's `GRPOConfig.__post_init__`).

    1. num_generations >= 2 (a group of one has no baseline; ours, TRL allows it with a warning);
    2. at most one of steps_per_generation and generation_batch_size is set;
    3. generation_batch_size, when set, is a multiple of per_device x world;
    4. a generation round (per_device x world x steps_per_generation) holds whole groups.

    There is no rule for the optimizer step: TRL computes the advantages over the whole round, then shuffles each
    process's share of it and cuts it into steps_per_generation micro-batches (`GRPOTrainer._prepare_inputs`:
    `shuffle_sequence_dict`, then `split_tensor_dict`), so when an optimizer step is not a whole number of rounds it
    holds a random share of the rollout and groups span steps whatever the batch sizes; when it is, rule 4 already
    gives it whole groups.
    """
    if min(world_size, per_device_train_batch_size, gradient_accumulation_steps) < 1 or num_generations < 2:
        return False
    if steps_per_generation is not None and generation_batch_size is not None:
        return False
    local = per_device_train_batch_size * world_size
    if generation_batch_size is not None:
        if generation_batch_size % local:
            return False
        steps = generation_batch_size // local
    else:
        steps = steps_per_generation if steps_per_generation is not None else gradient_accumulation_steps
    return (local * steps) % num_generations == 0


def _nearest(value: int, lowest: int, fits: Callable[[int], bool]) -> tuple[int | None, int | None]:
    """The integers nearest to `value` for which `fits` holds, (below, above): below down to `lowest`, above within
    `MAX_SEARCH`; None where there is none."""
    below = next((v for v in range(value - 1, lowest - 1, -1) if fits(v)), None)
    above = next((v for v in range(value + 1, max(value, MAX_SEARCH) + 1) if fits(v)), None)
    return below, above


def nearest_per_device(
    world_size: int,
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    num_generations: int,
    *,
    steps_per_generation: int | None = None,
    generation_batch_size: int | None = None,
) -> tuple[int | None, int | None]:
    """The per_device_train_batch_size values nearest to the given one, (below, above), for which every rule holds
    with the other keys unchanged; None where there is none (below: none >= 1; above: none within `MAX_SEARCH`)."""
    keys = {"steps_per_generation": steps_per_generation, "generation_batch_size": generation_batch_size}
    return _nearest(
        per_device_train_batch_size,
        1,
        lambda p: batch_rules_hold(world_size, p, gradient_accumulation_steps, num_generations, **keys),
    )


def nearest_num_generations(
    world_size: int,
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    num_generations: int,
    *,
    steps_per_generation: int | None = None,
    generation_batch_size: int | None = None,
) -> tuple[int | None, int | None]:
    """The num_generations values nearest to the given one, (below, above), for which every rule holds with the
    other keys unchanged; None where there is none (below: none >= 2; above: none within `MAX_SEARCH`)."""
    keys = {"steps_per_generation": steps_per_generation, "generation_batch_size": generation_batch_size}
    return _nearest(
        num_generations,
        2,
        lambda g: batch_rules_hold(world_size, per_device_train_batch_size, gradient_accumulation_steps, g, **keys),
    )


def nearest_generation_batch_size(
    world_size: int,
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    num_generations: int,
    generation_batch_size: int,
) -> tuple[int | None, int | None]:
    """The generation_batch_size values nearest to the given one, (below, above), for which every rule holds with
    the other keys unchanged; None where there is none (below: none >= 1; above: none within `MAX_SEARCH` x the
    smallest round, lcm(per_device x world, num_generations))."""

    def fits(size: int) -> bool:
        return batch_rules_hold(
            world_size,
            per_device_train_batch_size,
            gradient_accumulation_steps,
            num_generations,
            generation_batch_size=size,
        )

    unit = math.lcm(per_device_train_batch_size * world_size, num_generations)  # every fitting value is a multiple
    first_below = (generation_batch_size - 1) // unit * unit
    below = next((v for v in range(first_below, 0, -unit) if fits(v)), None)
    first_above = (generation_batch_size // unit + 1) * unit
    above = next((v for v in range(first_above, first_above + MAX_SEARCH * unit, unit) if fits(v)), None)
    return below, above


def generation_batch_fix(
    world_size: int, per_device_train_batch_size: int, num_generations: int, generation_batch_size: int
) -> int:
    """The generation_batch_size for which every rule holds with the per-device batch unchanged, when the recipe's
    fits no per-device batch: the smallest multiple of lcm(per_device x world, G) not below the recipe's (whole
    per-device batches, and whole groups, in every round)."""
    unit = math.lcm(per_device_train_batch_size * world_size, num_generations)
    return max(unit, -(-generation_batch_size // unit) * unit)


def choice_for_schedule(
    world_size: int,
    completions_per_step: int,
    completions_per_rollout: int,
    num_generations: int,
    per_device_limit: int,
    *,
    generation_batch_size: int | None = None,
) -> ScheduleChoice | None:
    """Whole per-device batch, accumulation and generation steps giving exactly `completions_per_step` per optimizer
    step and `completions_per_rollout` per rollout at `world_size`, with every batch rule holding; None if none does.

    The per-device batch is the largest up to `per_device_limit` (the recipe's, so memory per micro-step does not
    grow), else the smallest above it. With `generation_batch_size` set, the rollout is that key (it does not depend
    on the world size), so only the step is split and steps_per_generation stays unset (TRL refuses both).
    """
    if completions_per_step < 1 or completions_per_step % world_size:
        return None
    if generation_batch_size is None and completions_per_rollout % world_size:
        return None
    per_process = completions_per_step // world_size
    candidates = [*range(min(per_device_limit, per_process), 0, -1), *range(per_device_limit + 1, per_process + 1)]
    for per_device in candidates:
        if per_process % per_device:
            continue
        steps = None
        if generation_batch_size is None:
            if (completions_per_rollout // world_size) % per_device:
                continue
            steps = completions_per_rollout // world_size // per_device
        choice = ScheduleChoice(per_device, per_process // per_device, steps)
        if batch_rules_hold(
            world_size,
            choice.per_device_train_batch_size,
            choice.gradient_accumulation_steps,
            num_generations,
            steps_per_generation=steps,
            generation_batch_size=generation_batch_size,
        ):
            return choice
    return None


def nearest_schedules(
    world_size: int,
    completions_per_step: int,
    completions_per_rollout: int,
    num_generations: int,
    per_device_limit: int,
    *,
    generation_batch_size: int | None = None,
) -> tuple[tuple[int, int, ScheduleChoice] | None, tuple[int, int, ScheduleChoice] | None]:
    """The schedules nearest to the given one (below, above) that `world_size` processes can run with whole numbers
    and every rule holding, as (completions per step, per rollout, choice); None where none is found.

    They keep the optimizer steps per rollout (the rollout scales with the step; with `generation_batch_size` the
    rollout stays). Steps that are multiples of lcm(world_size, num_generations) are tried: split evenly over the
    processes, and a whole number of prompts, which keeps the suggestions round (3 processes, groups of 8: 120 or 144
    per step, not 129 = 3 x 43). TRL does not require whole prompts per step (see `batch_rules_hold`).
    """
    unit = math.lcm(world_size, num_generations)
    ratio = Fraction(completions_per_rollout, completions_per_step)

    def found(step: int) -> tuple[int, int, ScheduleChoice] | None:
        rollout = completions_per_rollout if generation_batch_size is not None else step * ratio
        if isinstance(rollout, Fraction):
            if rollout.denominator != 1:
                return None
            rollout = rollout.numerator
        choice = choice_for_schedule(
            world_size,
            step,
            rollout,
            num_generations,
            per_device_limit,
            generation_batch_size=generation_batch_size,
        )
        return None if choice is None else (step, rollout, choice)

    first_below = (completions_per_step - 1) // unit * unit
    below = next((r for t in range(first_below, 0, -unit) if (r := found(t))), None)
    first_above = (completions_per_step // unit + 1) * unit
    above = next((r for t in range(first_above, first_above + MAX_SEARCH * unit, unit) if (r := found(t))), None)
    return below, above


def schedule_flags(choice: ScheduleChoice, per_device: int) -> str:
    """The overrides that set `choice`: the per-device batch when it changes, then the step counts."""
    flags = []
    if choice.per_device_train_batch_size != per_device:
        flags.append(f"--per_device_train_batch_size {choice.per_device_train_batch_size}")
    flags.append(f"--gradient_accumulation_steps {choice.gradient_accumulation_steps}")
    if choice.steps_per_generation is not None:
        flags.append(f"--steps_per_generation {choice.steps_per_generation}")
    return " ".join(flags)


def keep_schedule_fix(
    per_device: int,
    completions_per_step: int,
    completions_per_rollout: int,
    world: int,
    whose: str = "the recipe's",
    *,
    num_generations: int,
    generation_batch_size: int | None = None,
) -> str:
    """The command-line overrides that keep `completions_per_step` and `completions_per_rollout` at `world`
    processes in whole numbers with every batch rule holding; else why that cannot be, and the nearest schedules
    (same optimizer steps per rollout) that can, each with its overrides."""
    keys = {"generation_batch_size": generation_batch_size}
    choice = choice_for_schedule(
        world, completions_per_step, completions_per_rollout, num_generations, per_device, **keys
    )
    if choice is not None:
        return f"keep {whose} schedule with {schedule_flags(choice, per_device)}."
    below, above = nearest_schedules(
        world, completions_per_step, completions_per_rollout, num_generations, per_device, **keys
    )
    nearest = " or ".join(
        f"{step} per step and {rollout} per rollout ({schedule_flags(option, per_device)})"
        for step, rollout, option in (found for found in (below, above) if found is not None)
    )
    if completions_per_step % world:
        why = f"{completions_per_step} is not a multiple of {world} processes"
    elif generation_batch_size is None and completions_per_rollout % world:
        why = f"{completions_per_rollout} is not a multiple of {world} processes"
    else:
        why = f"no whole per-device batch gives both in whole groups of {num_generations}"
    return (
        f"{whose} schedule ({completions_per_step} completions per optimizer step, {completions_per_rollout} per "
        f"rollout) cannot be kept at {world} processes ({why}); the nearest that fit, with the same optimizer steps "
        f"per rollout: {nearest or 'none found'}."
    )


def context_fix(max_prompt_tokens: int, max_completion_length: int, limit: int) -> str:
    """The fix for prompt + completion exceeding a `limit` of tokens: only values that are >= 1 and fit.

    A completion needs at least one token and so does a prompt: lowering max_completion_length is offered only when
    max_prompt_tokens leaves room for one (limit - max_prompt_tokens >= 1), and the same for max_prompt_tokens.
    """
    completion_room = limit - max_prompt_tokens
    prompt_room = limit - max_completion_length
    if completion_room >= 1 and prompt_room >= 1:
        return f"lower max_completion_length to {completion_room} or max_prompt_tokens to {prompt_room}"
    if completion_room >= 1:
        return (
            f"lower max_completion_length to {completion_room} (at {max_completion_length} it fills the {limit} tokens "
            "alone, so no max_prompt_tokens fits)"
        )
    if prompt_room >= 1:
        return (
            f"lower max_prompt_tokens to {prompt_room} (at {max_prompt_tokens} it fills the {limit} tokens alone, so "
            "no max_completion_length fits)"
        )
    if limit < 2:
        return f"a limit of {limit} token(s) holds no prompt and completion: raise it"
    prompt = max(1, limit // 4)
    return (
        f"max_prompt_tokens {max_prompt_tokens} and max_completion_length {max_completion_length} each fill the "
        f"{limit} tokens alone, so changing one of them cannot fit; lower both so that they sum to at most {limit} "
        f"(e.g. max_prompt_tokens {prompt} and max_completion_length {limit - prompt})"
    )


def eval_batch_multiple(num_generations: int, world_size: int) -> int:
    """The smallest per_device_eval_batch_size whose eval batch (x world size) holds whole groups of
    `num_generations`: G / gcd(G, world size); every valid value is a multiple of it."""
    return num_generations // math.gcd(num_generations, world_size)


def whole_group_eval_batch(num_generations: int, world_size: int, at_least: int = 8) -> int:
    """A per_device_eval_batch_size TRL starts with: the smallest multiple of `eval_batch_multiple` that is at least
    `at_least` (transformers' default 8)."""
    multiple = eval_batch_multiple(num_generations, world_size)
    return multiple * math.ceil(at_least / multiple)


def eval_batch_problem(per_device_eval: int, world_size: int, num_generations: int) -> tuple[str, str] | None:
    """TRL's eval rule (`GRPOConfig.__post_init__`: the global eval batch must be divisible by the eval group size)
    as (problem, fix) in the recipe's keys; None when it holds. `num_generations`: num_generations_eval, else
    num_generations. The planner, `--explain` and the verl converter all check it here."""
    eval_batch = per_device_eval * world_size
    if eval_batch % num_generations == 0:
        return None
    multiple = eval_batch_multiple(num_generations, world_size)
    return (
        f"The eval batch ({per_device_eval} x {world_size} processes = {eval_batch}) is not a multiple of "
        f"{num_generations} generations per prompt; TRL refuses to start (eval_strategy is on).",
        f"set per_device_eval_batch_size to a multiple of {multiple} "
        f"(e.g. {whole_group_eval_batch(num_generations, world_size)}).",
    )
