"""One sandboxed program's process, set up by the runner R (`rewards.code._runner`): its privileges dropped, its
limits, its own network and IPC namespaces (`exec_program`), and, where the runner has namespaces, the slot it runs
in: a pid namespace, a mount namespace and a /tmp of its own, prepared before the job arrives (`Slot`). Nothing here
imports beyond the standard library (and this package's own modules).
"""

from __future__ import annotations

import ctypes
import os
import pickle
import resource
import signal
import struct

from rewards.code import _landlock
from rewards.code._filesystem import DEVICES, fresh_tmp
from rewards.code._seccomp import join_fresh_session_keyring

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38
# From I: the program's wait status and the CPU seconds of every process of its namespace.
STATUS = struct.Struct("=id")
READY = b"+"  # I's first report: its namespaces are made
WORKDIR = "/tmp/work"  # every program's folder, on its own /tmp: the same name whatever ran before

_libc = ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    """Raise OSError (errno and `what`) when a libc call returned non-zero."""
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _set_limits(limits: dict, extra_processes: int) -> None:
    cpu = int(limits["cpu_seconds"])
    memory = limits["memory_mb"] * 1024 * 1024
    for name, value in (
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),  # SIGXCPU at `cpu` seconds, SIGKILL a second later
        (resource.RLIMIT_AS, (memory, memory)),
        (resource.RLIMIT_NPROC, (limits["max_processes"] + extra_processes,) * 2),
        (resource.RLIMIT_NOFILE, (limits["max_open_files"],) * 2),
        (resource.RLIMIT_FSIZE, (limits["max_file_bytes"],) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
        # Whatever the trainer had: no page locked out of reclaim, no real-time or raised scheduling priority.
        (resource.RLIMIT_MEMLOCK, (0, 0)),
        (resource.RLIMIT_RTPRIO, (0, 0)),
        (resource.RLIMIT_NICE, (0, 0)),
    ):
        resource.setrlimit(name, value)


def exec_program(job: dict, workdir: str, fds: tuple[int, int, int, int], state: dict) -> None:
    """In the forked child: drop everything, then exec the interpreter on the program. Never returns. `fds`: stdin,
    stdout, stderr, and the close-on-exec pipe on which a failure to start is reported (a program cannot write to
    it, so it cannot pass its own failure off as the sandbox's: that would score None instead of 0)."""
    stdin_fd, out_w, err_w, failed_w = fds
    try:
        os.setsid()
        _first_oom_victim(state["proc"])
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, failed_w)
        os.closerange(failed_w + 1, 1 << 16)
        os.chdir(workdir)
        private_ipc = _own_namespaces(state["mode"] == "namespaces")
        if state["mode"] == "namespaces" or os.geteuid() == 0:
            if state["mode"] != "namespaces" or state["root"]:
                os.setgroups([])
            program_id = state["program_id"]
            os.setresgid(program_id, program_id, program_id)
            os.setresuid(program_id, program_id, program_id)
        check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        _set_limits(job["limits"], state["extra_processes"])
        join_fresh_session_keyring()
        if state["landlock"]:  # the fallback: no mount namespace, so Landlock decides what it may open
            _landlock.restrict(state["landlock"], state["readable"], [f"/dev/{d}" for d in DEVICES], workdir)
        state["filters"][private_ipc].install()  # last: it refuses keyctl, setsid, unshare, ...
        env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        python = job["python"]
        os.execve(python, [python, *job["python_args"], "main.py"], env)
    except BaseException as exc:  # noqa: BLE001 - reported on the close-on-exec pipe
        try:
            os.write(failed_w, f"sandbox: cannot start the program: {exc!r}".encode()[:4096])
        finally:
            os._exit(126)


