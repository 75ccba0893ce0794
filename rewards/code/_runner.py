"""The sandbox runner: a process that sets up the isolation once, then runs programs one at a time.

Started by `rewards.code.sandbox` as `python -I -c "...; main()"` with an empty environment. Protocol (both ways):
4-byte big-endian length + pickle, as in `rewards._worker`. In order:

1. `B` (this process) unshares a user, mount, network and pid namespace. Unprivileged, it maps its own uid/gid to
   65534 inside; as root it asks the parent (`("map", pid)`) to write the map `0 0 1` + `100000 <its own ids> 63`
   (only a process with CAP_SETUID outside may map several ids; `rewards.code._leftovers.program_ids_outside`: a
   pool of ids of this runner's own, one per program in turn), and waits for `("mapped",)`.
2. `B` forks `R`, pid 1 of the new pid namespace (so that `kill(-1)` from `R` reaches exactly the programs, and every
   program dies with `R`), and waits for it. `R` builds a minimal read-only root (`rewards.code._filesystem`:
   `/usr`, `/lib*`, `/etc`, the interpreters' folders, a few devices; no `/tmp`, `/var`, `/run`, `/dev/shm`,
   `/home` of the host), `pivot_root`s into it and answers `("ready", info)`.
3. Before each job (after answering the last), `R` prepares the next program's slot (`rewards.code._program`): `I`,
   pid 1 of a new pid namespace, joins the next of the runner's program memory cgroups, unshares a mount namespace,
   mounts an empty tmpfs on `/tmp` with the work folder `/tmp/work` in it, and forks the program's process `P` (pid
   2; own session, network and IPC namespaces, and a root trainer's its own user namespace, where 65534 is the next
   of the runner's uids outside; oom_score_adj 1000), which waits for the job. Per job `(job_id, program, stdin,
   limits)`: `R` checks that the slot's memory cgroup holds nothing an earlier program left
   (`rewards.code._leftovers`) and sends the job; `P` becomes uid/gid 65534 (no capabilities, no new privileges),
   writes the program and its stdin (a memfd), sets the rlimits, a fresh session keyring and the seccomp filter and
   execs the program in a clean environment; `I` reaps every process of its namespace, kills what is left once the
   program exits and reports its wait status; `R` reads stdout/stderr up to the output limit, kills `I` (hence the
   whole namespace) on timeout or overflow, reaps it (its CPU time includes every process it reaped: the program's),
   answers `(job_id, result)`, and releases a Unix socket of its own so that the kernel collects what the program
   left in flight. The namespaces and the tmpfs die with `I`: no pid, inode, file or folder name carries anything
   from one program to the next, and what it leaves in the kernel is charged to its own cgroup and uid. After an
   error of its own, or when its own limits changed, the answer carries `retire` and `R` exits: the trainer starts
   another runner (and runs the job again when `rerun` says it never ran).

Without namespaces (kernel or container forbids them) and `allow_fallback`, `B` runs the jobs itself: the program
drops to one of `B`'s own uids, in turn (`B` must be root: the fallback is refused otherwise), under the filter (no
socket() at all) and Landlock where the kernel has it, but in the pid namespace and file system of the host, in a
work folder of a random name (`rewards.code._fallback`, docs/code-rewards.md). A program's output and verdict:
`rewards.code._outcome`.
Nothing here imports beyond the standard library (and this package's own modules).
"""

from __future__ import annotations

import ctypes
import errno
import os
import pickle
import resource
import signal
import struct
import sys
import time

from rewards.code import _cgroup, _landlock
from rewards.code._fallback import run_job as fallback_job
from rewards.code._filesystem import ROOT_FOLDERS, minimal_root
from rewards.code._leftovers import POOL_IDS_INSIDE, RunnerMemory, program_ids_outside, wake_unix_gc
from rewards.code._outcome import error_result, read_output, verdict
from rewards.code._program import (
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    PR_SET_DUMPABLE,
    PROGRAM_ID,
    STATUS,
    Slot,
    check,
    prepare_slot,
)
from rewards.code._seccomp import ProgramFilter

_HEADER = struct.Struct(">I")
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36

_libc = ctypes.CDLL(None, use_errno=True)


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
    check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID), "unshare")
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


