"""Errors TRL and transformers raise while a recipe is parsed, said again in the recipe's own keys with a fix.

TRL checks that a generation round holds whole groups: "generation_batch_size (64) must be divisible by
num_generations (5)", naming a key the recipe never set. Here the same condition is explained with the keys that
decide it (per_device_train_batch_size x steps_per_generation x world size, TRL's `GRPOConfig.__post_init__`)
and with integer values that satisfy it. The values come from the planner (`drgrpo.recipe.batch_rules`), so that a fix
offered here is one `scripts/plan.py` accepts. Pure functions; no torch import.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from drgrpo.core.errors import RecipeError
from drgrpo.recipe.batch_rules import (
    batch_rules_hold,
    nearest_generation_batch_size,
    nearest_num_generations,
    nearest_per_device,
)

_GENERATION_BATCH = re.compile(r"generation_batch_size \((\d+)\) must be divisible by num_generations \((\d+)\)")
_GLOBAL_BATCH = re.compile(r"generation_batch_size \((\d+)\) must be divisible by the global batch size \((\d+)\)")
_NO_BF16 = "doesn't support bf16/gpu"


def _or(values: tuple[int | None, int | None]) -> str:
    return " or ".join(str(v) for v in values if v is not None)


def batch_fix(
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    steps_per_generation: int | None,
    num_generations: int,
    world_size: int,
) -> str:
    """The explanation and fix for a generation round of per_device_train_batch_size x steps_per_generation (or
    gradient_accumulation_steps, when unset) x world size completions that is not a multiple of `num_generations`.

    The values offered are the planner's (`drgrpo.recipe.batch_rules`): the nearest per-device batches, and group sizes,
    for which every batch rule holds with the other keys unchanged.
    """
    keys = {"steps_per_generation": steps_per_generation}
    batch = (world_size, per_device_train_batch_size, gradient_accumulation_steps, num_generations)
    per_device = _or(nearest_per_device(*batch, **keys))
    generations = _or(nearest_num_generations(*batch, **keys))
    if steps_per_generation is not None:
        factor, factor_text = steps_per_generation, "steps_per_generation"
    else:
        factor, factor_text = gradient_accumulation_steps, "gradient_accumulation_steps"
    total = per_device_train_batch_size * factor * world_size
    fixes = [f"per_device_train_batch_size: {per_device}"] if per_device else []
    fixes += [f"num_generations: {generations}"] if generations else []
    return (
        f"A generation round holds per_device_train_batch_size ({per_device_train_batch_size}) x {factor_text} "
        f"({factor}) x world size ({world_size}) = {total} completions, not a multiple of num_generations "
        f"({num_generations}): each prompt's group of {num_generations} must fit in one round. Fix: "
        f"{', or '.join(fixes) or 'none found near these values'} (`python scripts/plan.py RECIPE --num_processes N` "
        "checks a target world size)."
    )


def _generation_batch_size_fix(values: Mapping[str, int], world_size: int) -> str:
    below, above = nearest_generation_batch_size(
        world_size,
        values["per_device_train_batch_size"],
        values["gradient_accumulation_steps"],
        values["num_generations"],
        values["generation_batch_size"],
    )
    if below is None and above is None:
        return "leave generation_batch_size unset and set steps_per_generation instead."
    return f"generation_batch_size: {_or((below, above))}, or leave it unset."


def batch_rule_error(batch: Mapping[str, Any], world_size: int, where: str) -> RecipeError | None:
    """The error TRL raises at `world_size` processes for these batch values (`drgrpo.recipe.preflight`'s batch
    dict: the recipe's own values, None where unset), said in the recipe's keys with a fix; None when TRL starts.

    `--explain` runs it at the recipe's target world size, so that a card is never printed for a recipe that
    training then refuses."""
    values = {key: None if batch.get(key) is None else int(batch[key]) for key in batch}
    keys = {key: values.get(key) for key in ("steps_per_generation", "generation_batch_size")}
    per_device, accumulation = values["per_device_train_batch_size"], values["gradient_accumulation_steps"]
    generations = values["num_generations"]
    if batch_rules_hold(world_size, per_device, accumulation, generations, **keys):
        return None
    if keys["generation_batch_size"] is not None:
        fix = _generation_batch_size_fix(values, world_size)
        return RecipeError(
            f"{where}: generation_batch_size ({keys['generation_batch_size']}) must be a multiple of num_generations "
            f"({generations}) and of per_device_train_batch_size x world size ({per_device * world_size}). Fix: {fix}"
        )
    fix = batch_fix(per_device, accumulation, keys["steps_per_generation"], generations, world_size)
    return RecipeError(f"{where}: {fix}")


def translate_config_error(
    error: ValueError, values: Mapping[str, Any], defaults: Mapping[str, Any], world_size: int, where: str
) -> RecipeError:
    """A `RecipeError` for a `ValueError` raised while the recipe's config objects were built.

    `values`: the keys the recipe and command line set; `defaults`: the dataclass defaults; `where`: "recipe X".
    """
    message = str(error)

    def value(key: str) -> Any:
        return values.get(key, defaults.get(key))

    match = _GENERATION_BATCH.search(message) or _GLOBAL_BATCH.search(message)
    if match:
        batch = {
            key: None if value(key) is None else int(value(key))
            for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation")
        }
        named = match.re is _GENERATION_BATCH  # TRL's message names num_generations; the other one does not
        batch["num_generations"] = int(match.group(2) if named else value("num_generations"))
        generation_batch = int(match.group(1))
        local = batch["per_device_train_batch_size"] * world_size
        if value("generation_batch_size") is not None:
            fix = _generation_batch_size_fix({**batch, "generation_batch_size": generation_batch}, world_size)
            return RecipeError(
                f"{where}: generation_batch_size ({generation_batch}) must be a multiple of num_generations "
                f"({batch['num_generations']}) and of per_device_train_batch_size x world size ({local}). Fix: {fix}"
            )
        fix = batch_fix(
            batch["per_device_train_batch_size"],
            batch["gradient_accumulation_steps"],
            batch["steps_per_generation"],
            batch["num_generations"],
            world_size,
        )
        return RecipeError(f"{where}: {fix}")
    if _NO_BF16 in message:
        return RecipeError(
            f"{where}: bf16: true needs a GPU with bf16 support, and this machine has none. For a CPU run pass "
            "--bf16 false --use_cpu true (checks such as --show_prompts and scripts/plan.py need no change)."
        )
    return RecipeError(f"{where}: {message}")
