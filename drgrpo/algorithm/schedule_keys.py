"""The ranges of the schedule and batch keys (zero, negative, non-integer refused), checked in one place.

Every consumer of these keys divides by them or counts with them: TRL's `GRPOConfig.__post_init__`, the trainer, the
family card (`--explain`), the planner's batch arithmetic (`drgrpo.planning.batch`) and the verl converter. A value
out of range there is a `ZeroDivisionError` or a silent nonsense schedule; here it is one line naming the key, the
value, where it came from and the fix. `drgrpo.recipe.cli.parse_recipe` runs this check on the recipe and command
line before anything is built (so `train.py`, `--explain`, `--show_prompts` and `plan.py` all refuse the same
values), `DrGRPOConfig.__post_init__` runs it again for configs built in Python, and `BatchPlan` for the planner's
library. Standard library only (`scripts/train.py` runs it before torch is imported).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drgrpo.core.errors import RecipeError


@dataclass(frozen=True)
class KeyRange:
    """What a key counts, the least value it takes, and what else it may be (None: unset; -1 for max_steps)."""

    counts: str
    minimum: int = 1
    whole: bool = True  # a whole number (num_train_epochs may be a fraction)
    unset: str | None = None  # what leaving the key unset (None) means, when it may be unset
    special: tuple[int, str] | None = None  # one more value allowed, and what it means


SCHEDULE_KEYS: dict[str, KeyRange] = {
    "per_device_train_batch_size": KeyRange("completions per device in each micro-step"),
    "gradient_accumulation_steps": KeyRange("micro-steps per optimizer step"),
    "steps_per_generation": KeyRange(
        "micro-steps per generation round", unset="unset, TRL uses gradient_accumulation_steps"
    ),
    "generation_batch_size": KeyRange(
        "completions per generation round",
        unset="unset, TRL uses per_device_train_batch_size x world size x steps_per_generation",
    ),
    "num_generations": KeyRange(
        "completions per prompt (the group); a group of one has no baseline and carries no learning signal", minimum=2
    ),
    "num_generations_eval": KeyRange("completions per prompt in evaluation", unset="unset, num_generations is used"),
    "per_device_eval_batch_size": KeyRange("completions per device in each evaluation step"),
    "num_iterations": KeyRange("optimizer passes over each rollout"),
    "dynamic_sampling_max_rounds": KeyRange("generation rounds per batch at most"),
    "max_completion_length": KeyRange("tokens per completion at most"),
    "max_prompt_tokens": KeyRange("tokens per prompt at most", unset="unset, every prompt is kept"),
    "max_steps": KeyRange("optimizer steps", special=(-1, "num_train_epochs decides")),
    "num_train_epochs": KeyRange("passes over the training set", whole=False),
}


def _as_number(value: Any) -> Any:
    """A command-line string as the number (or None) the parser will make of it; anything else unchanged."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.lower() in ("none", "null", "~"):
        return None
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            continue
    return value


def schedule_value_problem(key: str, value: Any) -> str | None:
    """Why `value` is out of range for schedule key `key` ("0 is not allowed: ..."), or None when it is fine (or
    `key` is not a schedule key)."""
    spec = SCHEDULE_KEYS.get(key)
    if spec is None:
        return None
    value = _as_number(value)
    if value is None:
        return None if spec.unset else f"it must be set: it counts {spec.counts}"
    if spec.special is not None and value == spec.special[0] and not isinstance(value, bool):
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    whole = number and (isinstance(value, int) or not spec.whole)
    if whole and (value >= spec.minimum if spec.whole else value > 0):
        return None
    least = f"a whole number of {spec.minimum} or more" if spec.whole else "a number above 0"
    others = []
    if spec.special is not None:
        others.append(f"{spec.special[0]}: {spec.special[1]}")
    if spec.unset:
        others.append(f"null: {spec.unset}")
    also = f" (or {'; or '.join(others)})" if others else ""
    return f"{value!r} is not allowed: it counts {spec.counts}, so it takes {least}{also}"


def fix_hint(key: str, where: str) -> str:
    """How to fix a key's value at its place: " Fix it in the recipe, or override it with --key VALUE." for a recipe."""
    if where.startswith("recipe"):
        return f" Fix it in the recipe, or override it with --{key} VALUE."
    if where == "command line":
        return f" Fix the --{key} value."
    return ""


def check_schedule_values(values: Mapping[str, Any], where: str, sources: Mapping[str, str] | None = None) -> None:
    """Raise a `RecipeError` for the first schedule key of `values` out of range: one line with the key, value, place
    and fix. `where` names the place ("recipe r.yaml", "command line", "batch_plan"); `sources` may name another
    place for single keys (the command line for an override)."""
    for key, value in values.items():
        problem = schedule_value_problem(key, value)
        if problem is not None:
            place = (sources or {}).get(key, where)
            raise RecipeError(f"{place}: {key}: {problem}.{fix_hint(key, place)}")