def run_job(job: dict, state: dict) -> dict:
    """Run one program under the job's limits; the result dict of `rewards.code.sandbox.RunResult`."""
    if state["mode"] == "namespaces":
        _reap_exited(state)
        slot = state.pop("slot", None) or prepare_slot(state)
        try:
            return _run_in_slot(job, slot, state)
        finally:
            slot.close()
            if slot.init is not None:
                state["exiting"].append(slot.init)  # it reported: it exits now
    return fallback_job(job, state, memory_not_back)


def _reap_exited(state: dict) -> None:
    """The inits of earlier programs that have exited (the last one tears its namespaces down meanwhile, off the
    critical path): reaped, never waited for."""
    state["exiting"] = [init for init in state.get("exiting", []) if os.waitpid(init, os.WNOHANG)[0] == 0]


def memory_not_back() -> dict:
    """The answer to a job that did not run: what an earlier program left in its memory cgroup did not come back
    (`rewards.code._leftovers`); the runner retires and the trainer runs the job again on a fresh runner."""
    message = "sandbox: an earlier program's memory did not come back to this runner; the job runs on a fresh one"
    return {**error_result(message), "retire": True, "rerun": True}


def _run_in_slot(job: dict, slot: Slot, state: dict) -> dict:
    """R's side of one program in its slot: send the job to I, prepare the next slot while the program runs, read
    the output, and I's report (the program's wait status and CPU time)."""
    failure = slot.ready(state)
    if failure is not None:
        return error_result(failure)
    if state["memory"] is not None and not state["memory"].drained(lambda: _reap_exited(state)):
        return memory_not_back()
    start = time.monotonic()
    try:
        with os.fdopen(os.dup(slot.fds["job"]), "wb") as job_w:
            pickle.dump(job, job_w, protocol=pickle.HIGHEST_PROTOCOL)
    except BrokenPipeError:
        pass  # I died before reading it: read below like any other end
    os.close(slot.fds.pop("job"))
    state["slot"] = prepare_slot(state)  # the next program's namespaces, made while this one runs
    limits = job["limits"]
    status, stdout, stderr = read_output(slot.fds.pop("out"), slot.fds.pop("err"), slot.fds["report"], limits, start)
    report = os.read(slot.fds["report"], STATUS.size) if status == "ok" else b""
    if len(report) == STATUS.size:
        wait_status, cpu = STATUS.unpack(report)
    else:
        # Killed: the wall or output limit (here), or I itself died (the OOM killer), and every process of the
        # namespace with it. Its CPU time is I's usage: the kernel reaps the namespace's processes into it.
        os.kill(slot.init, signal.SIGKILL)
        _, _, usage = os.wait4(slot.init, 0)
        slot.init, wait_status, cpu = None, signal.SIGKILL, usage.ru_utime + usage.ru_stime
    result = {"status": status, "stdout": stdout, "stderr": stderr, "wall_s": time.monotonic() - start, "cpu_s": cpu}
    verdict(result, None if wait_status < 0 else wait_status, limits)
    failure = os.read(slot.fds["failed"], 4096)
    if failure:
        result.update(status="sandbox_error", stderr=failure)
    return result


def _own_settings() -> tuple:
    """What a program of the same uid could change in this process from outside: rlimits, nice value, CPUs."""
    limits = tuple(resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource)) if n.startswith("RLIMIT_"))
    return limits, os.getpriority(os.PRIO_PROCESS, 0), tuple(sorted(os.sched_getaffinity(0)))


