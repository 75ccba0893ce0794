"""Parsing a recipe: a YAML file plus command-line overrides, into (script, trainer, model) arguments.

The checks that need no library run first (`drgrpo.recipe.file`: the file exists, is YAML, is a mapping), so a
typo in the recipe path is reported at once; torch/TRL are imported only after them. Every mistake is raised as a
`RecipeError` naming the key, value and file with the fix (`drgrpo.core.errors`), including TRL's and transformers'
own config checks (`drgrpo.recipe.config_errors`).
"""

from __future__ import annotations

import difflib
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drgrpo.core.errors import RecipeError, UsageError
from drgrpo.recipe.file import command_line_values, read_recipe, recipe_argv, recipe_path

if TYPE_CHECKING:
    from trl import ModelConfig

    from drgrpo.algorithm.config import DrGRPOConfig
    from drgrpo.recipe.parser import RecipeParser
    from drgrpo.run.arguments import ScriptArguments

__all__ = [
    "BATCH_KEYS",
    "PREFLIGHT_BATCH",
    "check_keys",
    "make_parser",
    "parse_recipe",
    "recipe_argv",
    "require_recipe",
]

HELP_ALL = "--help-all"
# A command-line value that unsets an optional key (YAML's spellings of null, and Python's): `--dataset_path null`.
NULL_VALUES = frozenset({"null", "Null", "NULL", "~", "None"})  # not "none": a value of report_to, scale_rewards
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


def _unknown_key_error(key: str, known: set[str], where: str) -> RecipeError:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return UsageError(f"Unknown key {key!r} in {where}.{hint} Run `python scripts/train.py --help` for all keys.")


def check_keys(parser: RecipeParser, argv: Sequence[str], recipe: dict[str, Any] | None = None) -> None:
    """Raise a `RecipeError` naming any recipe or command-line key that no dataclass knows, with the closest match."""
    known = _known_keys(parser)
    path = recipe_path(argv)
    if recipe is None:
        recipe = read_recipe(path) if path else {}
    for key in recipe:
        if key not in known:
            raise _unknown_key_error(key, known, f"recipe {path}")
    for key in command_line_values(argv):
        if key not in ("config", "help", "h") and key not in known:
            raise _unknown_key_error(key, known, "the command line")


def preflight_overrides(values: dict[str, Any]) -> list[str]:
    """Command-line overrides that let a recipe be parsed for inspection on any machine (see `PREFLIGHT_BATCH`)."""
    overrides = ["--use_cpu", "true"]
    overrides += [token for key, value in PREFLIGHT_BATCH.items() for token in (f"--{key}", str(value))]
    if values.get("generation_batch_size") is not None:
        overrides += ["--generation_batch_size", "2"]
    elif values.get("steps_per_generation") is not None:
        overrides += ["--steps_per_generation", "1"]
    return overrides


def require_recipe(argv: Sequence[str]) -> None:
    """A `RecipeError` with the usage when the command line names no recipe file (`--help` needs none)."""
    if {"-h", "--help", HELP_ALL} & set(argv) or recipe_path(recipe_argv(argv)) is not None:
        return
    raise UsageError(
        f"No recipe given. Usage: {TRAIN_USAGE} (the shipped recipes are recipes/*.yaml, e.g. "
        "recipes/tiny_drgrpo.yaml; `--help` lists the keys)."
    )


def optional_keys() -> set[str]:
    """The keys whose type admits None (`X | None`): the ones `--key null` may unset."""
    from typing import get_args, get_type_hints

    from trl import ModelConfig

    from drgrpo.algorithm.config import DrGRPOConfig
    from drgrpo.run.arguments import ScriptArguments

    return {
        key
        for cls in (ScriptArguments, DrGRPOConfig, ModelConfig)
        for key, hint in get_type_hints(cls).items()
        if type(None) in get_args(hint)
    }


def unset_keys(overrides: dict[str, Any]) -> list[str]:
    """The keys the command line unsets (`--key null`, `None` or `~`); a `UsageError` for a key that cannot be
    unset (its type has no None: it always has a value)."""
    keys = [key for key, raw in overrides.items() if isinstance(raw, str) and raw in NULL_VALUES]
    if keys:
        optional = optional_keys()
        for key in keys:
            if key not in optional:
                raise UsageError(
                    f"command line: --{key} {overrides[key]}: {key} cannot be unset, it always has a value; give "
                    f"one (`python scripts/train.py --help` lists its type and default), or leave --{key} out to "
                    "keep the recipe's."
                )
    return keys


