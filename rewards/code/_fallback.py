"""The fallback (no namespaces, a root trainer): the runner B runs each program itself, as a uid of its runner's
own (the next of its pool), in the host's pid namespace and file system, in a work folder of a random name
(docs/code-rewards.md says what that stops and what it does not). B is the subreaper of the programs' orphans: after
each program it kills every process of the program's uid and reaps them, adding up their CPU time. Standard library
only.
"""

from __future__ import annotations

import os
import signal
import time

from rewards.code._filesystem import remove_tree
from rewards.code._outcome import read_output, verdict
from rewards.code._program import exec_program, next_turn, stdin_memfd


def run_job(job: dict, state: dict, not_run) -> dict:
    """Run one program under the job's limits; the result dict of `rewards.code.sandbox.RunResult`. Its uid is the
    next of the runner's (`rewards.code._leftovers`); `not_run()`: the answer when what an earlier program left in
    the runner's memory cgroup did not come back."""
    turn = state["turn"] = next_turn(state)
    if state["memory"] is not None and not state["memory"].drained():
        return not_run()
    workdir = os.path.join(state["work_root"], os.urandom(8).hex())  # a name that counts nothing
    os.mkdir(workdir, 0o700)
    try:
        with open(os.path.join(workdir, "main.py"), "wb") as f:
            f.write(job["program"])
        if state["root"]:
            os.chown(workdir, turn["id"], turn["id"])
            os.chown(os.path.join(workdir, "main.py"), turn["id"], turn["id"])
        stdin_fd = stdin_memfd(job["stdin"])
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        failed_r, failed_w = os.pipe2(os.O_CLOEXEC)
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            exec_program(job, workdir, (stdin_fd, out_w, err_w, failed_w), state)
        for fd in (stdin_fd, out_w, err_w, failed_w):
            os.close(fd)
        try:
            result, wait_status = _supervise(pid, out_r, err_r, job["limits"], start, state)
            verdict(result, wait_status, job["limits"])
            failure = os.read(failed_r, 4096)  # empty: exec succeeded (the pipe closed on exec) or nothing to say
        finally:
            os.close(failed_r)
        if failure:
            result.update(status="sandbox_error", stderr=failure)
        return result
    finally:
        remove_tree(workdir)


def _supervise(pid: int, out_r: int, err_r: int, limits: dict, start: float, state: dict) -> tuple[dict, int | None]:
    """The fallback's program `pid`: read its output until it exits (or a limit); the result without its verdict
    (`verdict`) and its wait status (None: not reaped), after killing and reaping everything it started."""
    pidfd = os.pidfd_open(pid)
    try:
        status, stdout, stderr = read_output(out_r, err_r, pidfd, limits, start, lambda: _kill_all(state, pid))
    finally:
        _kill_all(state, pid)
        wait_status, cpu = _reap(pid, 5.0, state)
        os.close(pidfd)
    result = {"status": status, "stdout": stdout, "stderr": stderr}
    return result | {"wall_s": time.monotonic() - start, "cpu_s": cpu}, wait_status


def _kill_all(state: dict, pgid: int) -> None:
    """Kill what the program left: every process of the namespace (R is its init); in the fallback every process
    of the runner's own uid (a root trainer's: each runner has its own), else the program's process group."""
    if os.getpid() == 1:
        try:
            os.kill(-1, signal.SIGKILL)  # from a namespace's init: every other process in it, never outside it
        except ProcessLookupError:  # nothing else left in the namespace: what the kill is for, not a failure
            pass
    elif state["root"]:
        _kill_uid(state["turn"]["id"])
    else:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # the group is gone (its id unused, or reused by another user):
            pass  # nothing of the program's is left to kill


def _kill_uid(uid: int) -> None:
    """`kill(-1, SIGKILL)` as `uid`: every process of that uid, wherever it went (another session or process group),
    and nothing else. A SIGKILL pending stops a fork in progress, so one pass reaches all; two to be sure."""
    helper = os.fork()
    if helper == 0:
        try:
            os.setresuid(uid, uid, uid)
            for _ in range(2):
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:  # no process of this uid is left: done
                    break
        finally:
            os._exit(0)
    os.waitpid(helper, 0)


def _reap(pid: int, block_s: float, state: dict) -> tuple[int | None, float]:
    """The wait status of `pid`, and the CPU seconds of every process the program started, after reaping every
    other child too (killed again while any is left, until `block_s`): R's children are the program and the
    orphans of its namespace (or, in the fallback, of its subreaper B), and none may outlive the test. Each reaped
    process's usage includes that of the children it reaped itself; the others come back to R (or B) as orphans
    and are reaped here, so the sum counts every process once, waited for by the program or not."""
    status, cpu = None, 0.0
    deadline = time.monotonic() + block_s
    while True:
        try:
            done, code, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return status, cpu
        if done:
            cpu += usage.ru_utime + usage.ru_stime
        if done == pid:
            status = code
        if done == 0:
            if time.monotonic() > deadline:
                return status, cpu
            _kill_all(state, pid)
            time.sleep(0.002)
