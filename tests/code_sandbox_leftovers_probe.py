"""Test helper: the fifth red team's programs (issue 52), run in the sandbox; what each achieved, as JSON.

What a program leaves in the kernel after its last process, for the next program of its runner: files kept "in
flight" by a cycle of Unix sockets that hold each other in their queues (no process holds them, so nothing is
released at exit: they stay until the kernel's Unix-socket collector runs), charged to the memory cgroup the next
program runs in; and the per-uid counters those files hold (pipe buffer pages against `fs.pipe-user-pages-soft`,
in-flight descriptors against the sender's `RLIMIT_NOFILE`: `ETOOMANYREFS`), which carry a bit to the next program
of the same uid outside. Run by tests/test_code_sandbox_leftovers.py under the outer bounds of the adversarial
tests, in each mode this machine offers (namespaces or the fallback, with or without the runners' cgroups; as root
and as an unprivileged user). Every hostile program bounds itself: 300 MiB, 87 pipes, 12 programs. Written against
the sandbox's public API (and the cgroup folder its runners report), so that the same probe runs against an older
version of it (how the tests were shown to fail before the fix).

    python tests/code_sandbox_leftovers_probe.py namespaces|fallback [--no-cgroup]
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewards.code.sandbox import NamespacesUnavailable, Sandbox, SandboxLimits  # noqa: E402
from rewards.code.tool import PythonTool  # noqa: E402

MEMORY_MB = 256  # code_memory_mb of the memory scenario: a limit of 256 + 64 (its /tmp) + 64 MiB
HELD_MB = 300  # what the leaking program leaves in flight: 20 memfds of 15 MiB (each under code_max_file_mb)
NEEDED_MB = 150  # what the correct program after it writes: far within its limit, not beside 300 MiB of leftovers
BITS = (1, 0, 1, 1, 0, 1)  # what the sender tries to tell the receiver, one program pair per bit

LEAK = (  # 20 memfds of 15 MiB sent over a socketpair, then the pair into its own queue: a cycle no process holds
    "import array, os, socket\na, b = socket.socketpair()\nchunk = b'x' * (1 << 20)\nfor n in range(20):\n"
    "    fd = os.memfd_create('m%d' % n)\n    for i in range(15):\n        os.pwrite(fd, chunk, i << 20)\n"
    "    a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [fd]))])\n    os.close(fd)\n"
    "a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [a.fileno(), b.fileno()]))])\n"
    "print('left', 20 * 15)\n"
)
NEEDS = f"data = b'x' * ({NEEDED_MB} << 20)\nprint(len(data) >> 20)\n"  # a correct program that needs its memory
SEND = (  # bit 1: 87 pipes (each of 1 MiB while allowed) and the socketpair itself in flight, as one cycle
    "import array, fcntl, os, socket\na, b = socket.socketpair()\n"
    "def send(fds):\n    a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', fds))])\n"
    "for batch in range(3):\n    pipes = [os.pipe() for _ in range(29)]\n    for r, w in pipes:\n        try:\n"
    "            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)\n        except OSError:\n            pass\n"
    "    send([r for r, w in pipes])\n    for r, w in pipes:\n        os.close(r)\n        os.close(w)\n"
    "    if batch == 1:\n        send([a.fileno(), b.fileno()])\nprint('sent')\n"
)
IDLE = "print('idle')\n"  # bit 0
RECEIVE = (  # reads both counters: may it have a pipe of 1 MiB, may it send one descriptor?
    "import array, errno, fcntl, os, socket\nr, w = os.pipe()\ntry:\n    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)\n"
    "    pipes = 0\nexcept OSError:\n    pipes = 1\ntry:\n    a, b = socket.socketpair()\nexcept OSError:\n"
    "    print(pipes, 'refused')\nelse:\n    try:\n"
    "        a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [r]))])\n"
    "        print(pipes, 0)\n    except OSError as e:\n        print(pipes, int(e.errno == errno.ETOOMANYREFS))\n"
)


def result_of(result) -> dict:
    return {"status": result.status, "stdout": result.text.strip(), "exit_code": result.exit_code}


def memory_held_mb(sandbox: Sandbox) -> list[int | None]:
    """MiB charged to each runner's memory cgroup; None where a runner has none."""
    held = []
    for runner in sandbox.runners:
        folder = runner.info.get("memory_cgroup")
        names = [] if folder is None else ["memory.usage_in_bytes", "memory.current"]
        found = [Path(folder, name) for name in names if os.path.exists(os.path.join(folder, name))]
        held.append(int(found[0].read_text()) >> 20 if found else None)
    return held