def _serve(stdin, out, state: dict) -> None:
    """Answer jobs until the trainer closes stdin, or until the runner itself may be damaged: after an error of its
    own, it answers `retire` and exits, so that the trainer replaces it instead of sending it more jobs."""
    info = {"mode": state["mode"], "pid_namespace": os.getpid() == 1, "uid": os.geteuid()}
    info |= {"program_uid": state["program_uids"][0], "program_uids": state["program_uids"]}
    info |= {"landlock": state["landlock"], "cgroup": state["cgroup"], "memory_cgroup": state["memory_cgroup"]}
    _send(out, ("ready", info))
    start_up = _own_settings()
    if state["mode"] == "namespaces":
        state["slot"] = prepare_slot(state)
    while True:
        job = _receive(stdin)
        if job is None:
            return
        if _own_settings() != start_up:
            result = error_result(f"the runner's own limits changed: {_own_settings()} (started with {start_up})")
            result["retire"] = True
        else:
            try:
                result = run_job(job, state)
            except Exception as exc:  # noqa: BLE001 - an error of the sandbox itself: this job's answer, then retire
                result = error_result(repr(exc))
                result["retire"] = True
            # An unprivileged trainer's programs have the runner's uid outside, and prlimit/setpriority/
            # sched_setaffinity on another process need only that: the result stands, the runner is replaced.
            if _own_settings() != start_up or result["status"] == "sandbox_error":
                result["retire"] = True  # any failure of the sandbox itself: a fresh runner for the next job
        _send(out, (job["id"], result))
        if result.get("retire"):
            return
        wake_unix_gc()  # what the program left in flight is freed now, while the trainer reads the answer


def _join_cgroups(cgroups: dict) -> dict:
    """Join the runner's cgroups (`rewards.code._cgroup`; before anything forks: R and every program start in them);
    the state entries: `cgroup` (CPU), `memory_cgroup`, and `memory` (`RunnerMemory`, read before each program; None
    without a memory cgroup, where the filter refuses what only one would see)."""
    cgroups = dict(cgroups)
    for path in sorted({path for path in cgroups.values() if path is not None}):
        try:
            _cgroup.join(path)
        except OSError:
            cgroups = {controller: None if p == path else p for controller, p in cgroups.items()}
    memory = None
    if cgroups["memory"] is not None:
        try:
            memory = RunnerMemory(cgroups["memory"])
        except OSError:
            cgroups["memory"] = None
    return {"cgroup": cgroups["cpu"], "memory_cgroup": cgroups["memory"], "memory": memory}


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
    root, uid = os.geteuid() == 0, os.geteuid()
    state = {"mode": "fallback", "root": root, "extra_processes": 0, **_join_cgroups(config["cgroups"])}
    try:  # the host's /proc, kept open for each program to set its own oom_score_adj (R's root has no /proc)
        state["proc"] = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        _send(out, ("unavailable", f"no /proc: {exc}", "isolation"))
        return
    state["work_root"] = config["fallback_dir"]
    # Each program's uid, in turn (rewards.code._leftovers): as the runner's namespace names them (a root trainer's
    # map them to program_ids_outside), or, unprivileged, the one uid the kernel lets it map.
    outside = list(program_ids_outside(os.getpid())) if root else [uid]
    state |= {"program_uids": outside, "program_ids": [POOL_IDS_INSIDE + i for i in range(len(outside))]}
    if not root:
        state["program_ids"] = [PROGRAM_ID]
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
        state["program_ids"] = state["program_uids"]  # no user namespace: the runner's own uids, as they are
        state["landlock"] = _landlock.abi_version()
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of a program come back to B, to be reaped
    try:  # by whether the program has an IPC namespace of its own (always, with namespaces)
        namespaces, accounted = state["mode"] == "namespaces", state["memory"] is not None
        # Unix sockets only where each program has a uid of its own: a file left in flight counts against its uid.
        options = {"accounted_memory": accounted, "unix_sockets": len(state["program_uids"]) > 1}
        state["filters"] = {ipc: ProgramFilter(namespaces, private_ipc=ipc, **options) for ipc in (True, False)}
    except OSError as exc:
        _send(out, ("unavailable", str(exc), "isolation"))
        return
    if state["mode"] == "namespaces":
        # Unprivileged, B, R, the program's init I, the next program's init and process, and the last one's init
        # (exiting) share uid 65534 of the namespace with the programs and count towards its process limit.
        state["extra_processes"] = 0 if root else 6
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
        # Each program's /tmp is a tmpfs of these options in its own mount namespace (rewards.code._program).
        state["tmpfs"] = config["tmpfs"]
        # R's own pid namespace, to which its children return after each program's (rewards.code._program).
        state["pid_namespace"] = os.open("thread-self/ns/pid", os.O_RDONLY | os.O_CLOEXEC, dir_fd=state["proc"])
        state["user_namespaces"] = {}  # a root trainer's: index in the uid pool -> its user namespace (kept)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # programs (same uid when unprivileged) cannot ptrace or read R
    _serve(stdin, out, state)
