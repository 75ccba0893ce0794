"""The sandbox runner: a process that sets up the isolation once, then runs programs one at a time.

Started by `rewards.code.sandbox` as `python -I -c "...; main()"` with an empty environment. Protocol (both ways):
4-byte big-endian length + pickle, as in `rewards._worker`. In order:

1. `B` (this process) unshares a user, mount, network and pid namespace. Unprivileged, it maps its own uid/gid to
   65534 inside; as root it asks the parent (`("map", pid)`) to write the map `0 0 1` + `65534 <own id> 1` (only a
   process with CAP_SETUID outside may map two ids; `program_id_outside`), and waits for `("mapped",)`.
2. `B` forks `R`, pid 1 of the new pid namespace (so that `kill(-1)` from `R` reaches exactly the programs, and every
   program dies with `R`), and waits for it. `R` builds a minimal read-only root (`rewards.code._filesystem`:
   `/usr`, `/lib*`, `/etc`, the interpreters' folders, a few devices; no `/tmp`, `/var`, `/run`, `/dev/shm`,
   `/home` of the host), `pivot_root`s into it, mounts a fresh writable tmpfs on `/tmp` for the work folders and
   answers `("ready", info)`.
3. Per job `(job_id, program, stdin, limits)`: `R` writes the program into a fresh folder, forks the program
   (own session, network and IPC namespaces, oom_score_adj 1000, uid/gid 65534, no capabilities, no new
   privileges, rlimits, a fresh session keyring, the seccomp filter, clean environment, stdin from a memfd), reads
   its stdout/stderr up to the output limit, and on exit, timeout or overflow kills every process of the namespace
   (`kill(-1, SIGKILL)`), reaps them (their CPU time is the program's), replaces `/tmp` by an empty tmpfs and
   answers `(job_id, result)`. After an error of its own, or when its own
   limits changed, the answer carries `retire` and
   `R` exits: the trainer starts another runner.

Without namespaces (kernel or container forbids them) and `allow_fallback`, `B` runs the jobs itself: the program
drops to `B`'s own uid (`B` must be root: the fallback is refused otherwise), under the filter (no socket() at all)
and Landlock where the kernel has it, but in the pid namespace and file system of the host (docs/code-rewards.md).
Nothing here imports beyond the standard library (and this package's own modules).
"""

from __future__ import annotations

import ctypes
import errno
import os
import pickle
import resource
import select
import signal
import struct
import sys
import time

from rewards.code import _cgroup, _landlock
from rewards.code._filesystem import DEVICES, ROOT_FOLDERS, minimal_root, remove_tree, reset_tmp
from rewards.code._seccomp import ProgramFilter, join_fresh_session_keyring

_HEADER = struct.Struct(">I")
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
PROGRAM_ID = 65534  # uid and gid of every program inside its user namespace (nobody/nogroup)
# Outside (root trainer), each runner's programs get uid/gid OWN_IDS_BASE + the runner's pid: a live pid is
# unique, so no host process and no other runner shares it (its key quota, process count, signals). The range
# 0x70000000-0x7FFDFFFF is one that systemd leaves unused (docs/UIDS-GIDS.md), above every container range.
OWN_IDS_BASE = 0x70000000
STDERR_KEEP = 2048  # bytes of stderr kept for the result (the tail: where Python puts the exception)

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _send(out, message: tuple) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_HEADER.pack(len(payload)) + payload)


def _read_exact(stream, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _receive(stream):
    header = _read_exact(stream, _HEADER.size)
    if header is None:
        return None
    payload = _read_exact(stream, _HEADER.unpack(header)[0])
    return None if payload is None else pickle.loads(payload)


def program_id_outside(runner_pid: int) -> int:
    """The uid and gid that the programs of runner `runner_pid` have outside (a root trainer's runners)."""
    return OWN_IDS_BASE + runner_pid


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------------------------
# Isolation set-up (B, then R)


def _unshare(stdin, out, disabled: bool = False) -> str:
    """Enter new user/mount/net/pid namespaces with the uid map; 'namespaces', or raise OSError."""
    if disabled:  # DRGRPO_SANDBOX_NO_NAMESPACES: behave as on a kernel that forbids them
        raise OSError(errno.EPERM, "namespaces disabled by DRGRPO_SANDBOX_NO_NAMESPACES")
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID), "unshare")
    if uid == 0:
        _send(out, ("map", os.getpid()))  # the parent (root outside) writes 0->0 and 65534->our own id
        reply = _receive(stdin)
        if reply != ("mapped",):
            raise OSError(errno.EPERM, f"the parent could not write the uid map: {reply!r}")
    else:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{PROGRAM_ID} {uid} 1\n")
        _write("/proc/self/gid_map", f"{PROGRAM_ID} {gid} 1\n")
    return "namespaces"


