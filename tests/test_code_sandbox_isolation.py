"""The third red team (issue 34): CPU time hidden in children never waited for, memory no limit saw, a file lock
between two programs of one batch, an abstract socket (and a port) from a dead program to the next, `sync()`.

The programs run in tests/code_sandbox_isolation_probe.py under the outer bounds of the adversarial tests, in every
mode this machine offers: namespaces and the fallback, each with and without the runners' cgroups (as root), and
an unprivileged trainer. Each check below failed on the sandbox before issue 34 (the probe ran against it: see the
commit message) and passes now. The last tests check the seccomp filter's decisions on every architecture it
knows, by running its BPF program on made-up system calls.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from conftest import skip_unless_required
from test_code_sandbox_adversarial import run_probe_as_user, run_probe_in_mode

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "code_sandbox_isolation_probe.py"
CHILD_CPU = 0.7  # the probe's: CPU seconds of each of the two children, under a limit of 1.0 s
MODES = {
    "namespaces": ["namespaces"],
    "namespaces, no cgroup": ["namespaces", "--no-cgroup"],
    "fallback": ["fallback"],
    "fallback, no cgroup": ["fallback", "--no-cgroup"],
}


def check_report(report: dict) -> None:
    """What every mode must show (see the probe for the programs)."""
    # 1. CPU time of children never waited for counts: a timeout, and the reward counts it as one.
    cpu = report["cpu_unwaited"]
    assert cpu["status"] == "timeout" and cpu["cpu_s"] >= 1.8 * CHILD_CPU, cpu
    assert report["cpu_unwaited_reward"] == {"score": 0.0, "timeouts": 1}, report["cpu_unwaited_reward"]
    # 2. 300 MiB of memfds, or of detached SysV segments, under code_memory_mb 64: killed inside the runner's
    # memory cgroup, or refused where there is none; and the program is the OOM killer's first choice.
    for name in ("memfds", "sysv_segments"):
        entry = report[name]
        if report["cgroups"]["memory_cgroup"]:
            assert entry["status"] == "crash" and "held" not in entry["stdout"], (name, entry)
        else:
            assert entry["stdout"] == f"refused after 0 {errno.EPERM}", (name, entry)
    assert report["works_after_memory"]
    assert report["oom_score_adj"]["seen"] == [1000], report["oom_score_adj"]  # although it tried to lower it
    # 3. No file lock between two programs of one batch, nor on a host process; no socket name or port from a
    # dead program for the next one of its runner.
    assert report["lock_holder"]["stdout"] == "held nothing", report["lock_holder"]
    assert report["lock_tester"]["stdout"] == "learnt nothing", report["lock_tester"]
    assert report["host_lock_blocked"] is False
    # (An unprivileged trainer's programs share its uid, so since issue 52 they get no Unix socket at all: nothing
    # to leave in flight, and the program stops before it prints "left".)
    left = "left" if report["uid"] == 0 else ""
    assert [trial["left"] for trial in report["sockets_left"]] == [left] * 6, report["sockets_left"]
    assert [trial["found"] for trial in report["sockets_left"]] == ["nothing"] * 6, report["sockets_left"]
    # 4. No writeback of the host's dirty pages.
    assert report["sync"]["stdout"] == "refused", report["sync"]
    # And what programs do every day still works (other fcntl commands, sqlite in memory); a file database fails at
    # once (the fallback's Landlock lets a program create no file at all), never after a busy wait on "locked".
    files = ("file: access permission denied", "file: unable to open database file")
    assert report["ordinary"]["stdout"] in [f"in memory\n{line}" for line in files], report["ordinary"]


@pytest.fixture(scope="module", params=list(MODES))
def report(request) -> dict:
    mode = MODES[request.param]
    result = run_probe_in_mode(PROBE, mode)
    if "--no-cgroup" in mode:
        assert result["cgroups"] == {"cgroup": None, "memory_cgroup": None}
    return {**result, "simulates_no_cgroup": "--no-cgroup" in mode}


def test_no_cpu_memory_channel_or_host_effect_escapes_the_limits(report):
    check_report(report)


def test_root_runners_get_a_memory_cgroup_where_the_machine_allows_one(report):
    from rewards.code._cgroup import controller_folder

    if report["simulates_no_cgroup"]:  # DRGRPO_SANDBOX_NO_CGROUP=1: the runners must go without, and say so
        assert report["cgroups"]["memory_cgroup"] is None, report["cgroups"]
        return
    found = controller_folder("memory")
    if os.geteuid() != 0 or found is None or not os.access(found[0], os.W_OK):
        skip_unless_required(
            "cgroups", f"no writable cgroup folder for the memory controller here ({found}): the runners go without"
        )
    assert report["cgroups"]["memory_cgroup"].startswith(found[0]), report["cgroups"]
    assert not os.path.exists(report["cgroups"]["memory_cgroup"])  # removed with the sandbox


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become a user")
def test_the_same_holds_for_an_unprivileged_trainer(unprivileged_tree):
    result = run_probe_as_user(unprivileged_tree, PROBE.name, "namespaces")
    assert result["mode"] == "namespaces"
    check_report(result)


# -- the filter's decisions, on every architecture it knows ------------------------------------------------------

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7, "riscv64": 0xC00000F3}
# Numbers from the kernel's tables, written out here rather than taken from the filter's module: x86_64
# (arch/x86/entry/syscalls/syscall_64.tbl), aarch64 and riscv64 (include/uapi/asm-generic/unistd.h).
NUMBERS = {
    "x86_64": {"sync": 162, "syncfs": 306, "flock": 73, "fcntl": 72, "inotify_init1": 294, "memfd_create": 319}
    | {"shmget": 29, "semget": 64, "read": 0, "fsync": 74, "fanotify_init": 300, "perf_event_open": 298}
    | {"socket": 41, "socketpair": 53},
    "aarch64": {"sync": 81, "syncfs": 267, "flock": 32, "fcntl": 25, "inotify_init1": 26, "memfd_create": 279}
    | {"shmget": 194, "semget": 190, "read": 63, "fsync": 82, "fanotify_init": 262, "perf_event_open": 241}
    | {"socket": 198, "socketpair": 199},
}
NUMBERS["riscv64"] = NUMBERS["aarch64"]
ALLOW, KILL = 0x7FFF0000, 0x80000000


def run_filter(program: list[tuple], machine: str, nr: int, *args: int) -> int:
    """What the classic BPF `program` returns for system call `nr` with `args` (the few opcodes it uses)."""
    data = {0: nr, 4: AUDIT_ARCH[machine], **{16 + 8 * i: a for i, a in enumerate(args)}}
    accumulator, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        pc += 1
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            accumulator = data.get(k, 0)
        elif code in (0x15, 0x35, 0x45):  # JEQ, JGE, JSET (BPF_K)
            taken = {0x15: accumulator == k, 0x35: accumulator >= k, 0x45: bool(accumulator & k)}[code]
            pc += jt if taken else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"opcode {code:#x}")


@pytest.mark.parametrize("machine", list(AUDIT_ARCH))
def test_the_filter_refuses_host_effects_and_locks_and_keeps_ordinary_calls(machine):
    from rewards.code._seccomp import program_filter

    program, n = program_filter(True, machine), NUMBERS[machine]
    eperm = 0x50000 | errno.EPERM
    for name in ("sync", "syncfs", "inotify_init1", "fanotify_init", "perf_event_open"):
        assert run_filter(program, machine, n[name]) == eperm, name
    assert run_filter(program, machine, n["flock"], 3, 2) == eperm  # LOCK_EX
    # F_GETLK, F_SETLK, F_SETLKW, the F_OFD_ ones; F_SETLEASE, F_GETLEASE, F_NOTIFY
    for command in (5, 6, 7, 36, 37, 38, 1024, 1025, 1026):
        assert run_filter(program, machine, n["fcntl"], 3, command) == eperm, command
    for command in (0, 1, 2, 3, 4, 1030, 1031, 1033):  # F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, ..., seals
        assert run_filter(program, machine, n["fcntl"], 3, command) == ALLOW, command
    for name in ("read", "fsync", "memfd_create", "shmget", "semget"):  # memory accounted, IPC namespace private
        assert run_filter(program, machine, n[name], 0, 0) == ALLOW, name
    unaccounted = program_filter(True, machine, accounted_memory=False)
    assert run_filter(unaccounted, machine, n["memfd_create"]) == eperm
    assert run_filter(unaccounted, machine, n["shmget"]) == eperm
    assert run_filter(unaccounted, machine, n["semget"]) == ALLOW  # a few bytes each, in the program's namespace
    shared_ipc = program_filter(False, machine, private_ipc=False)
    assert run_filter(shared_ipc, machine, n["semget"]) == eperm
    assert run_filter(program, machine, n["read"] | 0x40000000) == (KILL if machine == "x86_64" else ALLOW)  # x32


@pytest.mark.parametrize("machine", list(AUDIT_ARCH))
def test_without_a_uid_per_program_the_filter_refuses_unix_sockets(machine):
    """Issue 52: a file sent over a Unix socket and left in flight outlives its program, counted against its uid;
    where programs share one uid (an unprivileged trainer) they get no Unix socket, by socket() or socketpair()."""
    import socket

    from rewards.code._seccomp import program_filter

    n, refused = NUMBERS[machine], 0x50000 | errno.EAFNOSUPPORT
    shared_uid = program_filter(True, machine, unix_sockets=False)
    assert run_filter(shared_uid, machine, n["socket"], socket.AF_UNIX) == refused
    assert run_filter(shared_uid, machine, n["socketpair"], socket.AF_UNIX) == refused
    assert run_filter(shared_uid, machine, n["socket"], socket.AF_INET) == ALLOW  # its own network namespace
    own_uid = program_filter(True, machine)
    assert run_filter(own_uid, machine, n["socket"], socket.AF_UNIX) == ALLOW
    assert run_filter(own_uid, machine, n["socketpair"], socket.AF_UNIX) == ALLOW
