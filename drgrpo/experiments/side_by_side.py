"""A comparison's runs trained at the same time, one process each, the cores split between them.

On 2 cores, GRPO and Dr.GRPO trained side by side on one torch thread each is how docs/bias.md's SmolLM2 runs were
measured: each run keeps a core to itself, and both finish in about the time of one (15-19 min for 60 steps on the
development machine). Each run is `comparison.compare_one` (passed in with its settings and starting point: this
module comes before that one) in a spawned process (a fresh interpreter: torch's thread count is set before it
starts) with its thread count fixed through `DRGRPO_TORCH_THREADS`, its output in `<run folder>/side_by_side.log` so
the two progress bars do not overwrite each other. The parent waits for both: a run that fails or stops at its
deadline does not stop the other, whose result is kept (its `row.json`, or its checkpoints); the first error is
raised once both have ended.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from drgrpo.core.threads import THREADS_ENV, available_cores

logger = logging.getLogger(__name__)

LOG_NAME = "side_by_side.log"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def threads_per_run(cores: int, runs: int) -> int:
    """Torch threads for each of `runs` processes sharing `cores`: an equal share, at least 1 (2 cores, 2 runs: 1)."""
    if cores < 1 or runs < 1:
        raise ValueError(f"cores and runs must be >= 1, got {cores} and {runs}.")
    return max(1, cores // runs)


def _train_one(train: Callable, recipe: str, settings: Any, begin: Any, threads: int, log_file: str):
    """One run in its own process: its thread count fixed, its output to `log_file`; returns `train`'s result."""
    os.environ[THREADS_ENV] = str(threads)  # read when training chooses its threads, before the first step
    Path(log_file).parent.mkdir(parents=True, exist_ok=True)
    log = open(log_file, "a", buffering=1)
    os.dup2(log.fileno(), 1)  # the C level too (tqdm, torch warnings)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    logging.basicConfig(format=LOG_FORMAT, level=logging.WARNING, force=True)
    return train(recipe, settings, begin)


def train_side_by_side(
    settings: Any,
    begin: Any,
    train: Callable,
    finished: Callable[[str], bool] = lambda recipe: False,
) -> dict[str, tuple[dict, list]]:
    """Train every recipe of `settings` at once with `train(recipe, settings, begin)` (`comparison.compare_one`, a
    module-level function: it is pickled by name), one spawned process each with `threads_per_run` torch threads, and
    return `{recipe: train's result}`. Raises the first run's error (for example `OutOfTime`) after every run has
    ended. A run `finished` says is done is left out, and with one run left nothing is spawned: the caller reads or
    trains those itself, on every core."""
    recipes = [r for r in settings.recipes if not finished(r)]
    if len(recipes) < 2:
        return {}
    threads = threads_per_run(available_cores(), len(recipes))
    logs = {r: str(Path(settings.output_dir) / Path(r).stem / LOG_NAME) for r in recipes}
    logger.warning(
        "Training %s side by side, %d torch thread(s) each; progress in %s",
        ", ".join(Path(r).stem for r in recipes), threads, ", ".join(logs.values()),
    )  # fmt: skip
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no torch threads or locks inherited
    with ProcessPoolExecutor(max_workers=len(recipes), mp_context=context) as pool:
        futures = {r: pool.submit(_train_one, train, r, settings, begin, threads, logs[r]) for r in recipes}
        results, errors = {}, []
        for recipe, future in futures.items():
            try:
                results[recipe] = future.result()
            except Exception as error:  # the other run is waited for; the first error is raised (Ctrl-C is not held)
                logger.warning("%s ended with %s: %s (log: %s)", recipe, type(error).__name__, error, logs[recipe])
                errors.append(error)
    if errors:
        raise errors[0]
    return results
