"""One sandboxed program's process, set up by the runner R (`rewards.code._runner`): its privileges dropped, its
limits, its own network and IPC namespaces, and, where the runner has namespaces, the slot it runs in: a pid
namespace, a mount namespace and a /tmp of its own, its own memory cgroup and (a root trainer's) its own user
namespace and uid outside (`rewards.code._leftovers`), all prepared before the job arrives (`Slot`). In the fallback
the runner forks the program when the job arrives (`exec_program`). Nothing here imports beyond the standard
library (and this package's own modules).
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
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38
PROGRAM_ID = 65534  # uid and gid of every program inside its user namespace (nobody/nogroup)
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
    """The fallback's program, in the child the runner forked for the job: its memory cgroup, then everything
    dropped, then exec the interpreter on the program. Never returns. `fds`: stdin, stdout, stderr, and the
    close-on-exec pipe on which a failure to start is reported (a program cannot write to it, so it cannot pass its
    own failure off as the sandbox's: that would score None instead of 0)."""
    stdin_fd, out_w, err_w, failed_w = fds
    try:
        if state["memory"] is not None:
            state["memory"].join(state["turn"]["memory"])
        _enter(out_w, err_w, state["proc"])
        os.dup2(stdin_fd, 0)
        os.closerange(3, failed_w)
        os.closerange(failed_w + 1, 1 << 16)
        os.chdir(workdir)
        private_ipc = _own_namespaces()
        _drop_privileges(state, state["turn"]["id"])
        _confine_and_exec(job, workdir, state, private_ipc)
    except BaseException as exc:  # noqa: BLE001 - reported on the close-on-exec pipe
        _report_failure(failed_w, exc)


def _enter(out_w: int, err_w: int, proc_fd: int) -> None:
    """A session of its own, the OOM killer's first choice, the job's stdout and stderr."""
    os.setsid()
    _first_oom_victim(proc_fd)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)


def _drop_privileges(state: dict, program_id: int) -> None:
    """Become `program_id` (uid and gid), without supplementary groups where the kernel allows dropping them."""
    if state["mode"] == "namespaces" or os.geteuid() == 0:
        if state["mode"] != "namespaces" or state["root"]:
            os.setgroups([])
        os.setresgid(program_id, program_id, program_id)
        os.setresuid(program_id, program_id, program_id)


def _confine_and_exec(job: dict, workdir: str, state: dict, private_ipc: bool) -> None:
    """No new privileges, the job's limits, a fresh keyring, Landlock (the fallback), the seccomp filter, exec."""
    check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _set_limits(job["limits"], state["extra_processes"])
    join_fresh_session_keyring()
    if state["landlock"]:  # the fallback: no mount namespace, so Landlock decides what it may open
        _landlock.restrict(state["landlock"], state["readable"], [f"/dev/{d}" for d in DEVICES], workdir)
    state["filters"][private_ipc].install()  # last: it refuses keyctl, setsid, unshare, ...
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    python = job["python"]
    os.execve(python, [python, *job["python_args"], "main.py"], env)


def _report_failure(failed_w: int, exc: BaseException) -> None:
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


def _own_namespaces(user: bool = False) -> bool:
    """Give the calling process network and IPC namespaces of its own (and a user namespace, `user`); whether it has
    an IPC one. Abstract Unix socket names, ports, SysV objects and POSIX message queues then belong to this program
    alone and die with it: none is there for the next program of the runner, even one kept in flight past its
    program's end by an SCM_RIGHTS cycle. With namespaces they are required (else OSError); in the fallback each is
    made where the kernel allows it."""
    flags = CLONE_NEWIPC | CLONE_NEWNET | (CLONE_NEWUSER if user else 0)
    if _libc.unshare(flags) == 0:
        return True
    if user:
        check(-1, "unshare(CLONE_NEWUSER | CLONE_NEWIPC | CLONE_NEWNET)")
    return _libc.unshare(CLONE_NEWIPC) == 0


