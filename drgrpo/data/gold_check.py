"""Gold answers the accuracy reward cannot parse: found with the reward's own grader, counted and reported, once.

The check runs on the main process only, with a progress bar; the result is broadcast to the other processes and
cached on disk, so that a restart (or the next run on the same data) skips it. Grading ~9k MATH answers takes
minutes, and every rank used to repeat it. The cache key is a fingerprint of exactly what decides the result: the
distinct gold answers and the grader's version (`grader_version`: the probe answer, the grader settings that change a
verdict, the `rewards` sources and the math-verify/sympy versions). The cached value is the list of unusable answers,
so a cache hit gives the same result as grading.
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

from drgrpo.data.sources import Example

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


def grade_distinct(distinct_golds: Sequence[str], usable: Usable, progress: bool, rows: int | None = None) -> list[str]:
    """The unusable answers among `distinct_golds` (of `rows` rows), graded in chunks under a tqdm progress bar that
    counts distinct answers, and says so: each is graded once, however many rows share it."""
    from tqdm.auto import tqdm

    unusable: list[str] = []
    of_rows = f" of {rows:,} rows" if rows is not None else ""
    desc = f"Checking gold answers ({len(distinct_golds):,} distinct{of_rows})"
    with tqdm(total=len(distinct_golds), desc=desc, unit="answer", disable=not progress) as bar:
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
    rows: int | None = None,
) -> list[str]:
    """The unusable answers among `distinct_golds`, from the cache when this exact check was done before.

    Cached only when `usable` has a `version` (see `GoldCheck`); `cache_dir` None means `default_cache_dir()`.
    """
    version = getattr(usable, "version", None)
    if version is None:
        return grade_distinct(distinct_golds, usable, progress, rows)
    path = Path(cache_dir or default_cache_dir()) / f"{fingerprint(distinct_golds, version)}.json"
    cached = _read_cache(path, version, len(distinct_golds))
    if cached is not None:
        logger.info("Gold-answer check: cached result for these %d answers (%s).", len(distinct_golds), path)
        return cached
    unusable = grade_distinct(distinct_golds, usable, progress, rows)
    _write_cache(path, version, len(distinct_golds), unusable)
    return unusable


def unparseable_indices_once(
    answers: Sequence[str],
    usable: Usable,
    cache_dir: str | Path | None = None,
) -> list[int]:
    """Indices of the answers `usable` rejects, decided on the main process only and broadcast to the others.

    Every process holds the same answers (same data, same seed), so only the verdicts travel. The processes are
    accelerate's `PartialState`, which the trainer config has already set up in a training run. In a plain single
    process (tests, `--show_prompts` on a login node) none is created, so torch.distributed is never needed and a
    later config still chooses its own device.
    """
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    state = None
    if PartialState._shared_state != {}:
        state = PartialState()
    elif int(os.environ.get("WORLD_SIZE", "1")) > 1:  # launched, but no config has set up the processes yet
        import torch

        state = PartialState(cpu=not torch.cuda.is_available())  # gloo on CPU-only machines, as use_cpu would
    distinct = list(dict.fromkeys(answers))
    main = state is None or state.is_main_process
    payload = [unusable_golds(distinct, usable, cache_dir, progress=True, rows=len(answers)) if main else None]
    if state is not None and state.num_processes > 1:
        broadcast_object_list(payload, from_process=0)
    unusable = set(payload[0])
    return [i for i, answer in enumerate(answers) if answer in unusable]


# Grading any extractable answer against a gold makes the reward parse that gold. `?` is extracted but is no number,
# so the grader skips its numeric fast path and parses the gold, and comparing with it costs no sympy simplification.
GOLD_PROBE = "\\boxed{?}"


def reward_gold_check(args: Any = None) -> GoldCheck:
    """Whether each gold answer is usable by the accuracy reward, decided by the reward's own grader.

    A probe answer is graded against every gold with `rewards.grading` (the accuracy reward's code path: the same
    gold normalisation, math-verify parsing, time limit and verifier processes), so "unparseable" here means exactly
    "the accuracy reward scores None for it". A gold whose parsing times out or crashes counts as unusable too.
    The grader settings are the recipe's `reward_timeout`, `reward_num_workers` and `reward_worker_memory_mb` when
    `args` is the train script's `ScriptArguments` (which mixes in `rewards.RewardArguments`), else the defaults.
    """
    from rewards.grading import FAILURES, GOLD_UNPARSABLE, get_grader, grade_batch

    grader = get_grader(
        timeout=getattr(args, "reward_timeout", 5.0),
        num_workers=getattr(args, "reward_num_workers", None),
        memory_mb=getattr(args, "reward_worker_memory_mb", 2048),
    )

    def usable(golds: list[str]) -> list[bool]:
        results = grade_batch([GOLD_PROBE] * len(golds), golds, grader)
        return [r.status != GOLD_UNPARSABLE and r.status not in FAILURES for r in results]

    # num_workers changes only the speed, not a verdict, so it is not part of the version.
    usable.version = grader_version(GOLD_PROBE, {"timeout": grader.timeout, "memory_mb": grader.memory_mb})
    return usable


def unparseable_indices(answers: Sequence[str], usable: Callable[[list[str]], list[bool]]) -> list[int]:
    """Indices of the answers that `usable` rejects; each distinct answer is checked once, in one batch."""
    distinct = list(dict.fromkeys(answers))
    verdicts = dict(zip(distinct, usable(distinct), strict=True))
    return [i for i, answer in enumerate(answers) if not verdicts[answer]]


def report_unparseable(examples: Sequence[Example], bad: Sequence[int], which: str) -> str:
    """The start-up message for the rows whose gold answer cannot be parsed: how many, and three examples."""
    shown = "; ".join(f"{examples[i].source} row {examples[i].row}: answer {examples[i].answer!r:.80}" for i in bad[:3])
    return (
        f"{len(bad)} of {len(examples)} {which} rows have a gold answer the accuracy reward cannot parse (they can "
        f"never be rewarded), e.g. {shown}. Check answer_column/answer_extraction, or set "
        "drop_unparseable_answers: true."
    )
