"""Test helper: the second red team's programs (issue 22), run in the sandbox; what each achieved, as JSON.

What namespaces alone do not isolate: kernel keyrings, socket families that are not network-namespaced (vsock),
io_uring, new namespaces of a program's own, the CPU (a neighbour's `setsid` fork flood), inodes; and, in the
fallback (no namespaces), reading test cases, signalling other processes of the programs' uid, sharing its process
count. Run by tests/test_code_sandbox_kernel.py under outer bounds (`prlimit`, a timeout, a process-group kill),
as root and as an unprivileged user. Every hostile program bounds itself (hundreds of keys, files or processes
at most; loops that end within 10 s). Written against the sandbox's public API only, so that the same probe runs
against an older version of it (how the tests were shown to fail before the fix).

    python tests/code_sandbox_kernel_probe.py namespaces|fallback
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewards.code.sandbox import NamespacesUnavailable, Sandbox, SandboxLimits  # noqa: E402

# add_key, keyctl (x86_64; aarch64/riscv64 share the generic table)
KEY_CALLS = {"x86_64": (248, 250), "aarch64": (217, 219), "riscv64": (217, 219)}[platform.machine()]
KEYCTL_JOIN, KEYCTL_LINK, KEYCTL_SET_TIMEOUT, KEYCTL_INVALIDATE = 1, 8, 15, 21
SESSION, USER = -3, -4
SECRET = "drgrpo-keyring-secret-9c2a"
TIMEOUT = 2.0
MAX_FILES_DEFAULT = 10_000  # docs/code-rewards.md: the files a program may create by default
NOBODY = 65534

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

KEY_HELPERS = (  # the programs' own ctypes access to the key system calls
    "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
    f"ADD_KEY, KEYCTL = {KEY_CALLS}\n"
    "def add(desc, payload, ring):\n    return libc.syscall(ADD_KEY, b'user', desc, payload, len(payload), ring)\n"
    "def read(key):\n    buf = ctypes.create_string_buffer(256)\n    n = libc.syscall(KEYCTL, 11, key, buf, 256)\n"
    "    return buf.raw[:n].decode(errors='replace') if n > 0 else ''\n"
    "def search(ring, desc):\n    return libc.syscall(KEYCTL, 10, ring, b'user', desc, 0)\n"
)


def add_key(description: str, payload: str, ring: int) -> int:
    data = payload.encode()
    key = _libc.syscall(KEY_CALLS[0], b"user", description.encode(), data, len(data), ring)
    if key < 0:
        raise OSError(ctypes.get_errno(), f"add_key {description}")
    return key


def keyctl(*args) -> int:
    return _libc.syscall(KEY_CALLS[1], *args)


def program_uids(sandbox: Sandbox) -> list:
    return [runner.info.get("program_uid") for runner in sandbox.runners]


def processes_of_uid(uid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def as_nobody(command: list[str]) -> subprocess.Popen:
    """A host process of uid 65534 ("nobody"), like those of other services on a shared machine."""
    user = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
    return subprocess.Popen(user + command, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def nobody_can_add_a_key() -> bool:
    """Whether a host process of uid 65534 can still add a key (in a session keyring of its own, freed after)."""
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
        f"libc.syscall({KEY_CALLS[1]}, 1, None)\n"
        f"print(libc.syscall({KEY_CALLS[0]}, b'user', b'probe', b'x', 1, -3) > 0)\n"
    )
    user = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", "/usr/bin/python3", "-c"]
    done = subprocess.run([*user, code], capture_output=True, text=True, cwd="/", timeout=30)
    return done.stdout.strip() == "True"


def keyrings(report: dict) -> None:
    """The trainer's session keyring (with its user keyring linked in, as pam_keyinit does) holds secrets before
    the sandbox starts: no program reads them; a key one program adds is gone for the next (one runner: user
    keyrings are per user namespace); no program fills a key quota that host processes share."""
    if keyctl(KEYCTL_JOIN, b"drgrpo-probe") < 0:  # this probe's own session keyring, not the caller's
        report["keyrings"] = f"unavailable: keyctl errno {ctypes.get_errno()}"
        return
    keyctl(KEYCTL_LINK, USER, SESSION)
    session_key = add_key("drgrpo-session-secret", SECRET, SESSION)
    user_key = add_key("drgrpo-user-secret", SECRET, USER)
    keyctl(KEYCTL_SET_TIMEOUT, user_key, 300)  # even if this probe is killed before it invalidates it
    sandbox = Sandbox(1, SandboxLimits(timeout=TIMEOUT))
    try:
        sandbox.start()
        steal = KEY_HELPERS + (
            f"found = [read({session_key}), read({user_key})]\n"
            "for ring in (-3, -4, -5):\n    for desc in (b'drgrpo-session-secret', b'drgrpo-user-secret'):\n"
            "        key = search(ring, desc)\n        found.append(read(key) if key > 0 else '')\n"
            "try:\n    found.append(open('/proc/keys').read())\nexcept OSError:\n    pass\n"
            f"print('stole ' + {SECRET!r} if any({SECRET!r} in f for f in found) else 'nothing')\n"
        )
        result = sandbox.run(steal)
        report["keyring_read"] = {"status": result.status, "stdout": result.text}
        keyrings_left_and_flooded(sandbox, report)
    finally:
        sandbox.close()
        keyctl(KEYCTL_INVALIDATE, user_key)
        keyctl(KEYCTL_INVALIDATE, session_key)
    if os.geteuid() == 0:
        report["nobody_adds_key_after_flood"] = nobody_can_add_a_key()
    else:  # an unprivileged trainer's programs have its uid outside: its own quota is the one at stake
        pid = os.fork()
        if pid == 0:
            keyctl(KEYCTL_JOIN, None)
            os._exit(0 if _libc.syscall(KEY_CALLS[0], b"user", b"probe", b"x", 1, SESSION) > 0 else 1)
        report["trainer_adds_key_after_flood"] = os.waitpid(pid, 0)[1] == 0


def keyrings_left_and_flooded(sandbox: Sandbox, report: dict) -> None:
    leave = KEY_HELPERS + (  # keys that expire by themselves within 60 s, should a sandbox let them be added
        "for ring in (-4, -5, -3):\n    key = add(b'drgrpo-left', b'left by the previous program', ring)\n"
        "    if key > 0:\n        libc.syscall(KEYCTL, 15, key, 60)\nprint('added')\n"
    )
    find = KEY_HELPERS + (
        "found = ''\nfor ring in (-4, -5, -3):\n    key = search(ring, b'drgrpo-left')\n"
        "    if key > 0:\n        found = read(key)\nprint(found or 'nothing')\n"
    )
    sandbox.run(leave)
    result = sandbox.run(find)
    report["keyring_left"] = {"status": result.status, "stdout": result.text}
    flood = KEY_HELPERS + (  # at most 300 keys of 16 bytes, each expiring within 60 s
        "added = 0\nfor n in range(300):\n    key = add(b'flood%d' % n, b'x' * 16, -4)\n    if key <= 0:\n"
        "        break\n    libc.syscall(KEYCTL, 15, key, 60)\n    added += 1\nprint('added', added)\n"
    )
    result = sandbox.run(flood)
    report["keyring_flood"] = {"status": result.status, "stdout": result.text}


SOCKETS = (
    "import socket, ctypes\nopened = []\n"
    "for name, family, kind in (('vsock', 40, 1), ('netlink', 16, 2), ('packet', 17, 3), ('alg', 38, 5),"
    " ('bluetooth', 31, 1), ('can', 29, 3), ('tipc', 30, 5), ('rds', 21, 5), ('xdp', 44, 3), ('key', 15, 3)):\n"
    "    try:\n        s = socket.socket(family, kind)\n        opened.append(name)\n"
    "        if name == 'vsock':\n            s.bind((0xFFFFFFFF, PORT))\n            opened.append('vsock bound')\n"
    "    except OSError:\n        pass\n"
    "libc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
    "params = ctypes.create_string_buffer(120)\n"
    "if libc.syscall(425, 4, params) >= 0:\n    opened.append('io_uring')\n"
    "print(' '.join(opened) or 'nothing')\n"
)
NEW_NAMESPACES = (  # a user + mount namespace of its own would give it a tmpfs outside every limit
    "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nmade = []\n"
    "for flags in (0x10000000, 0x10020000):\n    pid = os.fork()\n    if pid == 0:\n"
    "        os._exit(0 if libc.unshare(flags) == 0 else 1)\n    if os.waitpid(pid, 0)[1] == 0:\n"
    "        made.append(hex(flags))\n"
    "print(' '.join(made) or 'nothing')\n"
)
INODES = (  # one more file than the documented default allows, then what is left
    "import os\nmade = 0\ntry:\n    for n in range(%d):\n"
    "        os.close(os.open('f%%d' %% n, os.O_CREAT | os.O_WRONLY))\n        made += 1\nexcept OSError:\n    pass\n"
    "print('made', made)\n"
)
BUSY = (  # needs `work` CPU seconds, then answers
    "import time\nstart = time.process_time()\nwhile time.process_time() - start < %r:\n    pass\nprint('done')\n"
)
FLOOD = (  # 15 busy children, each in a session (a scheduler autogroup) of its own where it may, for 8 s
    "import os, time\nend = time.monotonic() + 8\nfor _ in range(15):\n    if os.fork() == 0:\n        try:\n"
    "            os.setsid()\n        except OSError:\n            pass\n        while time.monotonic() < end:\n"
    "            pass\n        os._exit(0)\nwhile time.monotonic() < end:\n    pass\n"
)


def namespaces(report: dict) -> None:
    with Sandbox(2, SandboxLimits(timeout=TIMEOUT)) as sandbox:
        try:
            sandbox.start()
        except NamespacesUnavailable as exc:
            report["unavailable"] = str(exc)
            return
        keyrings(report)
        report["mode"] = sandbox.mode
        report["program_uids"] = program_uids(sandbox)
        report["cgroups"] = [runner.info.get("cgroup") for runner in sandbox.runners]
        uid = report["program_uids"][0]
        report["host_processes_of_program_uid"] = processes_of_uid(uid) if uid is not None else None
        vsock = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM) if hasattr(socket, "AF_VSOCK") else None
        try:
            if vsock is not None:
                vsock.bind((socket.VMADDR_CID_ANY, socket.VMADDR_PORT_ANY))
            port = vsock.getsockname()[1] if vsock is not None else 1024
            report["sockets"] = sandbox.run(SOCKETS.replace("PORT", str(port))).text.strip()
        except OSError as exc:
            report["sockets"] = f"the trainer cannot open AF_VSOCK here: {exc}"
        finally:
            if vsock is not None:
                vsock.close()
        report["new_namespaces"] = sandbox.run(NEW_NAMESPACES).text.strip()
        start = time.monotonic()
        result = sandbox.run(INODES % (MAX_FILES_DEFAULT + 1))
        report["inodes"] = {"stdout": result.text.strip(), "status": result.status, "wall_s": result.wall_s}
        report["inodes"]["clean_up_s"] = time.monotonic() - start - result.wall_s  # reaping, unmount, answer
        report["inodes"]["works_after"] = sandbox.run("print('ok')").text.strip() == "ok"
        alone = sandbox.run(BUSY % (TIMEOUT / 2))
        flood, beside = sandbox.run_many([(FLOOD, ""), (BUSY % (TIMEOUT / 2), "")])
        report["fairness"] = {
            name: {"status": r.status, "wall_s": r.wall_s, "cpu_s": getattr(r, "cpu_s", None)}
            for name, r in (("alone", alone), ("flood", flood), ("beside_flood", beside))
        }


def fallback(report: dict) -> None:
    """Without namespaces (root trainer, fallback allowed): test cases, other processes of the programs' uid,
    host sockets and files."""
    os.environ["DRGRPO_SANDBOX_NO_NAMESPACES"] = "1"
    plant = Path(tempfile.mkdtemp(prefix="drgrpo-plant-", dir="/var/tmp"))
    plant.chmod(0o755)
    tests_file = plant / "tests.jsonl"  # test cases in a world-readable dataset or clone
    tests_file.write_text(json.dumps({"input": "", "output": "expected-answer-5e1d"}) + "\n")
    tests_file.chmod(0o644)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    unix_path = str(plant / "service.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    os.chmod(unix_path, 0o777)
    unix.listen(8)
    unix.setblocking(False)
    sleepers = [as_nobody(["sleep", "30"]) for _ in range(20)]  # a service's 20 processes of uid 65534
    time.sleep(0.3)
    limits = SandboxLimits(timeout=TIMEOUT)
    try:
        with Sandbox(2, limits, allow_network_fallback=True, python="/usr/bin/python3") as sandbox:
            sandbox.start()
            report["mode"] = sandbox.mode
            report["program_uids"] = program_uids(sandbox)
            report["landlock"] = [runner.info.get("landlock") for runner in sandbox.runners]
            read = f"try:\n    print(open({str(tests_file)!r}).read())\nexcept OSError as e:\n    print('refused', e)\n"
            report["read_tests"] = sandbox.run(read).text.strip()
            victim = "import time\ntime.sleep(1.5)\nprint('alive')\n"
            killer = (
                "import os, signal, time\nend = time.monotonic() + 1.0\nwhile time.monotonic() < end:\n"
                f"    for target in (-1, *{[p.pid for p in sleepers]!r}):\n        try:\n"
                "            os.kill(target, signal.SIGKILL)\n        except OSError:\n            pass\n"
                "    time.sleep(0.05)\nprint('tried')\n"
            )
            victim_result, _ = sandbox.run_many([(victim, ""), (killer, "")])
            report["victim_beside_killer"] = {"status": victim_result.status, "stdout": victim_result.text.strip()}
            forks = (
                "import os\nmade = 0\nfor _ in range(4):\n    try:\n        pid = os.fork()\n    except OSError:\n"
                "        break\n    if pid == 0:\n        os._exit(0)\n    os.waitpid(pid, 0)\n    made += 1\n"
                "print('forked', made)\n"
            )
            report["forks_beside_nobody"] = sandbox.run(forks).text.strip()
            reach = (
                "import socket\nreached = []\ntry:\n"
                f"    socket.create_connection(('127.0.0.1', {listener.getsockname()[1]}), timeout=1)\n"
                "    reached.append('tcp')\nexcept OSError:\n    pass\ntry:\n    s = socket.socket(socket.AF_UNIX)\n"
                f"    s.connect({unix_path!r})\n    reached.append('unix')\nexcept OSError:\n    pass\n"
                "print(' '.join(reached) or 'nothing')\n"
            )
            report["reach_services"] = sandbox.run(reach).text.strip()
            names = [f"{folder}/drgrpo-probe-{os.getpid()}-dropped" for folder in ("/tmp", "/var/tmp", "/dev/shm")]
            drop = (
                f"made = []\nfor path in ['dropped', *{names!r}]:\n    try:\n        open(path, 'w').close()\n"
                "        made.append(path)\n    except OSError:\n        pass\nprint(' '.join(made) or 'nothing')\n"
            )
            report["files_made"] = sandbox.run(drop).text.strip()
            for name in names:
                if os.path.exists(name):
                    os.unlink(name)
        report["sleepers_alive"] = sum(p.poll() is None for p in sleepers)
    finally:
        for process in sleepers:
            process.kill()
            process.wait()
        listener.close()
        unix.close()
        for path in plant.iterdir():
            path.unlink()
        plant.rmdir()


def main() -> None:
    report: dict = {}
    {"namespaces": namespaces, "fallback": fallback}[sys.argv[1]](report)
    print(json.dumps(report))


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    main()