def stdin_memfd(data: bytes) -> int:
    """A memfd holding `data`, at offset 0: the program's stdin (no pipe to keep fed)."""
    stdin_fd = os.memfd_create("stdin")
    os.write(stdin_fd, data)
    os.lseek(stdin_fd, 0, os.SEEK_SET)
    return stdin_fd


# ---------------------------------------------------------------------------------------------------------------
# A program slot (R, with namespaces): a fresh pid namespace, mount namespace, /tmp, memory cgroup and uid


class Slot:
    """A program's place: `I`, pid 1 of a new pid namespace, joins the turn's memory cgroup, unshares a mount
    namespace, mounts an empty tmpfs on /tmp with the work folder in it, and forks the program's process `P` (pid 2:
    not an init, so its signals behave as anywhere). P enters its own network and IPC namespaces (a root trainer's:
    and a user namespace, whose uid map I writes: 65534 there is the turn's uid outside) and waits for the job; then
    writes the program and execs it, and I reaps every orphan of the namespace, kills what is left once the program
    exits, and reports the program's wait status and the CPU time of every process it reaped. Nothing of a program
    outlives it: its pids, its /tmp (inode numbers included) and the folder's name are the same for every program,
    whatever ran before, and what it leaves in the kernel is charged to its own cgroup and uid. R makes the next
    slot while a program runs (`prepare_slot`), off the critical path. `fds`: R's ends (the job, stdout, stderr,
    start failures, I's reports); `memory`: the index of its memory cgroup (None: no memory cgroup)."""

    def __init__(self, init: int, fds: dict[str, int], memory: int | None) -> None:
        self.init: int | None = init
        self.fds = fds
        self.memory = memory

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
    """Start making a program's slot (see `Slot`) for the next turn of the runner's pools (`state["turns"]`: its
    memory cgroups, its uids) and return at once: R's next child (only) goes into a new pid namespace, whose pid 1 it
    is; then R's children go back to R's own namespace (`setns` on R's own, kept in `state["pid_namespace"]`: one
    process cannot unshare a second pid namespace for its children otherwise)."""
    turn = next_turn(state)
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
            _init(state, turn, job_r, (out_w, err_w, failed_w), report_w)
    finally:
        check(_libc.setns(state["pid_namespace"], CLONE_NEWPID), "setns back to the runner's pid namespace")
    for fd in (job_r, out_w, err_w, failed_w, report_w):
        os.close(fd)
    fds = {"job": job_w, "out": out_r, "err": err_r, "failed": failed_r, "report": report_r}
    return Slot(init, fds, turn["memory"])


def next_turn(state: dict) -> dict:
    """The next program's uid (as the runner's namespace, or the fallback's host, names it) and memory cgroup
    (None: none), each taken in turn from the runner's pools."""
    number = state["turns"] = state.get("turns", -1) + 1
    ids, memory = state["program_ids"], state["memory"]
    return {"id": ids[number % len(ids)], "memory": None if memory is None else number % len(memory)}


def _init(state: dict, turn: dict, job_r: int, program_fds: tuple[int, int, int], report_w: int) -> None:
    """I, pid 1 of the program's pid namespace: join the turn's memory cgroup, make the mount namespace and /tmp,
    start P and map its user namespace, wait for the program, reap; its wait status and CPU time to R. Never
    returns. A signal from inside the namespace cannot reach it (the kernel protects an init without handlers), and
    killing it (R's timeout) kills every process of the namespace."""
    out_w, err_w, failed_w = program_fds
    wait_status = None
    try:
        try:
            if turn["memory"] is not None:
                state["memory"].join(turn["memory"])  # first: all the program's memory is charged there
            check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
            fresh_tmp(state["tmpfs"])  # in I's own mount namespace: the runner's /tmp is left as it is
            os.mkdir(WORKDIR, 0o700)
            os.chown(WORKDIR, turn["id"], turn["id"])
            own_user = state["root"]  # only a root trainer's runner has more than one uid to give
            pid_r, pid_w = os.pipe2(os.O_CLOEXEC) if own_user else (-1, -1)
            mapped_r, mapped_w = os.pipe2(os.O_CLOEXEC) if own_user else (-1, -1)
            program = os.fork()
            if program == 0:
                for fd in (pid_r, mapped_w, report_w):  # I's: P must not keep I's ends open
                    if fd >= 0:
                        os.close(fd)
                _program(state, turn, job_r, program_fds, (pid_w, mapped_r) if own_user else None)
            for fd in (job_r, out_w, err_w, pid_w, mapped_r):
                if fd >= 0:
                    os.close(fd)
            if own_user:
                _map_user(state["proc"], os.read(pid_r, 32).decode(), turn["id"])
                os.write(mapped_w, READY)
                os.close(pid_r)
                os.close(mapped_w)
        except BaseException as exc:  # noqa: BLE001 - reported to R, which answers the job with a sandbox error
            os.write(report_w, f"sandbox: cannot prepare the program's namespaces: {exc!r}".encode()[:4096])
            os._exit(1)
        os.write(report_w, READY)
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