def _first_oom_victim(proc_fd: int) -> None:
    """oom_score_adj 1000 for the calling process (and what it starts): under memory pressure the kernel kills a
    program before anything else, never the trainer for a program's memory. Written through the host's /proc
    (`proc_fd`) while the process may still write its own entry there (dumpable, not yet its program's uid); in
    the fallback it is root then, so 1000 is also the least it may set later. With namespaces a program has no
    /proc to change it in."""
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # R is not dumpable; its /proc entries would be root's
    fd = os.open("self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC, dir_fd=proc_fd)
    try:
        os.write(fd, b"1000")
    finally:
        os.close(fd)


def _own_namespaces(required: bool) -> bool:
    """Give the calling process network and IPC namespaces of its own (`required`: else raise); whether it has an
    IPC one. Abstract Unix socket names, ports, SysV objects and POSIX message queues then belong to this program
    alone and die with it: none is there for the next program of the runner, even one kept in flight past its
    program's end by an SCM_RIGHTS cycle. Without namespaces (the fallback), each where the kernel allows it."""
    if _libc.unshare(CLONE_NEWIPC | CLONE_NEWNET) == 0:
        return True
    if required:
        check(-1, "unshare(CLONE_NEWIPC | CLONE_NEWNET)")
    return _libc.unshare(CLONE_NEWIPC) == 0


def stdin_memfd(data: bytes) -> int:
    """A memfd holding `data`, at offset 0: the program's stdin (no pipe to keep fed)."""
    stdin_fd = os.memfd_create("stdin")
    os.write(stdin_fd, data)
    os.lseek(stdin_fd, 0, os.SEEK_SET)
    return stdin_fd


# ---------------------------------------------------------------------------------------------------------------
# A program slot (R, with namespaces): a fresh pid namespace, mount namespace and /tmp for each program


class Slot:
    """A program's place: `I`, pid 1 of a new pid namespace, which unshares a mount namespace, mounts an empty tmpfs
    on /tmp with the work folder in it and waits for the job; then forks the program (pid 2: not an init, so its
    signals behave as anywhere), reaps every orphan of the namespace, kills what is left once the program exits,
    and reports the program's wait status and the CPU time of every process it reaped. Nothing of a program
    outlives it: its pids, its /tmp (inode numbers included) and the folder's name are the same for every program,
    whatever ran before. R makes the next slot while a program runs (`prepare_slot`), off the critical path.
    `fds`: R's ends (the job, stdout, stderr, start failures, I's reports)."""

    def __init__(self, init: int, fds: dict[str, int]) -> None:
        self.init: int | None = init
        self.fds = fds

    def ready(self) -> str | None:
        """Wait for I's namespaces (usually long made): None when it waits for the job, else why they failed."""
        report = os.read(self.fds["report"], len(READY))
        if report != READY:
            return (report + os.read(self.fds["report"], 4096)).decode(errors="replace") or "I died at start"
        return None

    def close(self) -> None:
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = {}


def prepare_slot(state: dict) -> Slot:
    """Start making a program's slot (see `Slot`) and return at once: R's next child (only) goes into a new pid
    namespace, whose pid 1 it is; then R's children go back to R's own namespace (`setns` on R's own, kept in
    `state["pid_namespace"]`: one process cannot unshare a second pid namespace for its children otherwise)."""
    job_r, job_w = os.pipe2(os.O_CLOEXEC)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    failed_r, failed_w = os.pipe2(os.O_CLOEXEC)
    report_r, report_w = os.pipe2(os.O_CLOEXEC)
    check(_libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    try:
        init = os.fork()
        if init == 0:
            for fd in (job_w, out_r, err_r, failed_r, report_r):
                os.close(fd)
            _init(state, job_r, (out_w, err_w, failed_w), report_w)
    finally:
        check(_libc.setns(state["pid_namespace"], CLONE_NEWPID), "setns back to the runner's pid namespace")
    for fd in (job_r, out_w, err_w, failed_w, report_w):
        os.close(fd)
    return Slot(init, {"job": job_w, "out": out_r, "err": err_r, "failed": failed_r, "report": report_r})


def _init(state: dict, job_r: int, program_fds: tuple[int, int, int], report_w: int) -> None:
    """I, pid 1 of the program's pid namespace: make its mount namespace and /tmp, wait for the job, start the
    program, reap; the program's wait status and CPU time to R. Never returns. A signal from inside the namespace
    cannot reach it (the kernel protects an init without handlers), and killing it (R's timeout) kills every process
    of the namespace."""
    out_w, err_w, failed_w = program_fds
    wait_status = None
    try:
        try:
            check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
            fresh_tmp(state["tmpfs"])  # in I's own mount namespace: the runner's /tmp is left as it is
            os.mkdir(WORKDIR, 0o700)
            os.chown(WORKDIR, state["program_id"], state["program_id"])
        except BaseException as exc:  # noqa: BLE001 - reported to R, which answers the job with a sandbox error
            os.write(report_w, f"sandbox: cannot prepare the program's namespaces: {exc!r}".encode()[:4096])
            os._exit(1)
        os.write(report_w, READY)
        try:
            job = pickle.load(os.fdopen(job_r, "rb"))
        except EOFError:  # the runner is closing
            os._exit(0)
        main = os.path.join(WORKDIR, "main.py")
        with open(main, "wb") as f:
            f.write(job["program"])
        os.chown(main, state["program_id"], state["program_id"])
        stdin_fd = stdin_memfd(job["stdin"])
        program = os.fork()
        if program == 0:
            exec_program(job, WORKDIR, (stdin_fd, out_w, err_w, failed_w), state)
        for fd in (stdin_fd, out_w, err_w):
            os.close(fd)
        while True:  # every process of the namespace ends up a child of I: each one reaped (its CPU time counted)
            try:
                done, code = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if done == program:
                wait_status = code
                try:
                    os.kill(-1, signal.SIGKILL)  # the program is done: whatever it started goes too
                except ProcessLookupError:
                    pass  # it left nothing
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # every process I reaped: all of the namespace's
        os.write(report_w, STATUS.pack(-1 if wait_status is None else wait_status, usage.ru_utime + usage.ru_stime))
    except BaseException as exc:  # noqa: BLE001 - I's own failure: the job's answer is a sandbox error
        if wait_status is None:
            try:
                os.write(failed_w, f"sandbox: cannot start the program: {exc!r}".encode()[:4096])
            except OSError:
                pass
    finally:
        os._exit(0)
