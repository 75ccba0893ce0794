"""Pre-flight parsing: a recipe parsed for any target world size, on any machine, without a model or a GPU.

`--explain`, `--show_prompts` and the planner (`drgrpo.planning`) inspect a recipe meant for a world size this
machine does not have. `parse_for_planning` parses it with the pre-flight batch stand-ins (`drgrpo.recipe.cli`)
and returns the recipe's own batch values beside the parsed arguments, for the caller to check at the target
world size. The planner reads a recipe's own keys with `recipe_values`, the one reader (`drgrpo.recipe.cli`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from drgrpo.core.errors import RecipeError
from drgrpo.recipe.batch_rules import eval_batch_problem
from drgrpo.recipe.cli import BATCH_KEYS, parse_values, recipe_values, require_recipe
from drgrpo.recipe.file import read_header, recipe_argv, recipe_path


def parse_for_planning(recipe: str | Path, overrides: Sequence[str] = ()) -> tuple[Any, Any, Any, dict[str, Any]]:
    """`parse_recipe(..., preflight=True)` for any target world size: (script args, trainer args, model args,
    batch values).

    While parsing, TRL checks the batch keys against the *current* world size (one CPU process here), which says
    nothing about the target one, so the trainer args hold the pre-flight stand-ins
    (`drgrpo.recipe.cli.PREFLIGHT_BATCH`); the batch values returned are the recipe's own (None where it sets none and
    TRL derives the value), which
    `batch_plan` checks for the target world size.
    """
    # Imported here, not at the top, for speed: `scripts/train.py` imports this module, and a wrong recipe path must
    # be reported before torch and TRL load (10 s or more).
    from drgrpo.algorithm.config import DrGRPOConfig
    from drgrpo.data.sources import data_sources

    values = recipe_values(recipe, overrides)
    script_args, args, model_args = parse_values(values, recipe, preflight=True)
    try:  # a recipe without data (or with a malformed mixture) cannot train: refused here, not after a plan of it
        data_sources(script_args)
    except ValueError as error:
        raise RecipeError(f"recipe {recipe}: {error}") from error
    defaults = {f.name: f.default for f in dataclasses.fields(DrGRPOConfig)}
    batch = {key: values.get(key, defaults[key]) for key in BATCH_KEYS}
    return script_args, args, model_args, batch


def explain_recipe(argv: Sequence[str]) -> str:
    """The GRPO family card of `RECIPE.yaml [--key value ...] --explain`, built from the config alone (no model).

    Parsed as a pre-flight check (`parse_recipe(..., preflight=True)`): the card does not depend on the device, and
    TRL's batch check at this machine's world size would refuse a recipe that is right for its target world size
    (`scripts/plan.py` checks that). The card's batch values are then the recipe's own, not the stand-ins.
    """
    from drgrpo.algorithm.family import family_card  # torch and TRL: after the recipe's cheap checks (see above)
    from drgrpo.recipe.config_errors import batch_rule_error

    argv = recipe_argv([token for token in argv if token != "--explain"])
    require_recipe(argv)
    path = recipe_path(argv)
    index = argv.index("--config")
    overrides = [*argv[:index], *argv[index + 2 :]]
    _, training_args, _, batch = parse_for_planning(path, overrides)
    # Training checks the batch rules at its own world size; the pre-flight parse above used stand-ins, so check the
    # recipe's own values here at its target (the header's world size, else WORLD_SIZE, else 1).
    world_size = read_header(path)["world_size"] or int(os.environ.get("WORLD_SIZE", "1"))
    where = f"recipe {path} at world size {world_size}"
    error = batch_rule_error(batch, world_size, where)
    if error is not None:
        raise error
    if training_args.eval_strategy != "no":  # TRL's eval rule, as the planner checks it (scripts/plan.py)
        generations = int(batch["num_generations_eval"] or batch["num_generations"])
        problem = eval_batch_problem(int(batch["per_device_eval_batch_size"]), world_size, generations)
        if problem is not None:
            raise RecipeError(f"{where}: {problem[0]} Fix: {problem[1]}")
    for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations"):
        setattr(training_args, key, int(batch[key]))
    training_args.steps_per_generation = recipe_steps_per_generation(batch, world_size)
    return f"{training_args.algorithm_summary}\n{family_card(training_args)}"


def recipe_steps_per_generation(batch: dict[str, Any], world_size: int) -> int:
    """TRL's steps_per_generation for the recipe's own batch values (`GRPOConfig.__post_init__`): the recipe's
    value, else generation_batch_size / (per_device_train_batch_size x world size) (at least 1), else
    gradient_accumulation_steps."""
    if batch.get("steps_per_generation") is not None:
        return int(batch["steps_per_generation"])
    if batch.get("generation_batch_size") is not None:
        local = int(batch["per_device_train_batch_size"]) * world_size
        return max(1, int(batch["generation_batch_size"]) // local)
    return int(batch["gradient_accumulation_steps"])
