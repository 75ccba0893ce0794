"""Batch settings that fit a world size: whole numbers that satisfy every batch rule at once (pure).

The planner's fixes come from here, so that a suggestion is never a fraction ("scale by 8/3"), never negative, and
never one that fixes one divisibility rule while breaking another. The rules are TRL 1.16's
(`GRPOConfig.__post_init__`) plus ours; `batch_rules_hold` states them all, `drgrpo.planner.batch_plan` explains each
one that fails.
"""

from __future__ import annotations

import math
from typing import NamedTuple

MAX_SEARCH = 4096  # per-device batch sizes and multiples tried before giving up (the recipes use 1-64)


class BatchChoice(NamedTuple):
    """Per-device batch and accumulation steps at a world size."""

    per_device_train_batch_size: int
    gradient_accumulation_steps: int

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
    """Whether TRL starts with these values at `world_size` and every optimizer step holds whole groups.

    1. num_generations >= 2 (a group of one has no baseline);
    2. at most one of steps_per_generation and generation_batch_size is set (TRL);
    3. generation_batch_size, when set, is a multiple of per_device x world (TRL);
    4. a generation round (per_device x world x steps_per_generation) holds whole groups (TRL);
    5. an optimizer step (per_device x world x gradient_accumulation_steps) holds whole groups (ours: a group split
       over two updates no longer has zero-sum advantages in each).
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
    return (local * steps) % num_generations == 0 and (local * gradient_accumulation_steps) % num_generations == 0


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

    def fits(per_device: int) -> bool:
        return batch_rules_hold(
            world_size,
            per_device,
            gradient_accumulation_steps,
            num_generations,
            steps_per_generation=steps_per_generation,
            generation_batch_size=generation_batch_size,
        )

    below = next((p for p in range(per_device_train_batch_size - 1, 0, -1) if fits(p)), None)
    above = next((p for p in range(per_device_train_batch_size + 1, MAX_SEARCH + 1) if fits(p)), None)
    return below, above


def generation_batch_fix(
    world_size: int,
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    num_generations: int,
    generation_batch_size: int,
) -> tuple[int, int]:
    """(per_device_train_batch_size, generation_batch_size) for which every rule holds, when the recipe's
    generation_batch_size fits no per-device batch.

    The per-device batch is the nearest multiple of G / gcd(G, world x accumulation) (an optimizer step of whole
    groups); generation_batch_size the smallest multiple of lcm(per_device x world, G) not below the recipe's (whole
    per-device batches, and whole groups, in every round).
    """
    step = num_generations // math.gcd(num_generations, world_size * gradient_accumulation_steps)
    lower = per_device_train_batch_size // step * step
    upper = lower + step if lower != per_device_train_batch_size else lower
    closer_lower = lower >= 1 and per_device_train_batch_size - lower <= upper - per_device_train_batch_size
    per_device = lower if closer_lower else upper
    unit = math.lcm(per_device * world_size, num_generations)
    return per_device, max(unit, -(-generation_batch_size // unit) * unit)


def choice_for_total(
    world_size: int,
    completions_per_step: int,
    num_generations: int,
    per_device_limit: int,
    *,
    steps_per_generation: int | None = None,
    generation_batch_size: int | None = None,
) -> BatchChoice | None:
    """Whole per_device and accumulation steps giving exactly `completions_per_step` at `world_size` with every rule
    holding: the largest per-device batch up to `per_device_limit` (the recipe's, so memory per step does not grow),
    else the smallest above it; None when no split exists.

    Without steps_per_generation/generation_batch_size, TRL generates every gradient_accumulation_steps micro-steps,
    so that key follows the accumulation steps, as it does in TRL.
    """
    if completions_per_step < 1 or completions_per_step % world_size:
        return None
    per_process = completions_per_step // world_size
    candidates = [*range(min(per_device_limit, per_process), 0, -1), *range(per_device_limit + 1, per_process + 1)]
    for per_device in candidates:
        if per_process % per_device:
            continue
        choice = BatchChoice(per_device, per_process // per_device)
        if batch_rules_hold(
            world_size,
            *choice,
            num_generations,
            steps_per_generation=steps_per_generation,
            generation_batch_size=generation_batch_size,
        ):
            return choice
    return None


def nearest_totals(
    world_size: int,
    completions_per_step: int,
    num_generations: int,
    per_device_limit: int,
    *,
    steps_per_generation: int | None = None,
    generation_batch_size: int | None = None,
) -> tuple[tuple[int, BatchChoice] | None, tuple[int, BatchChoice] | None]:
    """The completions-per-step totals nearest to `completions_per_step` (below, above) that `world_size` processes
    can run with whole numbers and every rule holding, each with its `BatchChoice`; None where none is found.

    Only multiples of lcm(world_size, num_generations) can hold whole groups on every process, so those are tried.
    """
    step = math.lcm(world_size, num_generations)
    keys = {"steps_per_generation": steps_per_generation, "generation_batch_size": generation_batch_size}

    def found(total: int) -> tuple[int, BatchChoice] | None:
        choice = choice_for_total(world_size, total, num_generations, per_device_limit, **keys)
        return None if choice is None else (total, choice)

    first_below = (completions_per_step - 1) // step * step
    below = next((r for t in range(first_below, 0, -step) if (r := found(t))), None)
    first_above = (completions_per_step // step + 1) * step
    above = next((r for t in range(first_above, first_above + MAX_SEARCH * step, step) if (r := found(t))), None)
    return below, above


def choice_flags(choice: BatchChoice, per_device: int, accumulation: int) -> str:
    """The command-line flags that turn (per_device, accumulation) into `choice` (only the keys that change)."""
    flags = []
    if choice.per_device_train_batch_size != per_device:
        flags.append(f"--per_device_train_batch_size {choice.per_device_train_batch_size}")
    if choice.gradient_accumulation_steps != accumulation:
        flags.append(f"--gradient_accumulation_steps {choice.gradient_accumulation_steps}")
    return " ".join(flags)


def keep_batch_fix(
    world_size: int,
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    num_generations: int,
    completions_per_step: int,
    *,
    steps_per_generation: int | None = None,
    generation_batch_size: int | None = None,
) -> str:
    """The fix that keeps `completions_per_step` at `world_size`: whole per-device batch and accumulation values with
    every batch rule holding, as command-line flags; else why it cannot be kept, and the nearest totals that fit.

    The per-device batch is not raised above the current one when a smaller one works (more memory per micro-step).
    """
    keys = {"steps_per_generation": steps_per_generation, "generation_batch_size": generation_batch_size}
    current = (per_device_train_batch_size, gradient_accumulation_steps)
    limit = per_device_train_batch_size
    choice = choice_for_total(world_size, completions_per_step, num_generations, limit, **keys)
    if choice is not None:
        return f"keep the recipe's {completions_per_step} completions per step with `{choice_flags(choice, *current)}`."
    below, above = nearest_totals(world_size, completions_per_step, num_generations, limit, **keys)
    nearest = " or ".join(
        f"{total} (`{flags}`)" if (flags := choice_flags(option, *current)) else f"{total} (as set)"
        for total, option in (found for found in (below, above) if found is not None)
    )
    if completions_per_step % world_size:
        why = f"{completions_per_step} is not a multiple of {world_size} processes"
    else:
        why = f"no whole per-device batch and accumulation steps give it in whole groups of {num_generations}"
        why += " with the recipe's generation_batch_size" if generation_batch_size is not None else ""
    return (
        f"{completions_per_step} completions per optimizer step cannot be kept at {world_size} processes ({why}); "
        f"the nearest that fit: {nearest or 'none with the recipe keys as set'}."
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