# ---------------------------------------------------------------------------------------------------------------
# One program (R)


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


def _exec_program(job: dict, workdir: str, fds: tuple[int, int, int, int], state: dict) -> None:
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
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
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
        _check(-1, "unshare(CLONE_NEWIPC | CLONE_NEWNET)")
    return _libc.unshare(CLONE_NEWIPC) == 0


def _kill_all(state: dict, pgid: int) -> None:
    """Kill what the program left: every process of the namespace (R is its init); in the fallback every process
    of the runner's own uid (a root trainer's: each runner has its own), else the program's process group."""
    if os.getpid() == 1:
        try:
            os.kill(-1, signal.SIGKILL)  # from a namespace's init: every other process in it, never outside it
        except ProcessLookupError:
            pass
    elif state["root"]:
        _kill_uid(state["program_id"])
    else:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


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
                except ProcessLookupError:
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


def run_job(job: dict, state: dict) -> dict:
    """Run one program under the job's limits; the result dict of `rewards.code.sandbox.RunResult`."""
    limits = job["limits"]
    workdir = os.path.join(state["work_root"], str(job["id"]))
    os.mkdir(workdir, 0o700)
    try:
        with open(os.path.join(workdir, "main.py"), "wb") as f:
            f.write(job["program"])
        if state["mode"] == "namespaces" or state["root"]:
            os.chown(workdir, state["program_id"], state["program_id"])
            os.chown(os.path.join(workdir, "main.py"), state["program_id"], state["program_id"])
        stdin_fd = os.memfd_create("stdin")
        os.write(stdin_fd, job["stdin"])
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        failed_r, failed_w = os.pipe2(os.O_CLOEXEC)
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _exec_program(job, workdir, (stdin_fd, out_w, err_w, failed_w), state)
        for fd in (stdin_fd, out_w, err_w, failed_w):
            os.close(fd)
        try:
            result = _supervise(pid, out_r, err_r, limits, start, state)
            failure = os.read(failed_r, 4096)  # empty: exec succeeded (the pipe closed on exec) or nothing to say
        finally:
            os.close(failed_r)
        if failure:
            result.update(status="sandbox_error", stderr=failure)
        return result
    finally:
        if state["mode"] == "namespaces":
            reset_tmp(workdir, state["tmpfs"])
        else:
            remove_tree(workdir)


def _supervise(pid: int, out_r: int, err_r: int, limits: dict, start: float, state: dict) -> dict:
    """Read the program's output until it exits (or the wall limit, or the output limit); the verdict. Its time
    limit is CPU time (`limits["timeout"]`): a neighbour that takes the CPU makes it slower, not wrong, up to the
    wall limit (`limits["wall_timeout"]`, by default twice as long), which stops programs that sleep or block."""
    deadline = start + limits["wall_timeout"]
    stdout, stderr = bytearray(), bytearray()
    open_fds = {out_r, err_r}
    pidfd = os.pidfd_open(pid)
    status, exited = "ok", False
    try:
        while open_fds or not exited:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                status = "timeout"
                break
            readable, _, _ = select.select([*open_fds, *([] if exited else [pidfd])], [], [], remaining)
            if pidfd in readable:
                exited = True
                _kill_all(state, pid)  # the program is done: whatever it started goes too (and closes the pipes)
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
        _kill_all(state, pid)
        wait_status, cpu = _reap(pid, 5.0, state)
        for fd in (out_r, err_r, pidfd):
            os.close(fd)
    wall = time.monotonic() - start
    if status == "ok":
        if wait_status is None:
            status = "sandbox_error"
        elif cpu > limits["timeout"]:
            status = "timeout"  # finished (or crashed), but after more CPU time than allowed
        elif os.WIFSIGNALED(wait_status):
            status = "timeout" if os.WTERMSIG(wait_status) == signal.SIGXCPU else "crash"
        elif os.WEXITSTATUS(wait_status) != 0:
            status = "crash"
    exit_code = None
    if wait_status is not None:
        exit_code = -os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else os.WEXITSTATUS(wait_status)
    return {
        "status": status,
        "exit_code": exit_code,
        "stdout": bytes(stdout[: limits["max_output_bytes"]]),
        "stderr": bytes(stderr),
        "wall_s": wall,
        "cpu_s": cpu,
    }


def _own_settings() -> tuple:
    """What a program of the same uid could change in this process from outside: rlimits, nice value, CPUs."""
    limits = tuple(resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource)) if n.startswith("RLIMIT_"))
    return limits, os.getpriority(os.PRIO_PROCESS, 0), tuple(sorted(os.sched_getaffinity(0)))


def _error(message: str) -> dict:
    result = {"status": "sandbox_error", "exit_code": None, "stdout": b"", "stderr": message.encode()}
    return {**result, "wall_s": 0.0, "cpu_s": 0.0}


