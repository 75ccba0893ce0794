"""Pre-flight parsing: a recipe parsed for any target world size, on any machine, without a model or a GPU.

`--explain`, `--show_prompts` and the planner (`drgrpo.planning`) inspect a recipe meant for a world size this
machine does not have. `parse_for_planning` parses it with the pre-flight batch stand-ins (`drgrpo.recipe.cli`)
and returns the recipe's own batch values beside the parsed arguments, for the caller to check at the target
world size. The planner reads a recipe's own keys with `recipe_values`, the one reader (`drgrpo.recipe.cli`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from drgrpo.core.errors import RecipeError
from drgrpo.recipe.batch_rules import eval_batch_problem
from drgrpo.recipe.cli import BATCH_KEYS, parse_values, recipe_values, require_recipe
from drgrpo.recipe.file import read_header, recipe_argv, recipe_path

logger = logging.getLogger(__name__)


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
    """`RECIPE.yaml [--key value ...] --explain`: every check training runs before its model loads, then the GRPO
    family card (last), from the config alone: no weights load, nothing downloads, nothing of the run is written.

    The checks are training's own (`drgrpo.run.before_model`, with `inspect`): rewards, model files and context,
    tokenizer, data; what only the hub holds here is logged as not checked. The card is `recipe_card`'s.
    """
    from drgrpo.run.before_model import before_model  # torch and TRL: after the recipe's cheap checks (see above)

    script_args, training_args, model_args, card = _parse_and_card(argv)
    inputs = before_model(script_args, training_args, model_args, inspect=True)
    for note in inputs.not_checked:
        logger.warning("--explain: not checked here: %s.", note)
    data = "" if inputs.train_dataset is None else f"; {len(inputs.train_dataset)} training prompts"
    data += "" if inputs.eval_dataset is None else f", {len(inputs.eval_dataset)} held out"
    passed = "passed" if not inputs.not_checked else "passed, but for what is named above as not checked"
    logger.info("--explain: the checks training runs before its model loads %s%s; no weights loaded.", passed, data)
    return card


def recipe_card(argv: Sequence[str]) -> str:
    """The algorithm line and GRPO family card of `RECIPE.yaml [--key value ...]`, from the parsed config alone.

    Parsed as a pre-flight check (`parse_recipe(..., preflight=True)`): the card does not depend on the device, and
    TRL's batch check at this machine's world size would refuse a recipe that is right for its target world size
    (`scripts/plan.py` checks that). The card's batch values are then the recipe's own, not the stand-ins.
    """
    return _parse_and_card(argv)[3]


def _parse_and_card(argv: Sequence[str]) -> tuple[Any, Any, Any, str]:
    """(script args, trainer args, model args, card) of a command line, its batch rules checked at its world size."""
    from drgrpo.algorithm.family import family_card  # torch and TRL: after the recipe's cheap checks (see above)
    from drgrpo.recipe.config_errors import batch_rule_error

    argv = recipe_argv([token for token in argv if token != "--explain"])
    require_recipe(argv)
    path = recipe_path(argv)
    index = argv.index("--config")
    overrides = [*argv[:index], *argv[index + 2 :]]
    script_args, training_args, model_args, batch = parse_for_planning(path, overrides)
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
        setattr(training_args, key, int(batch[key]))  # the card's batch values are the recipe's own
    training_args.steps_per_generation = recipe_steps_per_generation(batch, world_size)
    return script_args, training_args, model_args, f"{training_args.algorithm_summary}\n{family_card(training_args)}"


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
