"""`VerifierPool`: worker processes that verify answers, each job under a hard deadline.

Why not `multiprocessing.Pool` or `ProcessPoolExecutor`: neither can kill the one worker that hangs on a job (a
sympy expansion, a C-level big-integer power) and go on; the executor breaks as a whole. Here each worker has its
own pipe, at most `DEPTH` jobs in flight, and a job that overruns its deadline gets its worker killed and replaced
while the other workers carry on. Workers are plain `python -c` subprocesses (not forked from the trainer, which
holds CUDA state and threads, and not re-importing the training script as `spawn` would).

The pool is created once, reused across steps, and closed at interpreter exit (or by `close()` / `with`).
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from multiprocessing.connection import wait as wait_readable
from pathlib import Path
from typing import Any

from rewards._worker import ENV_MEMORY_MB, ENV_PARENT_DEATH_SIGNAL, ENV_WARM_UP

logger = logging.getLogger(__name__)

_HEADER = struct.Struct(">I")
# Jobs queued per worker: the second one is sent while the first runs, hiding the pipe round trip.
DEPTH = 2
# Grace beyond the in-worker alarm before the worker is killed (the alarm cannot interrupt a long C call).
KILL_GRACE_S = 0.5
# Consecutive workers that die before becoming ready, after which the pool gives up.
MAX_START_FAILURES = 3
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])


class PoolUnavailable(RuntimeError):
    """The verifier processes could not be started; the caller falls back to in-process verification."""


def default_num_workers() -> int:
    """CPU cores available to this process divided by the ranks on this node (LOCAL_WORLD_SIZE), 1 to 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(1, min(8, cores // max(1, ranks)))


class _Worker:
    def __init__(self, memory_mb: int | None, warm_up: bool) -> None:
        env = dict(os.environ)
        env[ENV_WARM_UP] = "1" if warm_up else "0"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        env[ENV_MEMORY_MB] = str(memory_mb) if memory_mb else ""
        # PR_SET_PDEATHSIG fires when the *thread* that started the worker exits: only safe from the main thread.
        env[ENV_PARENT_DEATH_SIGNAL] = "1" if threading.current_thread() is threading.main_thread() else "0"
        env.setdefault("OMP_NUM_THREADS", "1")
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from rewards._worker import main; main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=env,
            close_fds=True,
        )
        self.fd = self.process.stdout.fileno()
        self.buffer = bytearray()
        self.ready = False
        self.started_at = time.monotonic()
        # In-flight jobs: [job_index, started_at or None until the job ahead of it finishes].
        self.inflight: deque[list] = deque()

    def send(self, message: tuple) -> None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self.process.stdin.write(_HEADER.pack(len(payload)) + payload)
        self.process.stdin.flush()

    def read_messages(self) -> list[tuple] | None:
        """Complete messages now readable, or None at end of file (the worker died)."""
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            return None
        self.buffer += chunk
        messages = []
        while len(self.buffer) >= _HEADER.size:
            size = _HEADER.unpack_from(self.buffer)[0]
            if len(self.buffer) < _HEADER.size + size:
                break
            messages.append(pickle.loads(bytes(self.buffer[_HEADER.size : _HEADER.size + size])))
            del self.buffer[: _HEADER.size + size]
        return messages

    def kill(self) -> None:
        try:
            self.process.kill()
        except OSError:
            pass
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _close_pool(workers: list[_Worker]) -> None:
    for worker in workers:
        worker.kill()
    workers.clear()


class VerifierPool:
    """`num_workers` verifier processes; `map(name, jobs, timeout)` runs `rewards._worker` functions on them.

    Each job returns `(status, value)`: `ok` with the function's value, `timeout` (the job ran past `timeout`
    seconds; its worker was replaced if it did not stop by itself), `error` (it raised; value is the message) or
    `crash` (its worker died, e.g. killed by the memory limit).
    """

    def __init__(
        self, num_workers: int, memory_mb: int | None = 2048, start_timeout: float = 120.0, warm_up: bool = True
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"VerifierPool needs num_workers >= 1, got {num_workers}.")
        self.num_workers = num_workers
        self.memory_mb = memory_mb
        self.warm_up = warm_up
        self.start_timeout = start_timeout
        self.workers: list[_Worker] = []
        self.restarts = 0
        self._lock = threading.Lock()
        self._closed = False
        self._start_failures = 0
        # Close at exit without keeping the pool alive just for that.
        self._finalizer = weakref.finalize(self, _close_pool, self.workers)
        atexit.register(self._finalizer)

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Kill every worker. Idempotent; the pool cannot be used afterwards."""
        self._closed = True
        self._finalizer()

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self.workers]

    def _spawn_missing(self) -> None:
        while len(self.workers) < self.num_workers:
            self.workers.append(_Worker(self.memory_mb, self.warm_up))

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self.workers.remove(worker)
        self.restarts += 1
        self._spawn_missing()

    def map(self, name: str, jobs: list[tuple], timeout: float) -> list[tuple[str, Any]]:
        """Run `name(*job)` for every job, at most `timeout` seconds each; results in job order."""
        if self._closed:
            raise RuntimeError("VerifierPool is closed.")
        if not jobs:
            return []
        with self._lock:
            try:
                return self._map(name, jobs, timeout)
            except BaseException:
                # Interrupted (Ctrl-C, PoolUnavailable): workers with jobs in flight would answer a stale job later.
                for worker in list(self.workers):
                    if worker.inflight:
                        self._replace(worker)
                raise

    def _map(self, name: str, jobs: list[tuple], timeout: float) -> list[tuple[str, Any]]:
        self._spawn_missing()
        hard_limit = timeout + KILL_GRACE_S
        results: list[tuple[str, Any] | None] = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        remaining = len(jobs)
        waiting_since = time.monotonic()
        while remaining:
            now = time.monotonic()
            for worker in self.workers:
                while worker.ready and pending and len(worker.inflight) < DEPTH:
                    index = pending.popleft()
                    try:
                        worker.send((index, name, jobs[index], timeout))
                    except OSError:  # it died; its end of file is read below and it is replaced
                        pending.appendleft(index)
                        break
                    worker.inflight.append([index, now if not worker.inflight else None])
            if not any(w.ready for w in self.workers) and now - waiting_since > self.start_timeout:
                raise PoolUnavailable(f"no verifier process became ready within {self.start_timeout:g} s")
            deadlines = [w.inflight[0][1] + hard_limit for w in self.workers if w.inflight]
            wait_s = max(0.0, min(deadlines) - now) if deadlines else 0.5
            readable = wait_readable([w.process.stdout for w in self.workers], timeout=wait_s)
            now = time.monotonic()
            for worker in list(self.workers):
                if worker.process.stdout not in readable:
                    continue
                messages = worker.read_messages()
                if messages is None:  # died: the job at its head killed it (or it never started)
                    if not worker.ready:
                        self._start_failures += 1
                        if self._start_failures >= MAX_START_FAILURES:
                            raise PoolUnavailable(
                                f"{self._start_failures} verifier processes exited before becoming ready "
                                f"(exit code {worker.process.poll()}); see their stderr above"
                            )
                    if worker.inflight:
                        results[worker.inflight.popleft()[0]] = ("crash", f"exit code {worker.process.poll()}")
                        remaining -= 1
                    pending.extendleft(job[0] for job in reversed(worker.inflight))
                    self._replace(worker)
                    continue
                for message in messages:
                    if message[0] == "ready":
                        worker.ready = True
                        self._start_failures = 0
                        continue
                    index, status, value = message
                    head = worker.inflight.popleft()
                    assert head[0] == index, "verifier worker answered out of order"
                    results[index] = (status, value)
                    remaining -= 1
                    if worker.inflight:
                        worker.inflight[0][1] = now
            for worker in list(self.workers):
                if worker.inflight and now - worker.inflight[0][1] > hard_limit:
                    results[worker.inflight.popleft()[0]] = ("timeout", None)
                    remaining -= 1
                    pending.extendleft(job[0] for job in reversed(worker.inflight))
                    self._replace(worker)
        return results  # type: ignore[return-value]


_POOLS: dict[tuple, VerifierPool] = {}
_POOLS_LOCK = threading.Lock()


def get_pool(num_workers: int, memory_mb: int | None = 2048) -> VerifierPool:
    """The shared pool for these settings, created on first use (every grader with these settings shares it)."""
    key = (num_workers, memory_mb)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None or pool._closed:
            pool = _POOLS[key] = VerifierPool(num_workers, memory_mb)
        return pool
