"""Torch's intra-op thread count, chosen from the CPU that other processes leave free, and re-chosen as that changes.

On a small CPU machine the thread count decides the speed more than anything else. Torch defaults to one OpenMP
thread per core, and its threads wait for each other at every operator: when another process keeps one of two cores
busy, the thread on the shared core runs half the time and the other waits for it. Measured on 2 cores (SmolLM2-135M
forward + backward, 8 x 112 tokens): 2.8 s with 2 threads and 5.2 s with 1 on a quiet machine, but 11.9 s with 2 and
5.2 s with 1 beside a busy loop; the tiny demo's SFT ran at 62 it/s with 1 thread and 1.5 it/s with 2.

So `ThreadGovernor` measures how many cores *other* processes use (the machine's busy time minus this process's
own CPU time, both from psutil on any platform, over the interval since the last look) and gives torch the cores that
are left, at least one. Niced processes yield to ours and are not counted while this one runs at nice 0
(`contending_seconds`). Training asks it again before every step and evaluation before every batch, so a neighbour
that starts or stops mid-run is followed within a step. A count set by the user (`DRGRPO_TORCH_THREADS=N`, or
`OMP_NUM_THREADS`) is kept as it is.
"""

from __future__ import annotations

import logging
import math
import os
import time

import psutil

logger = logging.getLogger(__name__)

THREADS_ENV = "DRGRPO_TORCH_THREADS"
# Others using more than this many cores take one of ours away: a background of daemons and idle helpers stays below.
BUSY_MARGIN = 0.3
FIRST_WINDOW_SECONDS = 0.5
MIN_INTERVAL_SECONDS = 1.0


def threads_for(others_busy_cores: float, cores: int) -> int:
    """The thread count that leaves other processes their cores: `cores` minus the cores others keep busy (rounded up
    once they use more than `BUSY_MARGIN` of one), at least 1.

    2 cores: others at 0.1 -> 2 threads; others at 0.5, 1.0 or 1.9 -> 1 thread."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}.")
    taken = max(0, math.ceil(others_busy_cores - BUSY_MARGIN))
    return max(1, min(cores, cores - taken))


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), else `os.cpu_count()`."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def fixed_thread_count(environ=os.environ) -> int | None:
    """The user's own choice: `DRGRPO_TORCH_THREADS=N`, else `OMP_NUM_THREADS=N`; None means choose (`auto`)."""
    return _fixed_by(environ)[0]


def _fixed_by(environ=os.environ) -> tuple[int | None, str | None]:
    """(`fixed_thread_count`, the variable that set it)."""
    for key in (THREADS_ENV, "OMP_NUM_THREADS"):
        value = environ.get(key, "").strip()
        if value and value != "auto":
            try:
                count = int(value)
            except ValueError:
                raise ValueError(f"{key}={value!r}: set a number of threads (e.g. 1) or 'auto'.") from None
            if count < 1:
                raise ValueError(f"{key}={value!r}: the number of threads must be >= 1.")
            return count, key
        if key == THREADS_ENV and value == "auto":
            return None, None
    return None, None


def contending_seconds(machine, niced: bool) -> float:
    """The machine's CPU seconds that can take a core from this process, from psutil's `cpu_times()`: all busy time,
    less the time of niced processes (psutil's `nice`) when this process is not niced itself (`niced` False).

    Not busy: idle and iowait; Linux's guest times are already counted in user and nice. A niced neighbour yields to
    a process at nice 0 (the kernel's weights: 15 at nice 19 against 1024), so it takes no core from two threads:
    measured on an AMD EPYC Zen 3, the engine's 32 x 64 tokens took 14.7-20.3 s with 2 threads beside a nice-19 busy
    loop (17.5-19.8 s quiet) and 27.3-28.8 s with 1 (issue 53: counting it made the choice drop to 1 thread). When
    this process is niced too, its own time is in `nice` and a niced neighbour competes: all of it counts."""
    idle = sum(getattr(machine, name, 0.0) for name in ("idle", "iowait", "guest", "guest_nice"))
    yielding = 0.0 if niced else getattr(machine, "nice", 0.0)
    return sum(machine) - idle - yielding


