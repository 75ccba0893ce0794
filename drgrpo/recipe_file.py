"""The cheap checks of a recipe command line, run before torch/TRL are imported (which takes 10 s or more).

A missing recipe file, a YAML syntax error or a recipe that is not a `key: value` mapping is reported at once, as
a `RecipeError` naming the file and the fix. Imports only the standard library and PyYAML.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from drgrpo.errors import RecipeError, RecipeFileNotFoundError

RECIPE_SUFFIXES = (".yaml", ".yml")
RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"


def recipe_argv(argv: Sequence[str]) -> list[str]:
    """Accept the recipe path as the first positional argument (`train.py RECIPE.yaml --key value`)."""
    argv = list(argv)
    if argv and argv[0].endswith(RECIPE_SUFFIXES) and "--config" not in argv:
        argv = ["--config", argv[0], *argv[1:]]
    return argv


def recipe_path(argv: Sequence[str]) -> str | None:
    """The recipe file named by `--config PATH` in an argv produced by `recipe_argv`, or None."""
    argv = list(argv)
    if "--config" not in argv:
        return None
    index = argv.index("--config")
    if index + 1 >= len(argv) or argv[index + 1].startswith("--"):
        raise RecipeError("--config needs a recipe file: `python scripts/train.py recipes/tiny_drgrpo.yaml ...`.")
    return argv[index + 1]


def _missing_file_hint(path: str) -> str:
    shipped = sorted(str(p.relative_to(RECIPES_DIR.parent)) for p in RECIPES_DIR.glob("*.yaml"))
    close = difflib.get_close_matches(path, shipped, n=1, cutoff=0.8)
    if close:
        return f"Did you mean {close[0]}?"
    return f"Shipped recipes: {', '.join(shipped)}." if shipped else "Pass the path of a recipe YAML file."


def read_recipe(path: str | Path) -> dict[str, Any]:
    """The recipe's `key: value` mapping; a `RecipeError` naming the file for a missing file, bad YAML or a
    non-mapping."""
    file = Path(path)
    if not file.is_file():
        where = "is a folder, not a file" if file.is_dir() else f"not found (from {Path.cwd()})"
        raise RecipeFileNotFoundError(f"Recipe file {str(path)!r} {where}. {_missing_file_hint(str(path))}")
    try:
        recipe = yaml.safe_load(file.read_text())
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise RecipeError(
            f"Recipe file {str(path)!r}{line}: not valid YAML ({problem}). Each line is `key: value`."
        ) from error
    if recipe is None:
        return {}
    if not isinstance(recipe, dict):
        raise RecipeError(f"Recipe file {str(path)!r} must be a YAML mapping of `key: value` lines.")
    return recipe


def command_line_values(argv: Sequence[str]) -> dict[str, list[str]]:
    """`{key: [values]}` of the `--key v1 [v2 ...]` / `--key=value` tokens of an argv (`[]` for a bare `--flag`)."""
    values: dict[str, list[str]] = {}
    key = None
    for token in argv:
        if token.startswith("--"):
            key, has_value, raw = token[2:].partition("=")
            key = key.replace("-", "_")
            values[key] = [raw] if has_value else []
            if has_value:
                key = None
        elif key is not None:
            values[key].append(token)
    return values
