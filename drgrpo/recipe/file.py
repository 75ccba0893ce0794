"""The cheap checks of a recipe command line, run before torch/TRL are imported (which takes 10 s or more).

A missing recipe file, a YAML syntax error, a key written twice (YAML would keep the last one silently) or a recipe
that is not a `key: value` mapping is reported at once, as a `RecipeError` naming the file, the line and the fix.
Imports only the standard library and PyYAML.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from drgrpo.core.errors import RecipeError, RecipeFileNotFoundError, UsageError

RECIPE_SUFFIXES = (".yaml", ".yml")
# A recipe's leading comment block states its target: "World size: 8 GPUs, DeepSpeed ZeRO-3", and for a paper
# reproduction "Paper reproduction: Oat-Zero-1.5B".
WORLD_SIZE_PATTERN = re.compile(r"world size:\s*(\d+)", re.IGNORECASE)
# Case-sensitive on purpose: "ZeRO-3" is DeepSpeed's stage, "Oat-Zero-1.5B" a model name.
ZERO_STAGE_PATTERN = re.compile(r"\bZeRO-?([0-3])\b")
REPRODUCTION_PATTERN = re.compile(r"paper reproduction:\s*([A-Za-z0-9][\w.\-]*[\w])", re.IGNORECASE)
RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping key written twice in one YAML mapping."""


class RecipeLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a mapping key written twice (PyYAML keeps the last one without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if key in first_lines:
                raise DuplicateKeyError(
                    None,
                    None,
                    f"key {key!r} is set twice (first on line {first_lines[key]}); YAML would silently keep the last "
                    "value: delete one of the two lines",
                    key_node.start_mark,
                )
            first_lines[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """`yaml.safe_load` with `RecipeLoader`: a key written twice is a `yaml.YAMLError` naming it and its lines."""
    return yaml.load(text, Loader=RecipeLoader)  # RecipeLoader is a SafeLoader


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
        recipe = load_yaml(file.read_text())
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        if isinstance(error, DuplicateKeyError):
            raise UsageError(f"Recipe file {str(path)!r}{line}: {problem}.") from error
        raise UsageError(
            f"Recipe file {str(path)!r}{line}: not valid YAML ({problem}). Each line is `key: value`."
        ) from error
    if recipe is None:
        return {}
    if not isinstance(recipe, dict):
        raise RecipeError(f"Recipe file {str(path)!r} must be a YAML mapping of `key: value` lines.")
    return recipe


def command_line_values(argv: Sequence[str]) -> dict[str, list[str]]:
    """`{key: [raw strings]}` of an argv's `--key v1 [v2 ...]` / `--key=value` tokens (`[]` for a bare `--flag`): a
    look before torch loads (`drgrpo.setup.gpu_launch`); recipes are read by `drgrpo.recipe.cli.recipe_values`."""
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


def read_header(path: str | Path) -> dict[str, Any]:
    """World size, ZeRO stage, CPU-ness and the reproduced run ("Paper reproduction: NAME") stated in the recipe's
    leading comment block."""
    lines = []
    for line in Path(path).read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    header = "\n".join(lines)
    world = WORLD_SIZE_PATTERN.search(header)
    stage = ZERO_STAGE_PATTERN.search(header)
    world_line = header[world.start() : header.find("\n", world.start())] if world else ""
    return {
        "world_size": int(world.group(1)) if world else None,
        "zero_stage": int(stage.group(1)) if stage else None,
        "cpu": "cpu" in world_line.lower(),
        "reproduces": _reproduced_run(header),
    }


def _reproduced_run(header: str) -> str | None:
    """The run a recipe's header says it reproduces ("Paper reproduction: NAME"), or None."""
    match = REPRODUCTION_PATTERN.search(header)
    return match.group(1) if match else None