def _cpu_sample() -> tuple[float, float, float]:
    """(wall time, busy CPU seconds of the whole machine that contend with this process, its own CPU seconds)."""
    machine, own = psutil.cpu_times(), psutil.Process().cpu_times()
    niced = os.getpriority(os.PRIO_PROCESS, 0) > 0 if hasattr(os, "getpriority") else True
    return time.monotonic(), contending_seconds(machine, niced), own.user + own.system


def others_busy_cores(before: tuple[float, float, float], after: tuple[float, float, float]) -> float:
    """Cores kept busy by other processes between two `_cpu_sample`s: machine busy time minus ours, per second."""
    wall = after[0] - before[0]
    if wall <= 0:
        return 0.0
    return max(0.0, ((after[1] - before[1]) - (after[2] - before[2])) / wall)


class ThreadGovernor:
    """Sets torch's thread count from the measured load; `update()` is cheap and may be called often."""

    def __init__(self, cores: int | None = None, environ=os.environ) -> None:
        self.cores = cores or available_cores()
        self.fixed, self.fixed_by = _fixed_by(environ)
        self.threads: int | None = None
        self.others: float | None = None  # cores other processes kept busy at the last look
        self.used: dict[int, int] = {}  # thread count -> how many updates chose it (a run's summary reports it)
        self._last = None

    def describe(self) -> str:
        """Why the thread count is what it is, for a run's start-up line: the variable that fixed it, or the cores
        other processes kept busy at the last look."""
        if self.fixed is not None:
            return f"{self.fixed_by}={self.fixed}"
        others = "" if self.others is None else f", other processes use {self.others:.1f}"
        return f"of {self.cores} cores{others}; chosen again before every step"

    def update(self) -> int:
        """Re-measure (at most once per `MIN_INTERVAL_SECONDS`) and apply; return the thread count in use."""
        threads = self._update()
        self.used[threads] = self.used.get(threads, 0) + 1
        return threads

    def _update(self) -> int:
        import torch

        if self.fixed is not None:
            if self.threads != self.fixed:
                torch.set_num_threads(self.fixed)
                self.threads = self.fixed
            return self.fixed
        now = _cpu_sample()
        if self._last is None:  # first look: a short window of its own
            time.sleep(FIRST_WINDOW_SECONDS)
            self._last, now = now, _cpu_sample()
        elif now[0] - self._last[0] < MIN_INTERVAL_SECONDS:
            return self.threads or torch.get_num_threads()
        others = self.others = others_busy_cores(self._last, now)
        self._last = now
        threads = threads_for(others, self.cores)
        if threads != self.threads:
            if self.threads is not None:
                logger.info("torch threads %d -> %d (other processes use %.1f cores)", self.threads, threads, others)
            torch.set_num_threads(threads)
            self.threads = threads
        return threads


_GOVERNOR: ThreadGovernor | None = None


def thread_line() -> str:
    """The start-up line of a CPU run, e.g. `torch threads: 1 (of 2 cores, other processes use 1.0; chosen again before
    every step)` or `torch threads: 1 (OMP_NUM_THREADS=1)`; the governor chooses first (`adapt_torch_threads`)."""
    threads = adapt_torch_threads()
    return f"torch threads: {threads} ({_GOVERNOR.describe()})"


def threads_used() -> dict[int, int]:
    """How often each thread count was chosen in this process so far ({} before the first `adapt_torch_threads`)."""
    return dict(_GOVERNOR.used) if _GOVERNOR is not None else {}


def adapt_torch_threads() -> int:
    """The process-wide `ThreadGovernor.update()`: call it before each unit of torch work (a step, a batch)."""
    global _GOVERNOR
    if _GOVERNOR is None:
        _GOVERNOR = ThreadGovernor()
    return _GOVERNOR.update()
