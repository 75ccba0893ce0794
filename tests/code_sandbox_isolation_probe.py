"""Test helper: the third red team's programs (issue 34), run in the sandbox; what each achieved, as JSON.

CPU time hidden in children that are never waited for, memory held outside every process (memfds, detached SysV
segments), the programs' standing with the OOM killer, a file lock as a channel between two programs of one batch,
an abstract Unix socket (and a port) as a channel from a dead program to the next, and `sync()`. Run by
tests/test_code_sandbox_isolation.py under the outer bounds of the adversarial tests, in each mode this machine
offers (namespaces or the fallback, with or without the runners' cgroups; as root and as an unprivileged user).
Every hostile program bounds itself: 300 MiB at most, two children, loops that end within 10 s. Written against
the sandbox's public API only, so that the same probe runs against an older version of it (how the tests were
shown to fail before the fix).

    python tests/code_sandbox_isolation_probe.py namespaces|fallback [--no-cgroup]
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewards import RewardArguments, get_reward_funcs  # noqa: E402
from rewards.code.sandbox import NamespacesUnavailable, Sandbox, SandboxLimits  # noqa: E402

CPU_LIMIT = 1.0  # code_timeout of the CPU scenario
CHILD_CPU = 0.7  # CPU seconds of each of its two children: 1.4 in all, each under its own RLIMIT_CPU
MEMORY_MB = 64  # code_memory_mb of the memory scenarios
HELD_MB = 300  # what the memory scenarios try to hold outside their processes: 20 x 15 MiB
SYNC_CALLS = {"x86_64": (162, 306)}.get(platform.machine(), (81, 267))  # sync, syncfs (aarch64, riscv64: generic)

UNWAITED_CHILDREN = (  # two children, one after the other, each busy CHILD_CPU s; the parent never calls wait()
    "import os, time\nfor _ in range(2):\n    r, w = os.pipe()\n    if os.fork() == 0:\n        os.close(r)\n"
    "        start = time.process_time()\n        while time.process_time() - start < %r:\n            pass\n"
    "        os._exit(0)\n    os.close(w)\n    os.read(r, 1)  # EOF when the child exits\n    os.close(r)\n"
    "print('done')\n"
)
MEMFDS = (  # 20 memfds of 15 MiB (each under code_max_file_mb), written, held by a process of ~10 MiB RSS
    "import os\nheld = 0\nchunk = b'x' * (1 << 20)\ntry:\n    fds = []\n    for n in range(20):\n"
    "        fd = os.memfd_create('m%d' % n)\n        for i in range(15):\n            os.pwrite(fd, chunk, i << 20)\n"
    "        fds.append(fd)\n        held += 15\n    print('held', held)\nexcept OSError as e:\n"
    "    print('refused after', held, e.errno)\n"
)
SYSV_SEGMENTS = (  # 20 SysV segments of 15 MiB, each written then detached (no longer in the address space)
    "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\nheld = 0\n"
    "for n in range(20):\n    sid = libc.shmget(0, 15 << 20, 0o1000 | 0o600)\n    if sid < 0:\n"
    "        print('refused after', held, ctypes.get_errno())\n        break\n"
    "    address = libc.shmat(sid, None, 0)\n    ctypes.memset(address, 1, 15 << 20)\n"
    "    libc.shmdt(ctypes.c_void_p(address))\n    held += 15\nelse:\n    print('held', held)\n"
)
LOWER_OOM_SCORE = (  # tries to leave the OOM killer's first place, then stays long enough to be looked at
    "import time\ntry:\n    open('/proc/self/oom_score_adj', 'w').write('0')\nexcept OSError:\n    pass\n"
    "time.sleep(2.0)\nprint('slept')\n"
)
LOCK_HOLDER = (  # every kind of lock on a read-only file of the minimal root, held 3 s
    "import fcntl, os, struct, time\nfd = os.open('/etc/passwd', os.O_RDONLY)\nheld = []\n"
    "for name, call in (('flock', lambda: fcntl.flock(fd, fcntl.LOCK_EX)),\n"
    "                   ('posix', lambda: fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack('hhqqi4x', 0, 0, 0, 0, 0))),\n"
    "                   ('ofd', lambda: fcntl.fcntl(os.open('/etc/passwd', os.O_RDONLY), 37,"
    " struct.pack('hhqqi4x', 0, 0, 0, 0, 0)))):\n"
    "    try:\n        call()\n        held.append(name)\n    except OSError:\n        pass\n"
    "time.sleep(3.0)\nprint('held', ' '.join(held) or 'nothing')\n"
)
LOCK_TESTER = (  # reads the bit: is /etc/passwd locked? (up to 3 s, while the holder runs beside it)
    "import fcntl, os, struct, time\nfd = os.open('/etc/passwd', os.O_RDONLY)\nwrite_lock = struct.pack("
    "'hhqqi4x', 1, 0, 0, 0, 0)\nlearnt = set()\nend = time.monotonic() + 3.0\n"
    "while time.monotonic() < end and not learnt:\n    try:\n        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    "        fcntl.flock(fd, fcntl.LOCK_UN)\n    except BlockingIOError:\n        learnt.add('flock')\n"
    "    except OSError:\n        pass\n    for name, command in (('posix', 5), ('ofd', 36)):\n        try:\n"
    "            if struct.unpack('hhqqi4x', fcntl.fcntl(fd, command, write_lock))[0] != 2:  # not F_UNLCK\n"
    "                learnt.add(name)\n        except OSError:\n            pass\n    time.sleep(0.05)\n"
    "print('learnt', ' '.join(sorted(learnt)) if learnt else 'nothing')\n"
)
LEAVE_SOCKETS = (  # abstract names (a listener; a socketpair's end, as in the fallback, where socket() is refused)
    # and a UDP port, kept alive after exit by an SCM_RIGHTS cycle in flight
    "import array, ctypes, socket\nlistener = port = None\ntry:\n    listener = socket.socket(socket.AF_UNIX)\n"
    "    listener.bind('\\0NAME')\n    listener.listen(8)\n"
    "    port = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n    port.bind(('0.0.0.0', PORT))\n"
    "except OSError:\n    pass\n"
    "d, _ = pair = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\nd.bind('\\0NAME-dgram')\n"
    "ctypes.CDLL(None).connect(d.fileno(), ctypes.c_char_p(bytes(16)), 16)  # AF_UNSPEC: unconnected, any sender\n"
    "a, b = socket.socketpair()\nfds = array.array('i', [a.fileno(), b.fileno(), *(s.fileno() for s in pair)])\n"
    "fds.extend(s.fileno() for s in (listener, port) if s is not None)\n"
    "a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])\nprint('left')\n"
)
FIND_SOCKETS = (  # the next program: is the listener still there, is the port still taken?
    "import socket\nfound = []\ntry:\n    s = socket.socket(socket.AF_UNIX)\n    s.connect('\\0NAME')\n"
    "    found.append('listener')\nexcept OSError:\n    pass\ntry:\n"
    "    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).bind(('0.0.0.0', PORT))\nexcept OSError as e:\n"
    "    if e.errno == 98:  # EADDRINUSE\n        found.append('port')\ntry:\n"
    "    socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendto(b'x', '\\0NAME-dgram')\n"
    "    found.append('dgram')\nexcept OSError:\n    pass\nprint(' '.join(found) or 'nothing')\n"
)
SYNC = (  # writeback of every dirty page of the host (sync), of one file system (syncfs)
    "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
    "done = []\nif libc.syscall(%d) == 0:\n    done.append('sync')\nfd = os.open('/etc', os.O_RDONLY)\n"
    "if libc.syscall(%d, fd) == 0:\n    done.append('syncfs')\nprint(' '.join(done) or 'refused')\n"
)

ORDINARY = (  # what programs do every day still works: fcntl's other commands, sqlite in memory; a file database
    # fails at once, with the refused lock's EPERM ("access permission denied", not a 5 s busy wait on "locked")
    "import fcntl, os, sqlite3\nr, w = os.pipe()\n"
    "fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_NONBLOCK)\n"
    "fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 16)\nos.close(fcntl.fcntl(r, fcntl.F_DUPFD_CLOEXEC, 10))\n"
    "db = sqlite3.connect(':memory:')\ndb.execute('create table t(x)')\nprint('in memory')\ntry:\n"
    "    sqlite3.connect('file.db').execute('create table t(x)')\nexcept sqlite3.OperationalError as e:\n"
    "    print('file:', e)\n"
)


def result_of(result) -> dict:
    return {"status": result.status, "stdout": result.text.strip(), "cpu_s": getattr(result, "cpu_s", None)}


def cpu_unwaited(report: dict, fallback: bool, python: str | None) -> None:
    """Two children use 1.4 CPU seconds under a 1.0 s limit, never waited for: through the sandbox (a wall limit
    far enough that the machine's load cannot decide) and through the `code` reward (its timeouts counter)."""
    program = UNWAITED_CHILDREN % CHILD_CPU
    with Sandbox(1, SandboxLimits(timeout=CPU_LIMIT, wall_timeout=10.0), fallback, python) as sandbox:
        report["cpu_unwaited"] = result_of(sandbox.run(program))
    settings = RewardArguments(
        code_timeout=CPU_LIMIT, code_num_workers=1, code_allow_network_fallback=fallback, code_python=python
    )
    (reward,) = get_reward_funcs(["code"], settings)
    try:
        (score,) = reward(
            completions=[f"```python\n{program}```"], verification_info=[[{"input": "", "output": "done"}]]
        )
        report["cpu_unwaited_reward"] = {"score": score, "timeouts": reward.last_report.counters["timeouts"]}
    finally:
        reward.func.sandbox.close()


def program_processes(uid: int) -> list[int]:
    """Processes of `uid` running a sandboxed program (`... main.py`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid and (entry / "cmdline").read_bytes().endswith(b"main.py\0"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def oom_scores(sandbox: Sandbox, report: dict) -> None:
    """The oom_score_adj of a running program (which tried to lower it), read from outside."""
    info = sandbox.runners[0].info
    uids = info.get("program_uids", [info.get("program_uid", os.geteuid())])  # a pool of them since issue 52
    seen: list[int] = []

    def look() -> None:
        end = time.monotonic() + 8.0
        while time.monotonic() < end and not seen:
            for pid in [pid for uid in uids for pid in program_processes(uid)]:
                try:
                    seen.append(int(Path(f"/proc/{pid}/oom_score_adj").read_text()))
                except OSError:
                    pass
            time.sleep(0.1)

    looker = threading.Thread(target=look)
    looker.start()
    result = sandbox.run(LOWER_OOM_SCORE)
    looker.join()
    report["oom_score_adj"] = {"seen": seen, **result_of(result)}


def memory(report: dict, fallback: bool, python: str | None) -> None:
    with Sandbox(1, SandboxLimits(timeout=5.0, memory_mb=MEMORY_MB), fallback, python) as sandbox:
        sandbox.start()
        report["memfds"] = result_of(sandbox.run(MEMFDS))
        report["sysv_segments"] = result_of(sandbox.run(SYSV_SEGMENTS))
        report["works_after_memory"] = sandbox.run("print('ok')").text.strip() == "ok"
        oom_scores(sandbox, report)


def locks(report: dict, fallback: bool, python: str | None) -> None:
    """Two programs of one batch, in two runners: one locks /etc/passwd every way it can, the other looks; the
    trainer (a host process) tries to lock the same file meanwhile."""
    blocked: list[bool] = []

    def host_tries() -> None:
        time.sleep(1.5)
        with open("/etc/passwd") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
                blocked.append(False)
            except BlockingIOError:
                blocked.append(True)

    with Sandbox(2, SandboxLimits(timeout=5.0), fallback, python) as sandbox:
        sandbox.start()
        host = threading.Thread(target=host_tries)
        host.start()
        holder, tester = sandbox.run_many([(LOCK_HOLDER, ""), (LOCK_TESTER, "")])
        host.join()
    report["lock_holder"], report["lock_tester"] = result_of(holder), result_of(tester)
    report["host_lock_blocked"] = blocked == [True]


def sockets_left(report: dict, fallback: bool, python: str | None) -> None:
    """Six times: a program leaves an abstract listener and a bound UDP port in flight; the next one, on the same
    runner, looks for them."""
    found = []
    with Sandbox(1, SandboxLimits(timeout=5.0), fallback, python) as sandbox:
        for trial in range(6):
            name, port = f"drgrpo-probe-{os.getpid()}-{trial}", 40000 + (os.getpid() + trial) % 20000
            left = sandbox.run(LEAVE_SOCKETS.replace("NAME", name).replace("PORT", str(port)))
            after = sandbox.run(FIND_SOCKETS.replace("NAME", name).replace("PORT", str(port)))
            found.append({"left": left.text.strip(), "found": after.text.strip()})
    report["sockets_left"] = found


def sync(report: dict, fallback: bool, python: str | None) -> None:
    with Sandbox(1, SandboxLimits(timeout=5.0), fallback, python) as sandbox:
        report["sync"] = result_of(sandbox.run(SYNC % SYNC_CALLS))
        report["ordinary"] = result_of(sandbox.run(ORDINARY))


def main() -> None:
    """Arguments: `namespaces` or `fallback` (simulates a kernel without namespaces, allows the fallback);
    `--no-cgroup`: simulates a machine without writable cgroups (DRGRPO_SANDBOX_NO_CGROUP=1)."""
    fallback = sys.argv[1] == "fallback"
    if fallback:
        os.environ["DRGRPO_SANDBOX_NO_NAMESPACES"] = "1"
    if "--no-cgroup" in sys.argv[2:]:
        os.environ["DRGRPO_SANDBOX_NO_CGROUP"] = "1"
    python = "/usr/bin/python3" if fallback else None  # no mount namespace: a Python that any uid can run
    report: dict = {}
    with Sandbox(1, SandboxLimits(), fallback, python) as sandbox:
        try:
            sandbox.start()
        except NamespacesUnavailable as exc:
            print(json.dumps({"unavailable": str(exc)}))
            return
        info = sandbox.runners[0].info
        report["mode"] = sandbox.mode
        report["uid"] = info.get("uid")
        report["cgroups"] = {key: info.get(key) for key in ("cgroup", "memory_cgroup")}
    for scenario in (cpu_unwaited, memory, locks, sockets_left, sync):
        scenario(report, fallback, python)
    print(json.dumps(report))


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    main()
