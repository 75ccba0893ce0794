"""User errors: one or two lines (the cause, the file/key/value, the fix) instead of a traceback.

Every script's entry point runs through `run_main`. An exception that is a *user error* prints as

    error: <message>
    (the full traceback: rerun with --traceback, or set DRGRPO_DEBUG=1)

and exits with status 2; anything else is a bug and keeps its traceback. A *usage error* (`UsageError`: a wrong
key or value on the command line or in a recipe, which the message alone lets the user fix) prints the first line
only. A user error is

- a `RecipeError` (or one of its subclasses below), raised for a mistake in a recipe, a command line or an input file;
- a `ValueError` or `FileNotFoundError` raised by the project's own code (`drgrpo/`, `rewards/`, `scripts/`): the
  project's convention is that these carry a message written for the user, naming the key and the fix.

This module imports only the standard library, so that scripts can install the handler before their heavy imports.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT_DIRS = tuple(str(ROOT / name) + os.sep for name in ("drgrpo", "rewards", "scripts"))
TRACEBACK_FLAG = "--traceback"
DEBUG_ENV = "DRGRPO_DEBUG"
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C


class RecipeError(ValueError):
    """A mistake in a recipe, a command line or an input file; the message names the key/file/value and the fix."""


class UsageError(RecipeError):
    """A wrong key or value on the command line or in a recipe (an unknown or duplicate key, a value of the wrong
    type, an unwritable output_dir): the message is the whole story, so no traceback hint follows it."""

    traceback_hint = False


class RecipeFileNotFoundError(RecipeError, FileNotFoundError):
    """A file the recipe or command line names does not exist."""


class RecipeImportError(RecipeError, ImportError):
    """A module or file the recipe names (a custom reward) cannot be imported."""


def _raised_in_project(error: BaseException) -> bool:
    """Whether the innermost frame of the error's traceback is in the project's own code."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and os.path.abspath(frames[-1].filename).startswith(PROJECT_DIRS)


def is_user_error(error: BaseException) -> bool:
    """Whether `error` is a user error (see the module docstring) rather than a bug."""
    if isinstance(error, RecipeError):
        return True
    return isinstance(error, (ValueError, FileNotFoundError)) and _raised_in_project(error)


def format_user_error(error: BaseException) -> str:
    """The lines printed for a user error: the message, then (except for a `UsageError`) the traceback hint."""
    message = str(error).strip() or type(error).__name__
    if not getattr(error, "traceback_hint", True):
        return f"error: {message}"
    return f"error: {message}\n(the full traceback: rerun with {TRACEBACK_FLAG}, or set {DEBUG_ENV}=1)"


def debug_requested(argv: list[str], environ: Mapping[str, str] = os.environ) -> bool:
    """`--traceback` on the command line or DRGRPO_DEBUG set to anything but "" / "0"."""
    return TRACEBACK_FLAG in argv or environ.get(DEBUG_ENV, "") not in ("", "0")


def command_flag(flag: str) -> str:
    """A command-line fix as the user has to type it: `--overwrite true`, or `ARGS="--overwrite true"` when the
    script runs under `make` (GNU make sets MAKELEVEL for the commands of its recipes)."""
    return f'ARGS="{flag}"' if os.environ.get("MAKELEVEL") else flag


def parse_with_overrides(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """`parser.parse_args(argv)` for a script whose recipe overrides come after `--` (an `argparse.REMAINDER`
    positional: scripts/demo.py, demo_tiny.py, bias.py). An option the script does not know, given before `--`, is a
    `RecipeError` with the command line that works (`make demo ARGS="-- --max_steps 2"`), not argparse's bare
    "unrecognized arguments"."""
    argv = list(sys.argv[1:] if argv is None else argv)
    head = argv[: argv.index("--")] if "--" in argv else argv
    known = parser._option_string_actions
    unknown = [i for i, token in enumerate(head) if token.startswith("-") and token.split("=")[0] not in known]
    if unknown:
        first = unknown[0]
        fixed = " ".join([*head[:first], "--", *head[first:], *argv[len(head) + 1 :]])
        command = command_flag(fixed) if os.environ.get("MAKELEVEL") else f"python scripts/{parser.prog} {fixed}"
        options = ", ".join(option for option in known if option.startswith("--"))
        raise RecipeError(
            f"{head[first].split('=')[0]} is not an option of {parser.prog} ({options}): recipe keys go after `--`: "
            f"{command}"
        )
    return parser.parse_args(argv)


def _close_progress_bars() -> None:
    """End the tqdm bars an error interrupted (the training bar), so the error starts a line of its own instead of
    trailing the bar's last `\r` update."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        bar.close()


def run_main(main: Callable[[], object]) -> None:
    """Run a script's `main()` and exit with its status when it returns an int (`sys.exit(main())`); any other
    return value (None, `evaluate.py`'s summary) means success and returns. A user error prints two lines, status 2.
    Ctrl-C prints one line, status 130: `interrupted: ` and the KeyboardInterrupt's message when the script gave one
    (what is saved, how to resume), instead of a traceback of wherever Python happened to be.

    `--traceback` is removed from `sys.argv` before `main` parses it.
    """
    debug = debug_requested(sys.argv)
    sys.argv = [arg for arg in sys.argv if arg != TRACEBACK_FLAG]
    try:
        status = main()
    except KeyboardInterrupt as interrupt:
        if debug:
            raise
        _close_progress_bars()
        print(f"interrupted: {interrupt}" if str(interrupt) else "interrupted (Ctrl-C).", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as error:
        if debug or not is_user_error(error):
            raise
        _close_progress_bars()
        print(format_user_error(error), file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    if isinstance(status, int) and not isinstance(status, bool):
        sys.exit(status)
