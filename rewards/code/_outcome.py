"""A program's end, as the runner R (`rewards.code._runner`) sees it: its output read up to the limits, and its
verdict (ok, crash, timeout, output_limit, sandbox_error) from its wait status and CPU time. Standard library only.
"""

from __future__ import annotations

import os
import select
import signal
import time

STDERR_KEEP = 2048  # bytes of stderr kept for the result (the tail: where Python puts the exception)


def read_output(
    out_r: int, err_r: int, done_fd: int, limits: dict, start: float, on_done=None
) -> tuple[str, bytes, bytes]:
    """Read stdout and stderr (closing them) until both are closed and `done_fd` is readable (the program's pidfd,
    or I's report), or the wall limit, or the output limit: (`ok`, `timeout` or `output_limit`, stdout, stderr
    tail). `on_done` runs once `done_fd` is readable (the fallback kills what the program left, closing the pipes).
    The time limit is CPU time (`limits["timeout"]`, judged by `verdict`): a neighbour that takes the CPU makes a
    program slower, not wrong, up to the wall limit (`limits["wall_timeout"]`, by default twice as long), which stops
    programs that sleep or block."""
    deadline = start + limits["wall_timeout"]
    stdout, stderr = bytearray(), bytearray()
    open_fds = {out_r, err_r}
    status, done = "ok", False
    try:
        while open_fds or not done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                status = "timeout"
                break
            readable, _, _ = select.select([*open_fds, *([] if done else [done_fd])], [], [], remaining)
            if done_fd in readable:
                done = True
                if on_done is not None:
                    on_done()
            for fd in (out_r, err_r):
                if fd not in readable:
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    open_fds.discard(fd)
                elif fd == out_r:
                    stdout += chunk
                else:
                    stderr = (stderr + chunk)[-STDERR_KEEP:]
            if len(stdout) > limits["max_output_bytes"]:
                status = "output_limit"
                break
    finally:
        os.close(out_r)
        os.close(err_r)
    return status, bytes(stdout[: limits["max_output_bytes"]]), bytes(stderr)


def verdict(result: dict, wait_status: int | None, limits: dict) -> None:
    """Set the result's status (when the output was read to its end: `ok` so far) and exit code from the program's
    wait status (None: it could not be reaped) and the CPU time of all its processes."""
    if result["status"] == "ok":
        if wait_status is None:
            result["status"] = "sandbox_error"
        elif result["cpu_s"] > limits["timeout"]:
            result["status"] = "timeout"  # finished (or crashed), but after more CPU time than allowed
        elif os.WIFSIGNALED(wait_status):
            result["status"] = "timeout" if os.WTERMSIG(wait_status) == signal.SIGXCPU else "crash"
        elif os.WEXITSTATUS(wait_status) != 0:
            result["status"] = "crash"
    result["exit_code"] = None
    if wait_status is not None:
        signalled = os.WIFSIGNALED(wait_status)
        result["exit_code"] = -os.WTERMSIG(wait_status) if signalled else os.WEXITSTATUS(wait_status)


def error_result(message: str) -> dict:
    result = {"status": "sandbox_error", "exit_code": None, "stdout": b"", "stderr": message.encode()}
    return {**result, "wall_s": 0.0, "cpu_s": 0.0}
