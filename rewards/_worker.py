"""A verifier worker process: reads jobs from stdin, runs them under a deadline, writes results to stdout.

Started by `rewards.pool.VerifierPool` as `python -c "from rewards._worker import main; main()"`, so it imports only
this package and math-verify (never the trainer's `__main__`, torch or CUDA). Protocol: 4-byte big-endian length +
pickle, both ways. The first message out is `("ready", pid)`; then one `(job_id, status, value)` per job, status
`ok`, `timeout` (the in-process alarm fired) or `error`.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
import time

_HEADER = struct.Struct(">I")
ENV_MEMORY_MB = "DRGRPO_REWARD_WORKER_MEMORY_MB"
ENV_PARENT_DEATH_SIGNAL = "DRGRPO_REWARD_WORKER_PDEATHSIG"
ENV_WARM_UP = "DRGRPO_REWARD_WORKER_WARM_UP"


def _verify_answer(*args):
    from rewards.equivalence import verify_answer

    return verify_answer(*args)


def _verify_reading(*args):
    from rewards.equivalence import verify_reading

    return verify_reading(*args)


def _equivalent(*args):
    from rewards.equivalence import equivalent

    return equivalent(*args)


def _ping(value):
    """Echo: a health check that needs neither math-verify nor sympy."""
    return value


def _ignore_alarm_and_spin(seconds):
    """A job that ignores its deadline: SIGALRM blocked, busy for `seconds` (at most 60). A diagnostic for the pool's
    hard kill, which is all that stops a job stuck in one long C call (the alarm only runs between bytecodes)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    end = time.monotonic() + min(float(seconds), 60.0)
    while time.monotonic() < end:
        pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
    return "finished"


FUNCTIONS = {
    "verify_answer": _verify_answer,
    "verify_reading": _verify_reading,
    "equivalent": _equivalent,
    "ping": _ping,
    "ignore_alarm_and_spin": _ignore_alarm_and_spin,
}


def _limit_memory() -> None:
    megabytes = os.environ.get(ENV_MEMORY_MB)
    if not megabytes:
        return
    import resource

    limit = int(megabytes) * 1024 * 1024
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ValueError, OSError):  # a lower hard limit is already in place
        pass


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the parent thread exits, even if we are stuck in a C call that ignores stdin EOF."""
    if os.environ.get(ENV_PARENT_DEATH_SIGNAL) != "1" or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(0)
    except Exception:  # noqa: BLE001 - best effort; stdin EOF still ends an idle worker
        pass


def _read_exact(stream, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def main() -> None:
    _die_with_parent()
    _limit_memory()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the trainer, which closes the pool
    stdin = sys.stdin.buffer
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt the protocol

    from rewards.deadline import DeadlineExceeded, alarm_deadline

    def send(message: tuple) -> None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(_HEADER.pack(len(payload)) + payload)

    # Warm up (math-verify loads its LaTeX grammar and sympy its caches on first use, ~1 s): a job's deadline must
    # not pay for that.
    if os.environ.get(ENV_WARM_UP) != "0":
        _verify_answer("\\frac{1}{2}", "0.5")
        _verify_answer("x=1", "\\{1, 2\\}", "text")
    send(("ready", os.getpid()))
    while True:
        header = _read_exact(stdin, _HEADER.size)
        if header is None:
            return
        payload = _read_exact(stdin, _HEADER.unpack(header)[0])
        if payload is None:
            return
        job_id, name, args, seconds = pickle.loads(payload)
        try:
            try:
                with alarm_deadline(seconds):
                    value = FUNCTIONS[name](*args)
                status = "ok"
            except DeadlineExceeded:
                status, value = "timeout", None
        except DeadlineExceeded:  # fired between the body's end and the timer's cancellation
            status, value = "timeout", None
        except BaseException as exc:  # noqa: BLE001 - MemoryError, RecursionError, sympy errors: all are results
            status, value = "error", f"{type(exc).__name__}: {str(exc)[:200]}"
        send((job_id, status, value))


if __name__ == "__main__":
    main()
