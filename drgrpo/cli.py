"""Parsing a recipe: a YAML file plus command-line overrides, into (script, trainer, model) arguments."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

import yaml
from trl import ModelConfig, TrlParser

from drgrpo.config import DrGRPOConfig, ScriptArguments
from drgrpo.family import family_card


def make_parser() -> TrlParser:
    return TrlParser((ScriptArguments, DrGRPOConfig, ModelConfig))


def _known_keys(parser: TrlParser) -> set[str]:
    return {action.dest for action in parser._actions}


def _unknown_key_error(key: str, known: set[str], where: str) -> ValueError:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(f"Unknown key {key!r} in {where}.{hint} Run `python scripts/train.py --help` for all keys.")


def recipe_argv(argv: Sequence[str]) -> list[str]:
    """Accept the recipe path as the first positional argument (`train.py RECIPE.yaml --key value`)."""
    argv = list(argv)
    if argv and argv[0].endswith((".yaml", ".yml")) and "--config" not in argv:
        argv = ["--config", argv[0], *argv[1:]]
    return argv


def check_keys(parser: TrlParser, argv: Sequence[str]) -> None:
    """Raise a `ValueError` naming any recipe or command-line key that no dataclass knows, with the closest match."""
    known = _known_keys(parser) | {"env"}
    argv = list(argv)
    if "--config" in argv:
        path = argv[argv.index("--config") + 1]
        with open(path) as f:
            recipe = yaml.safe_load(f) or {}
        if not isinstance(recipe, dict):
            raise ValueError(f"Recipe {path} must be a YAML mapping of key: value.")
        for key in recipe:
            if key not in known:
                raise _unknown_key_error(key, known, f"recipe {path}")
    for token in argv:
        if token.startswith("--"):
            key = token[2:].split("=", 1)[0]
            if key != "config" and key.replace("-", "_") not in known and key not in known:
                raise _unknown_key_error(key, known, "the command line")


def parse_recipe(argv: Sequence[str]) -> tuple[ScriptArguments, DrGRPOConfig, ModelConfig]:
    """Parse `RECIPE.yaml [--key value ...]` (or `--config RECIPE.yaml ...`) into the three argument objects."""
    parser = make_parser()
    argv = recipe_argv(argv)
    check_keys(parser, argv)
    script_args, training_args, model_args = parser.parse_args_and_config(argv)
    if training_args.run_name is None and "--config" in argv:
        # Name the run after its recipe (recipes/qwen3_8b_drgrpo.yaml -> qwen3-8b-drgrpo) so that dashboards group
        # runs of one recipe, unless the recipe or command line names it.
        training_args.run_name = Path(argv[argv.index("--config") + 1]).stem.replace("_", "-")
    return script_args, training_args, model_args


def explain_recipe(argv: Sequence[str]) -> str:
    """The GRPO family card of `RECIPE.yaml [--key value ...] --explain`, built from the config alone (no model).

    Parsed with `use_cpu` set, because the card does not depend on the device and a GPU recipe's `bf16: true` would
    otherwise be refused on a machine without a GPU.
    """
    argv = [token for token in argv if token != "--explain"]
    _, training_args, _ = parse_recipe([*argv, "--use_cpu", "true"])
    return f"{training_args.algorithm_summary}\n{family_card(training_args)}"