def in_flight_memory(report: dict, fallback: bool, python: str | None) -> None:
    """The leak, then three correct programs that need half the limit each; then what the runner still holds."""
    limits = SandboxLimits(timeout=5.0, memory_mb=MEMORY_MB)
    with Sandbox(1, limits, fallback, python) as sandbox:
        sandbox.start()
        report["leak"] = result_of(sandbox.run(LEAK))
        report["after_leak"] = [result_of(sandbox.run(NEEDS)) for _ in range(3)]
        report["held_mb"] = memory_held_mb(sandbox)


def in_flight_through_the_tool(report: dict, fallback: bool, python: str | None) -> None:
    """The same through the Python tool: one leaking call, then three correct ones (A12)."""
    with Sandbox(1, SandboxLimits(timeout=5.0, memory_mb=MEMORY_MB), fallback, python) as sandbox:
        tool = PythonTool(sandbox)
        tool.run_many([LEAK])
        report["tool_after_leak"] = [tool.run_many([NEEDS])[0].output for _ in range(3)]


def uid_counters(report: dict, fallback: bool, python: str | None) -> None:
    """Six bits, each a sender (or an idle program) followed by a receiver on the same runner."""
    received = []
    with Sandbox(1, SandboxLimits(timeout=5.0), fallback, python) as sandbox:
        for bit in BITS:
            sent = sandbox.run(SEND if bit else IDLE)
            read = sandbox.run(RECEIVE)
            received.append({"bit": bit, "sent": result_of(sent), "read": result_of(read)})
    report["uid_counters"] = received


WHO = "import os, time\nprint(os.getuid(), os.getgid())\ntime.sleep(0.6)\n"  # looked at from outside meanwhile


def uids_in_turn(report: dict, fallback: bool, python: str | None) -> None:
    """Three programs in a row on one runner: the uid each has inside (what it prints) and outside (what the host's
    /proc says while it sleeps); with namespaces and a pool of uids, three more after the pool came round (the
    runner's start-up check was the first program, then these three, then enough quick ones to wrap): the same uids
    outside again, each program in the user namespace the first of its uid made."""
    with Sandbox(1, SandboxLimits(timeout=5.0), fallback, python) as sandbox:
        sandbox.start()
        info = sandbox.runners[0].info
        pool = info.get("program_uids", [info.get("program_uid")])  # a pool of them since issue 52
        inside, outside = [], []
        for number in range(6 if len(pool) > 1 and not fallback else 3):
            if number == 3:
                sandbox.run_many([("pass", "")] * (len(pool) - 3))
            seen: list[int] = []
            looker = threading.Thread(target=lambda seen=seen: seen.extend(running_program_uids(pool, 3.0)))
            looker.start()
            inside.append(sandbox.run(WHO).text.strip())
            looker.join()
            outside.append(sorted(set(seen)))
        report["uids"] = {"inside": inside, "outside": outside, "pool": pool}


def running_program_uids(pool: list[int], wait_s: float) -> list[int]:
    """The real uids, of `pool`, of the sandboxed programs (`... main.py`) running now, looked for up to `wait_s`."""
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and (entry / "cmdline").read_bytes().endswith(b"main.py\0"):
                    uid = int((entry / "status").read_text().split("\nUid:")[1].split()[0])
                    found += [uid] if uid in pool else []
            except (OSError, IndexError):  # the process ended between the listing and the read: not a program now
                continue
        if found:
            return found
        time.sleep(0.02)
    return []


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
        report["memory_cgroup"] = info.get("memory_cgroup")
        report["uid"] = info.get("uid")
    for scenario in (in_flight_memory, in_flight_through_the_tool, uid_counters, uids_in_turn):
        scenario(report, fallback, python)
    print(json.dumps(report))


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    main()
