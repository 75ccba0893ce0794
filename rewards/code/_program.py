"""One sandboxed program's process, set up by the runner R (`rewards.code._runner`): its privileges dropped, its
limits, its own network and IPC namespaces, and, where the runner has namespaces, the slot it runs in: a pid
namespace, a mount namespace and a /tmp of its own, and (a root trainer's) a uid outside that the last program did
not have, in a user namespace where it is 65534 (`rewards.code._leftovers`), all prepared before the job arrives
(`Slot`). In the fallback
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
READY = b"+"  # I's first report: its namespaces are made (then P's pid, when it made a user namespace)
PID = struct.Struct("=i")
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
    """The fallback's program, in the child the runner forked for the job: everything dropped (to the turn's uid),
    then exec the interpreter on the program. Never returns. `fds`: stdin, stdout, stderr, and the
    close-on-exec pipe on which a failure to start is reported (a program cannot write to it, so it cannot pass its
    own failure off as the sandbox's: that would score None instead of 0)."""
    stdin_fd, out_w, err_w, failed_w = fds
    try:
        os.setsid()
        _first_oom_victim(state["proc"])
        _outputs(out_w, err_w)
        os.dup2(stdin_fd, 0)
        os.closerange(3, failed_w)
        os.closerange(failed_w + 1, 1 << 16)
        os.chdir(workdir)
        private_ipc = _own_namespaces()
        _drop_privileges(state, state["turn"]["id"])
        _confine_and_exec(job, workdir, state, private_ipc)
    except BaseException as exc:  # noqa: BLE001 - reported on the close-on-exec pipe
        _report_failure(failed_w, exc)


def _outputs(out_w: int, err_w: int) -> None:
    """The job's stdout and stderr."""
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
    fd = _oom_score_file(proc_fd)
    try:
        os.write(fd, b"1000")
    finally:
        os.close(fd)


def _oom_score_file(proc_fd: int) -> int:
    """The calling process's oom_score_adj, open for writing (see `_first_oom_victim`)."""
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # R is not dumpable; its /proc entries would be root's
    return os.open("self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC, dir_fd=proc_fd)


def _own_namespaces() -> bool:
    """The fallback: network and IPC namespaces of the calling process's own, each where the kernel allows it;
    whether it has an IPC one. Abstract Unix socket names, ports, SysV objects and POSIX message queues then belong
    to this program alone and die with it: none is there for the next program of the runner, even one kept in
    flight past its program's end by an SCM_RIGHTS cycle (with namespaces, P makes both, required: `_program`)."""
    if _libc.unshare(CLONE_NEWIPC | CLONE_NEWNET) == 0:
        return True
    return _libc.unshare(CLONE_NEWIPC) == 0


def stdin_memfd(data: bytes) -> int:
    """A memfd holding `data`, at offset 0: the program's stdin (no pipe to keep fed)."""
    stdin_fd = os.memfd_create("stdin")
    os.write(stdin_fd, data)
    os.lseek(stdin_fd, 0, os.SEEK_SET)
    return stdin_fd


# ---------------------------------------------------------------------------------------------------------------
# A program slot (R, with namespaces): a fresh pid namespace, mount namespace and /tmp, and the turn's uid


class Slot:
    """A program's place: `I`, pid 1 of a new pid namespace, unshares a mount namespace, mounts an empty tmpfs on /tmp
    with the work folder in it, and forks the program's process `P` (pid 2: not an init, so its signals behave as
    anywhere). P enters a user namespace whose 65534 is the turn's uid outside (a root trainer's: the one the first
    program of that uid made, whose map I wrote, and R keeps), and network and IPC namespaces of its own, and waits
    for the job; then writes the program and execs it, and I reaps every orphan of the namespace, kills what is left
    once the program exits, and reports the program's wait status and the CPU time of every process it reaped.
    Nothing of a program outlives it: its pids, its /tmp (inode numbers included) and the folder's name are the
    same for every program, whatever ran before, and the per-uid counts of what it leaves in the kernel are not the
    next program's. R makes the next slot while a program runs (`prepare_slot`), off the critical path. `fds`: R's
    ends (the job, stdout, stderr, start failures, I's reports); `turn`: its uid (`next_turn`)."""

    def __init__(self, init: int, fds: dict[str, int], turn: dict) -> None:
        self.init: int | None = init
        self.fds = fds
        self.turn = turn

    def ready(self, state: dict) -> str | None:
        """Wait for I's namespaces (usually long made): None when it waits for the job, else why they failed. A
        user namespace made for this turn's uid (then I sends P's pid after READY) is kept, for the later programs
        of the same uid (`state["user_namespaces"]`)."""
        report = os.read(self.fds["report"], len(READY))
        if report != READY:
            return (report + os.read(self.fds["report"], 4096)).decode(errors="replace") or "I died at start"
        if self.turn["new_user"]:
            (pid,) = PID.unpack(os.read(self.fds["report"], PID.size))
            try:
                kept = os.open(f"{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC, dir_fd=state["proc"])
                state["user_namespaces"][self.turn["index"]] = kept
            except OSError:
                pass  # P is gone (killed): this uid's next program makes the namespace again
        return None

    def close(self) -> None:
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = {}


def prepare_slot(state: dict) -> Slot:
    """Start making a program's slot (see `Slot`) for the next of the runner's uids (`next_turn`) and return at once:
    R's next child (only) goes into a new pid namespace, whose pid 1 it is; then R's children go back to R's own
    namespace (`setns` on R's own, kept in `state["pid_namespace"]`: one process cannot unshare a second pid
    namespace for its children otherwise)."""
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
    return Slot(init, fds, turn)


def next_turn(state: dict) -> dict:
    """The next program's uid, in turn from the runner's pool (as the runner's namespace, or the fallback's host,
    names it): `index` in the pool, `id`, and (a root trainer's, with namespaces) `userns`, the fd of the user
    namespace an earlier program of that uid made, or `new_user` where this program makes it."""
    number = state["turns"] = state.get("turns", -1) + 1
    index = number % len(state["program_ids"])
    userns = state.get("user_namespaces", {}).get(index)
    own_user = state["root"] and state["mode"] == "namespaces"
    return {"index": index, "id": state["program_ids"][index], "userns": userns, "new_user": own_user and not userns}


def _init(state: dict, turn: dict, job_r: int, program_fds: tuple[int, int, int], report_w: int) -> None:
    """I, pid 1 of the program's pid namespace: make the mount namespace and /tmp, start P (and map the user
    namespace it makes, when the turn needs one), wait for the program, reap; its wait status and CPU time to R.
    Never returns. A signal from inside the namespace cannot reach it (the kernel protects an init without
    handlers), and killing it (R's timeout) kills every process of the namespace."""
    out_w, err_w, failed_w = program_fds
    wait_status = None
    try:
        try:
            check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
            fresh_tmp(state["tmpfs"])  # in I's own mount namespace: the runner's /tmp is left as it is
            os.mkdir(WORKDIR, 0o700)
            os.chown(WORKDIR, turn["id"], turn["id"])
            new_user = turn["new_user"]
            pid_r, pid_w = os.pipe2(os.O_CLOEXEC) if new_user else (-1, -1)
            mapped_r, mapped_w = os.pipe2(os.O_CLOEXEC) if new_user else (-1, -1)
            program = os.fork()
            if program == 0:
                for fd in (pid_r, mapped_w, report_w):  # I's: P must not keep I's ends open
                    if fd >= 0:
                        os.close(fd)
                _program(state, turn, job_r, program_fds, (pid_w, mapped_r) if new_user else None)
            for fd in (job_r, out_w, err_w, pid_w, mapped_r):
                if fd >= 0:
                    os.close(fd)
            if new_user:
                host_pid = os.read(pid_r, 32).decode()
                _map_user(state["proc"], host_pid, turn["id"])
                os.write(mapped_w, READY)
                os.close(pid_r)
                os.close(mapped_w)
        except BaseException as exc:  # noqa: BLE001 - reported to R, which answers the job with a sandbox error
            os.write(report_w, f"sandbox: cannot prepare the program's namespaces: {exc!r}".encode()[:4096])
            os._exit(1)
        os.write(report_w, READY + (PID.pack(int(host_pid)) if new_user else b""))
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
    """P, the program's process, forked by I before the job arrives: its session and namespaces: a root
    trainer's enters the turn's user namespace (or, with `user`, the pipes on which it tells I its pid and I answers
    once the maps are written, makes it), where it will be uid 65534, the turn's uid outside; then network and IPC
    namespaces of its own (owned by that user namespace). Then it waits for the job, becomes the OOM killer's first
    choice, drops to the program's uid, writes the program and its stdin, and execs it (`exec_program`'s last
    steps). Never returns."""
    out_w, err_w, failed_w = fds
    try:
        os.setsid()
        _outputs(out_w, err_w)
        program_id = turn["id"]
        if turn["userns"] is not None:
            check(_libc.setns(turn["userns"], CLONE_NEWUSER), "setns(the turn's user namespace)")
            program_id = PROGRAM_ID
        elif user is not None:
            pid_w, mapped_r = user
            host_pid = os.readlink("self", dir_fd=state["proc"])  # before the new namespace: the host's /proc
            check(_libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
            os.write(pid_w, host_pid.encode())
            if os.read(mapped_r, len(READY)) != READY:
                raise OSError("the program's user namespace was not mapped")
            program_id = PROGRAM_ID
        check(_libc.unshare(CLONE_NEWIPC | CLONE_NEWNET), "unshare(CLONE_NEWIPC | CLONE_NEWNET)")
        oom_score = _oom_score_file(state["proc"])  # written once the job is here (below)
        kept = sorted({job_r, failed_w, oom_score})
        for low, high in zip([2, *kept], [*kept, 1 << 16], strict=True):  # everything else of R's and I's
            os.closerange(low + 1, high)
        os.chdir(WORKDIR)
        try:
            with os.fdopen(job_r, "rb") as job_file:
                job = pickle.load(job_file)
        except EOFError:  # the runner is closing
            os._exit(0)
        # Only now the OOM killer's first choice: while it waits, the program running beside it must be the one
        # killed at the memory limit, not the next one (which would then fail a job it never ran).
        os.write(oom_score, b"1000")
        os.close(oom_score)
        _drop_privileges(state, program_id)
        with open("main.py", "wb") as f:  # in the program's own folder, as the program's own file
            f.write(job["program"])
        stdin_fd = stdin_memfd(job["stdin"])
        os.dup2(stdin_fd, 0)
        os.close(stdin_fd)
        _confine_and_exec(job, WORKDIR, state, True)
    except BaseException as exc:  # noqa: BLE001 - reported on the close-on-exec pipe
        _report_failure(failed_w, exc)
