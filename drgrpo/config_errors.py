"""Errors TRL and transformers raise while a recipe is parsed, said again in the recipe's own keys with a fix.

TRL checks that a generation round holds whole groups: "generation_batch_size (64) must be divisible by
num_generations (5)", naming a key the recipe never set. Here the same condition is explained with the keys that
decide it (per_device_train_batch_size x gradient_accumulation_steps x world size, TRL's `GRPOConfig.__post_init__`)
and with integer values that satisfy it. Pure functions; no torch import.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from drgrpo.errors import RecipeError

_GENERATION_BATCH = re.compile(r"generation_batch_size \((\d+)\) must be divisible by num_generations \((\d+)\)")
_GLOBAL_BATCH = re.compile(r"generation_batch_size \((\d+)\) must be divisible by the global batch size \((\d+)\)")
_NO_BF16 = "doesn't support bf16/gpu"


def multiples_around(value: int, step: int) -> list[int]:
    """The multiples of `step` nearest to `value`: the one below (if positive) and the one above, ascending."""
    below = value // step * step
    above = below + step
    return [m for m in (below, above) if m > 0 and m != value] or [above]


def divisors_around(total: int, target: int) -> list[int]:
    """The divisors of `total` that are >= 2 and nearest to `target`: the largest below it and the smallest above."""
    divisors = [d for d in range(2, total + 1) if total % d == 0]
    below = [d for d in divisors if d < target]
    above = [d for d in divisors if d > target]
    return ([below[-1]] if below else []) + ([above[0]] if above else [])


def _or(values: list[int]) -> str:
    return " or ".join(str(v) for v in values)


def batch_fix(
    per_device_train_batch_size: int, factor: int, factor_text: str, num_generations: int, world_size: int
) -> str:
    """The explanation and fix for a generation round of `per_device_train_batch_size x factor x world_size`
    completions that is not a multiple of `num_generations` (`factor`: gradient_accumulation_steps or
    steps_per_generation, named by `factor_text`)."""
    total = per_device_train_batch_size * factor * world_size
    step = num_generations // math.gcd(num_generations, factor * world_size)  # smallest batch that fills groups
    fixes = [f"per_device_train_batch_size: {_or(multiples_around(per_device_train_batch_size, step))}"]
    generations = divisors_around(total, num_generations)
    if generations:
        fixes.append(f"num_generations: {_or(generations)}")
    return (
        f"A generation round holds per_device_train_batch_size ({per_device_train_batch_size}) x {factor_text} "
        f"({factor}) x world size ({world_size}) = {total} completions, not a multiple of num_generations "
        f"({num_generations}): each prompt's group of {num_generations} must fit in one round. Fix: "
        f"{', or '.join(fixes)} (`python scripts/plan.py RECIPE --num_processes N` checks a target world size)."
    )


def translate_config_error(
    error: ValueError, values: Mapping[str, Any], defaults: Mapping[str, Any], world_size: int, where: str
) -> RecipeError:
    """A `RecipeError` for a `ValueError` raised while the recipe's config objects were built.

    `values`: the keys the recipe and command line set; `defaults`: the dataclass defaults; `where`: "recipe X".
    """
    message = str(error)

    def value(key: str) -> Any:
        return values.get(key, defaults.get(key))

    match = _GENERATION_BATCH.search(message)
    if match:
        generations = int(match.group(2))
        per_device = int(value("per_device_train_batch_size"))
        if value("generation_batch_size") is not None:
            generation_batch = int(match.group(1))
            step = math.lcm(generations, per_device * world_size)
            return RecipeError(
                f"{where}: generation_batch_size ({generation_batch}) is not a multiple of num_generations "
                f"({generations}) and of per_device_train_batch_size x world size ({per_device * world_size}). Fix: "
                f"generation_batch_size: {_or(multiples_around(generation_batch, step))}, or leave it unset."
            )
        if value("steps_per_generation") is not None:
            factor, factor_text = int(value("steps_per_generation")), "steps_per_generation"
        else:
            factor, factor_text = int(value("gradient_accumulation_steps")), "gradient_accumulation_steps"
        return RecipeError(f"{where}: {batch_fix(per_device, factor, factor_text, generations, world_size)}")
    match = _GLOBAL_BATCH.search(message)
    if match:
        generation_batch, global_batch = int(match.group(1)), int(match.group(2))
        return RecipeError(
            f"{where}: generation_batch_size ({generation_batch}) must be a multiple of per_device_train_batch_size "
            f"x world size ({global_batch}). Fix: generation_batch_size: "
            f"{_or(multiples_around(generation_batch, global_batch))}, or leave it unset."
        )
    if _NO_BF16 in message:
        return RecipeError(
            f"{where}: bf16: true needs a GPU with bf16 support, and this machine has none. For a CPU run pass "
            "--bf16 false --use_cpu true (checks such as --show_prompts and scripts/plan.py need no change)."
        )
    return RecipeError(f"{where}: {message}")
