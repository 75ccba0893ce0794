"""Parsing a recipe: a YAML file plus command-line overrides, into (script, trainer, model) arguments.

`recipe_values` is the one reader of a recipe: the file's keys (`drgrpo.recipe.file.read_recipe`, which runs before
torch/TRL are imported, so a typo in the recipe path is reported at once), then the command line's over them, both
typed by the train parser itself; training (`parse_recipe`), the pre-flight checks and the planner
(`drgrpo.recipe.preflight`) and the evaluator's recipe settings read recipes through it. Every mistake is raised as a
`RecipeError` naming the key, value and file with the fix (`drgrpo.core.errors`), including TRL's and transformers'
own config checks (`drgrpo.recipe.config_errors`).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import warnings
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drgrpo.core.errors import RecipeError, UsageError
from drgrpo.recipe.file import read_recipe, recipe_argv, recipe_path

if TYPE_CHECKING:
    from trl import ModelConfig

    from drgrpo.algorithm.config import DrGRPOConfig
    from drgrpo.recipe.parser import RecipeParser
    from drgrpo.run.arguments import ScriptArguments

__all__ = [
    "BATCH_KEYS",
    "PREFLIGHT_BATCH",
    "make_parser",
    "parse_recipe",
    "recipe_argv",
    "recipe_values",
    "require_recipe",
]

HELP_ALL = "--help-all"
UNSET = object()  # a key the command line does not give
TRAIN_USAGE = "python scripts/train.py RECIPE.yaml [--key value ...]"
GRADIENT_CHECKPOINTING_DEPRECATION = r"`gradient_checkpointing(_kwargs)?` is deprecated"
# Checks that only inspect a recipe (--show_prompts) run on a CPU login node for any target world size: TRL checks
# the batch keys against the *current* world size (one CPU process), so they are parsed with stand-ins that pass at
# any world size (`scripts/plan.py` checks the recipe's own values for the target), and `use_cpu` so that
# `bf16: true` is not refused for want of a GPU. Nothing is trained with these values.
PREFLIGHT_BATCH = {
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "num_generations": 2,
    "num_generations_eval": 2,
    "per_device_eval_batch_size": 2,
}
# The keys that decide TRL's batch rules: the stand-ins above and the two that set the generation round.
BATCH_KEYS = (*PREFLIGHT_BATCH, "generation_batch_size", "steps_per_generation")


def make_parser(*, help_all: bool = False) -> RecipeParser:
    from drgrpo.recipe.parser import make_parser as make_recipe_parser

    return make_recipe_parser(help_all=help_all)


def _known_keys(parser: RecipeParser) -> set[str]:
    return {action.dest for action in parser._actions} | {"env", "help_all"}


def _unknown_key_error(key: str, known: Collection[str], where: str) -> RecipeError:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return UsageError(f"Unknown key {key!r} in {where}.{hint} Run `python scripts/train.py --help` for all keys.")


def recipe_values(path: str | Path | None, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The keys a recipe file sets (`read_recipe`: a key written twice is an error naming its line), then the
    `--key value ...` / `--key=value` overrides over them, typed by the train parser: the command line by
    `parse_known_args` (`--key null` unsets an optional key), the file's strings as argparse types a default
    (`learning_rate: 1e-6` is YAML's string "1e-6": a float here). An unknown key, a value of the wrong type or a zero
    schedule key is a `RecipeError` naming its place."""
    recipe = read_recipe(path) if path else {}  # before the heavy imports: a wrong path fails at once
    from drgrpo.algorithm.sampling_keys import check_sampling_values
    from drgrpo.algorithm.schedule_keys import check_schedule_values
    from drgrpo.recipe.parser import actions_by_key, check_values

    parser = make_parser()
    actions, known = actions_by_key(parser), _known_keys(parser)  # `env`: TRL's environment variables (`parse_values`)
    for key in recipe:
        if key not in known:
            raise _unknown_key_error(key, known, f"recipe {path}")
    where = f"recipe {path}" if path else "command line"
    check_values(parser, recipe, where)
    given, rest = parser.parse_known_args(list(overrides), argparse.Namespace(**dict.fromkeys(actions, UNSET)))
    for token in rest:
        if token.startswith("-"):
            raise _unknown_key_error(token.lstrip("-").partition("=")[0].replace("-", "_"), known, "the command line")
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    command_line = {key: value for key, value in vars(given).items() if value is not UNSET}
    values = {
        key: parser._get_value(actions[key], value) if key in actions and isinstance(value, str) else value
        for key, value in recipe.items()
    }
    values.update(command_line)
    # Zero, negative or fractional schedule keys: refused here, before the preflight stand-ins replace them.
    check_schedule_values(values, where, dict.fromkeys(command_line, "command line"))
    # Sampling keys out of range (temperature 0 or NaN, min_p 1.5, ...): refused before any model loads.
    check_sampling_values(values, where, dict.fromkeys(command_line, "command line"))
    return values


