"""The start-up gold-answer check, done once: on the main process only, with a progress bar, its result broadcast
to the other processes and cached on disk, so that a restart (or the next run on the same data) skips it.

Grading ~9k MATH answers takes minutes; every rank used to repeat it. The cache key is a fingerprint of exactly what
decides the result: the distinct gold answers, and the grader's version (`GoldCheck.version`: the probe answer, the
grader settings that change a verdict, the `rewards` sources and the math-verify/sympy versions). The cached value
is the list of unusable answers, so a cache hit gives the same result as grading.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

logger = logging.getLogger(__name__)

CACHE_FORMAT = 1  # bump when the cache file's layout or meaning changes
CHUNK = 256  # distinct answers graded per progress-bar update
Usable = Callable[[list[str]], list[bool]]  # a gold check: which of these gold answers are usable
_VERSIONED_PACKAGES = ("math-verify", "latex2sympy2_extended", "sympy")


class GoldCheck(Protocol):
    """Decides, for a batch of gold answers, which are usable; `version` names the grading (None: never cached)."""

    version: str | None

    def __call__(self, golds: list[str]) -> list[bool]: ...


def grader_version(probe: str, settings: dict[str, Any]) -> str:
    """A fingerprint of everything that can change a gold answer's verdict except the answer itself."""
    import rewards

    digest = hashlib.sha256()
    for path in sorted(Path(rewards.__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    versions = {}
    for package in _VERSIONED_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    described = {"format": CACHE_FORMAT, "probe": probe, "settings": settings, "packages": versions}
    return json.dumps(described, sort_keys=True) + " rewards-sha256=" + digest.hexdigest()[:16]


def fingerprint(distinct_golds: Sequence[str], version: str) -> str:
    """The cache key: sha256 of the grader version and the distinct gold answers (in order)."""
    payload = json.dumps([version, list(distinct_golds)], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def default_cache_dir() -> Path:
    """`<HF datasets cache>/drgrpo_gold_check` (HF_DATASETS_CACHE / HF_HOME move it, as they move datasets' own)."""
    from datasets import config

    return Path(config.HF_DATASETS_CACHE) / "drgrpo_gold_check"


def grade_distinct(distinct_golds: Sequence[str], usable: Usable, progress: bool) -> list[str]:
    """The unusable answers among `distinct_golds`, graded in chunks under a tqdm progress bar."""
    from tqdm.auto import tqdm

    unusable: list[str] = []
    with tqdm(total=len(distinct_golds), desc="Checking gold answers", unit="answer", disable=not progress) as bar:
        for start in range(0, len(distinct_golds), CHUNK):
            chunk = list(distinct_golds[start : start + CHUNK])
            unusable += [gold for gold, ok in zip(chunk, usable(chunk), strict=True) if not ok]
            bar.update(len(chunk))
    return unusable


def _read_cache(path: Path, version: str, count: int) -> list[str] | None:
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("version") != version or cached.get("distinct_golds") != count:
        return None  # another grader's file under a colliding name, or a damaged one: grade again
    unusable = cached.get("unusable")
    return unusable if isinstance(unusable, list) else None


def _write_cache(path: Path, version: str, count: int, unusable: list[str]) -> None:
    """Write atomically (temporary file + rename), so a run killed mid-write leaves no half file; a read-only cache
    directory only costs the next run a re-check."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
            json.dump({"version": version, "distinct_golds": count, "unusable": unusable}, f, ensure_ascii=False)
        os.replace(f.name, path)
    except OSError as error:
        logger.warning("Could not cache the gold-answer check in %s (%s); the next run checks again.", path, error)


def unusable_golds(
    distinct_golds: Sequence[str],
    usable: Usable,
    cache_dir: str | Path | None = None,
    progress: bool = True,
) -> list[str]:
    """The unusable answers among `distinct_golds`, from the cache when this exact check was done before.

    Cached only when `usable` has a `version` (see `GoldCheck`); `cache_dir` None means `default_cache_dir()`.
    """
    version = getattr(usable, "version", None)
    if version is None:
        return grade_distinct(distinct_golds, usable, progress)
    path = Path(cache_dir or default_cache_dir()) / f"{fingerprint(distinct_golds, version)}.json"
    cached = _read_cache(path, version, len(distinct_golds))
    if cached is not None:
        logger.info("Gold-answer check: cached result for these %d answers (%s).", len(distinct_golds), path)
        return cached
    unusable = grade_distinct(distinct_golds, usable, progress)
    _write_cache(path, version, len(distinct_golds), unusable)
    return unusable


def unparseable_indices_once(
    answers: Sequence[str],
    usable: Usable,
    cache_dir: str | Path | None = None,
) -> list[int]:
    """Indices of the answers `usable` rejects, decided on the main process only and broadcast to the others.

    Every process holds the same answers (same data, same seed), so only the verdicts travel. Works in a plain
    single process too: accelerate's `PartialState` is then a one-process state and the broadcast a no-op.
    """
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    state = PartialState()
    distinct = list(dict.fromkeys(answers))
    payload = [unusable_golds(distinct, usable, cache_dir, progress=True) if state.is_main_process else None]
    if state.num_processes > 1:
        broadcast_object_list(payload, from_process=0)
    unusable = set(payload[0])
    return [i for i, answer in enumerate(answers) if answer in unusable]
