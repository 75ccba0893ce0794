"""Which model a name means, checked before anything is loaded: a local folder or a hub id that can be had, else one
line naming the model and the fix instead of transformers' 90-line traceback (and, with the hub unreachable, its
50 s of retries first).

`resolve_model` is the check; `load_pretrained` loads a tokenizer (or config, or model) through it, from the local
Hugging Face cache first, so that a model that is cached never touches the network, and one that is not is tried
once. Used by the pre-flight prompt preview (`--show_prompts`). The same function name and signature as the model
resolver being built for training and evaluation (branch issue20), which adds the project's prepared short names.
This module imports only the standard library at import time; `huggingface_hub` is imported when a hub id is checked.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from drgrpo.core.errors import RecipeError

Loaded = TypeVar("Loaded")
# HF_HUB_OFFLINE as huggingface_hub reads it (constants.HF_HUB_OFFLINE is read once, when it is first imported).
_TRUE = ("1", "ON", "YES", "TRUE")
HUB_TIMEOUT_S = 10  # one probe of the hub; a refused connection or a failed DNS lookup ends it at once
# What save_pretrained writes for a model, and for a tokenizer alone (enough for --show_prompts).
SAVED_FILES = ("config.json", "tokenizer_config.json")


def hub_offline() -> bool:
    """Whether the Hugging Face hub is switched off (`HF_HUB_OFFLINE=1`)."""
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE


def _looks_like_path(name: str) -> bool:
    """Whether `name` is meant as a local folder rather than a hub id (`org/name`, or a bare `name`): a hub id has at
    most one `/` and no leading `.`, `/` or `~`; a name whose first part is an existing folder is local too."""
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        return True
    return "/" in name and Path(name.split("/")[0]).is_dir()


def _cached(repo_id: str, revision: str | None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str)


def _hub_problem(repo_id: str, revision: str | None) -> str | None:
    """Why the hub id cannot be had (not cached and the hub off or unreachable, or unknown), or None when it can."""
    if _cached(repo_id, revision):
        return None
    if hub_offline():
        return "is not in the Hugging Face cache and the hub is switched off (HF_HUB_OFFLINE=1)"
    from huggingface_hub import model_info
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        model_info(repo_id, revision=revision, timeout=HUB_TIMEOUT_S)
    except RepositoryNotFoundError:
        return "is not a model on the Hugging Face hub (or it is private: log in with `hf auth login`)"
    except Exception as error:  # no DNS, connection refused, timeout: the hub cannot be reached from here
        if "http" in type(error).__module__.lower() or isinstance(error, OSError):
            return f"is not in the Hugging Face cache and the hub cannot be reached ({type(error).__name__})"
        return None  # gated, rate-limited, ...: transformers' own message is the better one
    return None


def resolve_model(name_or_path: str, revision: str | None = None, key: str = "model_name_or_path") -> str:
    """The path or hub id `from_pretrained` should load for `name_or_path`, checked to be loadable:

    - a local folder -> itself (a `RecipeError` if it holds neither `config.json` nor `tokenizer_config.json`);
    - a path that does not exist -> a `RecipeError`;
    - a hub id -> itself, if it is in the Hugging Face cache or the hub answers for it (a `RecipeError` otherwise:
      offline and not cached, unreachable, or not on the hub).

    Errors name `key`, the model and the fix: one line under the scripts' `run_main`.
    """
    name = str(name_or_path)
    path = Path(name).expanduser()
    if path.is_dir():
        if not any((path / saved).is_file() for saved in SAVED_FILES):
            raise RecipeError(
                f"{key} {name!r} is a folder without config.json or tokenizer_config.json, not a saved model: point "
                "it at a folder written by save_pretrained (a training run's output_dir, or `make demo`'s "
                "outputs/demo/sft)."
            )
        return str(path)
    if path.exists() or _looks_like_path(name):
        raise RecipeError(
            f"{key} {name!r}: no such model folder (from {Path.cwd()}). Check the path, build or train the model "
            "first (`make demo` builds outputs/demo/sft), or use a hub id."
        )
    problem = _hub_problem(name, revision)
    if problem is not None:
        offline = ", set HF_HUB_OFFLINE=0 where the hub is reachable" if hub_offline() else ""
        raise RecipeError(
            f"{key} {name!r} {problem}: cache it where the hub is reachable (`hf download {name}`, then copy "
            f"~/.cache/huggingface here){offline}, or point {key} at a local folder."
        )
    return name


def load_pretrained(
    loader: Callable[..., Loaded],
    name_or_path: str,
    revision: str | None = None,
    key: str = "model_name_or_path",
    **kwargs: Any,
) -> Loaded:
    """`loader(resolved, ...)` (e.g. `AutoTokenizer.from_pretrained`) for a model `resolve_model` accepts: from the
    local files only first (a cached hub model needs no network), then, for a hub id that is not complete in the
    cache, once from the hub."""
    resolved = resolve_model(name_or_path, revision, key)
    try:
        return loader(resolved, revision=revision, local_files_only=True, **kwargs)
    except OSError:
        if Path(resolved).is_dir() or hub_offline():
            raise
    return loader(resolved, revision=revision, **kwargs)