def preflight_overrides(values: dict[str, Any]) -> dict[str, Any]:
    """Stand-ins that let a recipe be parsed for inspection on any machine (see `PREFLIGHT_BATCH`)."""
    overrides = {"use_cpu": True, **PREFLIGHT_BATCH}
    if values.get("generation_batch_size") is not None:
        overrides["generation_batch_size"] = 2
    elif values.get("steps_per_generation") is not None:
        overrides["steps_per_generation"] = 1
    return overrides


def require_recipe(argv: Sequence[str]) -> None:
    """A `RecipeError` with the usage when the command line names no recipe file (`--help` needs none)."""
    if {"-h", "--help", HELP_ALL} & set(argv) or recipe_path(recipe_argv(argv)) is not None:
        return
    raise UsageError(
        f"No recipe given. Usage: {TRAIN_USAGE} (the shipped recipes are recipes/*.yaml, e.g. "
        "recipes/tiny_drgrpo.yaml; `--help` lists the keys)."
    )


def _print_help_and_exit(argv: Sequence[str]) -> None:
    make_parser(help_all=HELP_ALL in argv).print_help()
    sys.exit(0)


def parse_recipe(argv: Sequence[str], *, preflight: bool = False) -> tuple[ScriptArguments, DrGRPOConfig, ModelConfig]:
    """Parse `RECIPE.yaml [--key value ...]` (or `--config RECIPE.yaml ...`) into the three argument objects.

    `preflight`: the recipe is only inspected (`--show_prompts`), not trained: parse it on any machine, without a
    GPU, for any target world size (`preflight_overrides`).
    """
    argv = recipe_argv(argv)
    if {"-h", "--help", HELP_ALL} & set(argv):
        _print_help_and_exit(argv)
    path = recipe_path(argv)
    overrides = list(argv)
    if path is not None:
        del overrides[overrides.index("--config") : overrides.index("--config") + 2]
    return parse_values(recipe_values(path, overrides), path, preflight=preflight)


def parse_values(
    values: dict[str, Any], path: str | Path | None, *, preflight: bool = False
) -> tuple[ScriptArguments, DrGRPOConfig, ModelConfig]:
    """The three argument objects of a recipe's values (`recipe_values` of the file at `path`)."""
    from drgrpo.recipe.config_errors import translate_config_error

    parser = make_parser()
    defaults = {action.dest: action.default for action in parser._actions}
    settings = {**values, **(preflight_overrides(values) if preflight else {})}
    env = settings.pop("env", None) or {}  # TRL's `env:` mapping: environment variables set before training
    if not isinstance(env, dict):
        raise UsageError(f"recipe {path}: env must be a mapping of environment variables (`env: {{NAME: value}}`).")
    os.environ.update({name: str(value) for name, value in env.items()})
    parser.set_defaults_with_config(**settings)
    try:
        with warnings.catch_warnings():
            # TRL 1.16's GRPOConfig defaults `gradient_checkpointing` to True, so transformers warns that the name is
            # deprecated for every recipe, even one that never sets it. The key still works (transformers copies it
            # to `activation_checkpointing`, and TRL reads it), so the warning has nothing for the user to do.
            warnings.filterwarnings("ignore", message=GRADIENT_CHECKPOINTING_DEPRECATION, category=FutureWarning)
            script_args, training_args, model_args = parser.parse_args_into_dataclasses(args=[])
    except RecipeError:
        raise
    except ValueError as error:
        where = f"recipe {path}" if path else "command line"
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        raise translate_config_error(error, values, defaults, world_size, where) from error
    if training_args.run_name is None and path is not None:
        # Name the run after its recipe (recipes/qwen3_8b_drgrpo.yaml -> qwen3-8b-drgrpo) so that dashboards group
        # runs of one recipe, unless the recipe or command line names it.
        training_args.run_name = Path(path).stem.replace("_", "-")
    return script_args, training_args, model_args