def _map_user(proc_fd: int, host_pid: str, inside_id: int) -> None:
    """Write the uid and gid maps of P's new user namespace (I may: it has CAP_SETUID in the runner's namespace, the
    parent of P's): root stays root (P's set-up, before it drops to the program's uid), and 65534 is `inside_id` of
    the runner's namespace, the turn's uid outside. `host_pid`: P's pid as the host's /proc (`proc_fd`) names it."""
    if not host_pid.isdigit():
        raise OSError(f"the program's process did not make its user namespace ({host_pid!r})")
    for name in ("uid_map", "gid_map"):
        fd = os.open(f"{host_pid}/{name}", os.O_WRONLY | os.O_CLOEXEC, dir_fd=proc_fd)
        try:
            os.write(fd, f"0 0 1\n{PROGRAM_ID} {inside_id} 1\n".encode())
        finally:
            os.close(fd)


def _program(state: dict, turn: dict, job_r: int, fds: tuple[int, int, int], user: tuple[int, int] | None) -> None:
    """P, the program's process, forked by I before the job arrives: its session, OOM score and namespaces (with
    `user`, the pipes on which it tells I its pid and I answers once the maps are written, its own user namespace:
    it is uid 65534 there, the turn's uid outside); then it waits for the job, drops to the program's uid, writes
    the program and its stdin, and execs it (`exec_program`'s last steps). Never returns."""
    out_w, err_w, failed_w = fds
    try:
        _enter(out_w, err_w, state["proc"])
        program_id = turn["id"]
        if user is not None:
            pid_w, mapped_r = user
            host_pid = os.readlink("self", dir_fd=state["proc"])  # before the new namespace: the host's /proc
            _own_namespaces(user=True)
            os.write(pid_w, host_pid.encode())
            if os.read(mapped_r, len(READY)) != READY:
                raise OSError("the program's user namespace was not mapped")
            program_id = PROGRAM_ID
        else:
            check(_libc.unshare(CLONE_NEWIPC | CLONE_NEWNET), "unshare(CLONE_NEWIPC | CLONE_NEWNET)")
        os.closerange(3, min(job_r, failed_w))
        os.closerange(min(job_r, failed_w) + 1, max(job_r, failed_w))
        os.closerange(max(job_r, failed_w) + 1, 1 << 16)
        os.chdir(WORKDIR)
        try:
            with os.fdopen(job_r, "rb") as job_file:
                job = pickle.load(job_file)
        except EOFError:  # the runner is closing
            os._exit(0)
        _drop_privileges(state, program_id)
        with open("main.py", "wb") as f:  # in the program's own folder, as the program's own file
            f.write(job["program"])
        stdin_fd = stdin_memfd(job["stdin"])
        os.dup2(stdin_fd, 0)
        os.close(stdin_fd)
        _confine_and_exec(job, WORKDIR, state, True)
    except BaseException as exc:  # noqa: BLE001 - reported on the close-on-exec pipe
        _report_failure(failed_w, exc)