def drop_keys(argv: Sequence[str], keys: Sequence[str]) -> list[str]:
    """`argv` without the `--key VALUE` / `--key=VALUE` tokens of `keys` (one value each)."""
    out: list[str] = []
    skip_value = False
    for token in argv:
        if skip_value:
            skip_value = False
            continue
        name, has_value, _ = token[2:].partition("=") if token.startswith("--") else ("", False, "")
        if name.replace("-", "_") in keys:
            skip_value = not has_value
            continue
        out.append(token)
    return out


def _print_help_and_exit(argv: Sequence[str]) -> None:
    make_parser(help_all=HELP_ALL in argv).print_help()
    sys.exit(0)


def parse_recipe(argv: Sequence[str], *, preflight: bool = False) -> tuple[ScriptArguments, DrGRPOConfig, ModelConfig]:
    """Parse `RECIPE.yaml [--key value ...]` (or `--config RECIPE.yaml ...`) into the three argument objects.

    `preflight`: the recipe is only inspected (`--show_prompts`), not trained: parse it on any machine, without a
    GPU, for any target world size (`preflight_overrides`).
    """
    argv = recipe_argv(argv)
    path = recipe_path(argv)
    recipe = read_recipe(path) if path else {}  # before the heavy imports: a wrong path fails at once
    if {"-h", "--help", HELP_ALL} & set(argv):
        _print_help_and_exit(argv)
    # The command line's values as single strings (lists for several, True for a bare flag), over the recipe's.
    overrides = {key: raw[0] if len(raw) == 1 else (raw or True) for key, raw in command_line_values(argv).items()}
    overrides.pop("config", None)
    # `--key null` unsets an optional key (the recipe's value too), as `key: null` does in the file.
    unset = unset_keys(overrides)
    overrides.update(dict.fromkeys(unset))
    values = {**recipe, **overrides}

    from drgrpo.algorithm.schedule_keys import check_schedule_values
    from drgrpo.recipe.config_errors import translate_config_error
    from drgrpo.recipe.parser import check_values

    parser = make_parser()
    check_keys(parser, argv, recipe)
    check_values(parser, recipe, f"recipe {path}")
    check_values(parser, {key: raw for key, raw in overrides.items() if raw not in (True, None)}, "command line")
    # Zero, negative or fractional schedule keys: refused here, before the preflight stand-ins below replace them.
    where = f"recipe {path}" if path else "command line"
    check_schedule_values(values, where, dict.fromkeys(overrides, "command line"))
    if preflight:
        argv = [*argv, *preflight_overrides(values)]
    if unset:  # argparse cannot parse None: the keys leave the command line and become None after the recipe's
        argv = drop_keys(argv, unset)
        parser.unset_keys = tuple(unset)
    try:
        with warnings.catch_warnings():
            # TRL 1.16's GRPOConfig defaults `gradient_checkpointing` to True, so transformers warns that the name is
            # deprecated for every recipe, even one that never sets it. The key still works (transformers copies it
            # to `activation_checkpointing`, and TRL reads it), so the warning has nothing for the user to do.
            warnings.filterwarnings("ignore", message=GRADIENT_CHECKPOINTING_DEPRECATION, category=FutureWarning)
            script_args, training_args, model_args = parser.parse_args_and_config(argv)
    except RecipeError:
        raise
    except ValueError as error:
        where = f"recipe {path}" if path else "command line"
        defaults = {action.dest: action.default for action in parser._actions}
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        raise translate_config_error(error, values, defaults, world_size, where) from error
    if training_args.run_name is None and path is not None:
        # Name the run after its recipe (recipes/qwen3_8b_drgrpo.yaml -> qwen3-8b-drgrpo) so that dashboards group
        # runs of one recipe, unless the recipe or command line names it.
        training_args.run_name = Path(path).stem.replace("_", "-")
    return script_args, training_args, model_args