def _serve(stdin, out, state: dict) -> None:
    """Answer jobs until the trainer closes stdin, or until the runner itself may be damaged: after an error of its
    own, it answers `retire` and exits, so that the trainer replaces it instead of sending it more jobs."""
    info = {"mode": state["mode"], "pid_namespace": os.getpid() == 1, "uid": os.geteuid()}
    info |= {"program_uid": state["program_uid"], "landlock": state["landlock"], "cgroup": state["cgroup"]}
    info |= {"memory_cgroup": state["memory_cgroup"]}
    _send(out, ("ready", info))
    start_up = _own_settings()
    while True:
        job = _receive(stdin)
        if job is None:
            return
        if _own_settings() != start_up:
            result = _error(f"the runner's own limits changed: {_own_settings()} (started with {start_up})")
            result["retire"] = True
        else:
            try:
                result = run_job(job, state)
            except Exception as exc:  # noqa: BLE001 - an error of the sandbox itself: this job's answer, then retire
                result = _error(repr(exc))
                result["retire"] = True
            # An unprivileged trainer's programs have the runner's uid outside, and prlimit/setpriority/
            # sched_setaffinity on another process need only that: the result stands, the runner is replaced.
            if _own_settings() != start_up or result["status"] == "sandbox_error":
                result["retire"] = True  # any failure of the sandbox itself: a fresh runner for the next job
        _send(out, (job["id"], result))
        if result.get("retire"):
            return


def main() -> None:
    config = pickle.loads(bytes.fromhex(sys.argv[1]))
    stdin = sys.stdin.buffer
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the trainer, which closes the sandbox
    if config["die_with_parent"]:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() == 1:
            os._exit(0)
    cgroups = dict(config["cgroups"])
    for path in sorted({path for path in cgroups.values() if path is not None}):
        try:
            _cgroup.join(path)  # before anything forks: R and every program start in it
        except OSError:
            cgroups = {controller: None if p == path else p for controller, p in cgroups.items()}
    root, uid = os.geteuid() == 0, os.geteuid()
    state = {"cgroup": cgroups["cpu"], "memory_cgroup": cgroups["memory"], "mode": "fallback", "root": root}
    state["extra_processes"] = 0
    try:  # the host's /proc, kept open for each program to set its own oom_score_adj (R's root has no /proc)
        state["proc"] = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        _send(out, ("unavailable", f"no /proc: {exc}", "isolation"))
        return
    state["work_root"] = config["fallback_dir"]
    state |= {"program_id": PROGRAM_ID, "program_uid": program_id_outside(os.getpid()) if root else uid}
    state |= {"landlock": 0, "readable": [f"/{name}" for name in ROOT_FOLDERS] + config["expose"]}
    try:
        state["mode"] = _unshare(stdin, out, config.get("no_namespaces", False))
    except OSError as exc:
        if not config["allow_fallback"]:
            _send(out, ("unavailable", str(exc), "namespaces"))
            return
        if not root:  # the program would run as the trainer's own user: its files, its processes, its secrets
            reason = f"{exc}; and the fallback needs a root trainer (it would run programs as your own user)"
            _send(out, ("unavailable", reason, "namespaces"))
            return
        state["unshare_error"] = str(exc)
        state["program_id"] = state["program_uid"]  # no user namespace: this runner's own uid, as is
        state["landlock"] = _landlock.abi_version()
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of a program come back to B, to be reaped
    try:  # by whether the program has an IPC namespace of its own (always, with namespaces)
        namespaces, accounted = state["mode"] == "namespaces", state["memory_cgroup"] is not None
        state["filters"] = {ipc: ProgramFilter(namespaces, accounted, private_ipc=ipc) for ipc in (True, False)}
    except OSError as exc:
        _send(out, ("unavailable", str(exc), "isolation"))
        return
    if state["mode"] == "namespaces":
        # Unprivileged, B and R share uid 65534 of the namespace with the programs and count towards its
        # process limit.
        state["extra_processes"] = 0 if root else 2
        child = os.fork()
        if child:  # B: wait for R, then leave with it
            os.close(stdin.fileno())
            _, wait_status = os.waitpid(child, 0)
            os._exit(os.waitstatus_to_exitcode(wait_status) & 0xFF)
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # R dies with B
        try:
            minimal_root(config["expose"], config["tmpfs"])
        except OSError as exc:
            _send(out, ("unavailable", f"filesystem isolation failed: {exc}", "isolation"))
            return
        # The runner's own tmpfs, invisible outside its mount namespace, replaced after each job.
        state["work_root"], state["tmpfs"] = "/tmp", config["tmpfs"]
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # programs (same uid when unprivileged) cannot ptrace or read R
    _serve(stdin, out, state)
