"""Loading a user's own Python: a module by file path or import name, and a function in it, with one-line errors.

Used by the reward registry (`path/to/my_reward.py:function` reward specs) and by the code reward
(`code_checker: package.module:function`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path

from drgrpo.core.errors import RecipeError, RecipeFileNotFoundError, RecipeImportError


class RewardSpecAttributeError(RecipeError, AttributeError):
    """A custom reward spec names a function its module does not define."""


class RewardSpecTypeError(RecipeError, TypeError):
    """A custom reward spec names something that is not a function with TRL's reward signature."""


def load_file_module(path: str, spec: str):
    """Import a Python file by path (without installing it); registered in `sys.modules` under a stable name."""
    file = Path(path).expanduser()
    resolved = file.resolve()
    if not resolved.is_file():
        raise RecipeFileNotFoundError(
            f"Reward file {path!r} (from reward spec {spec!r}) not found: looked for {resolved}. Relative paths are "
            f"resolved from the current directory, {Path.cwd()}."
        )
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
    module_name = f"drgrpo_reward_{resolved.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    module_spec = importlib.util.spec_from_file_location(module_name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise RecipeImportError(f"Reward file {path!r} (from reward spec {spec!r}) is not a loadable Python file.")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise RecipeImportError(
            f"Importing reward file {path!r} (from reward spec {spec!r}) failed: {type(exc).__name__}: {exc} "
            "(rerun with --traceback to see where)."
        ) from exc
    return module


def module_attribute(module, attribute: str, where: str, spec: str) -> Callable:
    target = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            available = sorted(
                n for n, v in vars(module).items() if callable(v) and not n.startswith("_") and not inspect.isclass(v)
            )
            raise RewardSpecAttributeError(
                f"{where} has no attribute {attribute!r} (reward spec {spec!r}). Functions it defines: "
                f"{', '.join(available) or 'none'}."
            )
        target = getattr(target, part)
    if not callable(target):
        raise RewardSpecTypeError(
            f"{where}: {attribute!r} (reward spec {spec!r}) is a {type(target).__name__}, not a function."
        )
    return target


def import_hint(location: str, spec: str, error: Exception) -> str:
    """Why module `location` of a reward spec cannot be imported, and the two ways to name it that work."""
    missing = isinstance(error, ModuleNotFoundError) and error.name is not None and location.startswith(error.name)
    if not missing:  # the module exists but failed while importing: its own error is the cause
        return (
            f"Cannot import module {location!r} (reward spec {spec!r}): {type(error).__name__}: {error} (rerun with "
            "--traceback to see where)."
        )
    file = location.replace(".", "/") + ".py"
    pythonpath = os.environ.get("PYTHONPATH") or "unset"
    return (
        f"Cannot import module {location!r} (reward spec {spec!r}): {error}. Python looks in PYTHONPATH ({pythonpath}) "
        f"and installed packages, not the current folder: set PYTHONPATH to the folder that holds "
        f"{location.split('.')[0]}, or name the file directly: '{file}:{spec.rpartition(':')[2]}'."
    )
