"""Test helper: run hostile programs through the `code` reward and report, as JSON, what each achieved.

Run by tests/test_code_sandbox_adversarial.py under outer bounds (`prlimit` on processes and address space, a
timeout, a kill of its process group), so that even a broken sandbox could not take the machine down. Every
hostile program is bounded itself too: hundreds of forks, not unbounded; 2 GB, not all memory; 8 MB of output.

Each program prints its test's expected output only if its attack worked, so its `code` score says whether it did.
Besides the issue's list, the programs of the security review of issue 16: a deep folder tree, a SysV segment left
behind, `prlimit`/`setpriority` on the runner, a forged sandbox error, Unix sockets of the trainer, the repository.
Per scenario the report holds the score, the run's status, details and counters, the processes left in the
runner's pid namespace and the files left in its /tmp, and scenario-specific facts (the planted file still exists,
the listener accepted nothing, the trainer is alive).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewards import RewardArguments, get_reward_funcs  # noqa: E402
from rewards.code.sandbox import NamespacesUnavailable  # noqa: E402

SECRET = "drgrpo-test-secret-4e1f"
TIMEOUT = 2.0


SHM_KEY = 0x5D0000 + os.getpid() % 0xFFFF  # the key the sysv_shm program uses (looked for on the host after)
SOCKET_DIRS = ("/var/tmp", "/dev/shm", "/tmp", "/run/lock")  # world-writable shared folders of the host
READABLE = str(Path(__file__).resolve().parents[1] / "pyproject.toml")  # in the repository


def scenarios(planted: Path, port: int, sockets: list[str]) -> dict[str, tuple[str, str]]:
    """name -> (program, the output it prints only if its attack worked)."""
    trainer = os.getpid()
    deadline = "import time\n_end = time.monotonic() + 30\n"  # every hostile loop ends by itself within 30 s
    return {
        "crash_segfault": ("import ctypes\nctypes.string_at(0)\nprint('survived')\n", "survived"),
        "crash_after_right_output": ("print('42')\nraise SystemExit(3)\n", "42"),
        "hang_cpu": (deadline + "while time.monotonic() < _end:\n    pass\n", "done"),
        "hang_sleep": ("import time\ntime.sleep(30)\nprint('done')\n", "done"),
        "orphan": (
            deadline + "import os\nif os.fork() == 0:\n    os.setsid()\n    while time.monotonic() < _end:\n"
            "        open('still_here', 'w').write('x')\n        time.sleep(0.05)\nprint('parent left')\n",
            "never",
        ),
        "fork_flood": (
            "import os, time\nn = 0\nfor _ in range(300):\n    try:\n        if os.fork() == 0:\n"
            "            time.sleep(30)\n            os._exit(0)\n        n += 1\n    except OSError:\n        pass\n"
            "print(f'forked {n}')\n",
            "forked 300",
        ),
        "memory": (
            "blocks = []\nfor _ in range(20):\n    blocks.append(bytearray(100 * 2**20))\nprint('allocated 2000 MB')\n",
            "allocated 2000 MB",
        ),
        "huge_output": (
            "import sys\nline = 'x' * 1023 + '\\n'\nfor _ in range(8192):\n    sys.stdout.write(line)\n",
            "x",
        ),
        "delete_outside": (
            f"import os, shutil\nfor f in ({str(planted)!r},):\n    try:\n        os.remove(f)\n    except OSError:\n"
            f"        pass\nshutil.rmtree({str(planted.parent)!r}, ignore_errors=True)\n"
            f"open({str(planted.parent / 'dropped')!r}, 'w').write('x')\n"
            f"print('deleted' if not os.path.exists({str(planted)!r}) else 'kept')\n",
            "deleted",
        ),
        "signal_parent": (  # the trainer's pid, the runner (parent, pid 1) and everything it may signal (-1)
            f"import os, signal, time\nparent = os.getppid()\nfor t in (parent, 1, {trainer}, -1):\n    try:\n"
            "        os.kill(t, signal.SIGKILL)\n    except OSError:\n        pass\ntime.sleep(0.2)\n"
            "print('killed' if os.getppid() != parent else 'alive')\n",
            "killed",
        ),
        "network": (
            f"import socket\ntry:\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
            "    s.sendall(b'hello')\n    print('connected')\nexcept OSError as e:\n    print('refused', e)\n",
            "connected",
        ),
        "secret_env": (
            "import os, glob\nfound = [v for v in os.environ.values()]\nfor path in ['/proc/self/environ', "
            f"'/proc/1/environ', '/proc/{trainer}/environ', *glob.glob('/proc/*/environ')]:\n    try:\n"
            "        found.append(open(path, 'rb').read().decode(errors='replace'))\n"
            "    except OSError:\n        pass\n"
            f"print(next((v for v in found if {SECRET!r} in v), 'nothing'))\n",
            SECRET,
        ),
        "fake_sandbox_error": (  # a sandbox error scores None (left out of the advantage), a crash scores 0
            "import os, sys\nprint('42')\nsys.stdout.flush()\n"
            "os.write(2, b'sandbox: cannot start the program: OSError()')\nos._exit(126)\n",
            "42",
        ),
        "deep_tree": (  # deeper than shutil.rmtree's recursion (review finding 1)
            "import os\nfor _ in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\nprint('nested')\n",
            "never",
        ),
        "sysv_shm": (  # a 16 MiB SysV segment, detached but not removed (finding 3): must die with the program
            "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\n"
            f"sid = libc.shmget({SHM_KEY}, 16 << 20, 0o1000 | 0o666)\nif sid >= 0:\n"
            "    address = libc.shmat(sid, None, 0)\n    ctypes.memset(address, 1, 16 << 20)\n"
            "    libc.shmdt(ctypes.c_void_p(address))\nprint('segment', sid)\n",
            "never",
        ),
        "cripple_runner": (  # lower the limits, priority and CPU set of the runner (pid 1), as its uid may (finding 2)
            "import os, resource\nfor pid in (1, 2, 3):\n    try:\n"
            "        resource.prlimit(pid, resource.RLIMIT_NOFILE, (4, 4))\n"
            "        resource.prlimit(pid, resource.RLIMIT_NPROC, (1, 1))\n    except OSError:\n        pass\n"
            "    try:\n        os.setpriority(os.PRIO_PROCESS, pid, 19)\n"
            "        os.sched_setaffinity(pid, {min(os.sched_getaffinity(0))})\n    except OSError:\n        pass\n"
            "print('tried')\n",
            "never",
        ),
        "unix_socket": (  # the trainer listens on Unix sockets in shared folders (finding 5)
            f"import socket\nfor path in {sockets!r}:\n    try:\n        s = socket.socket(socket.AF_UNIX)\n"
            "        s.settimeout(1)\n        s.connect(path)\n        s.sendall(b'hello')\n"
            "        print('connected')\n        break\n    except OSError:\n        pass\n",
            "connected",
        ),
        "read_repository": (  # the repository (and every other folder not needed to run Python) is not there
            f"try:\n    print(len(open({READABLE!r}).read()) > 0)\nexcept OSError:\n    print('hidden')\n",
            "True",
        ),
    }


def shm_segments(key: int) -> list[str]:
    """Lines of the host's /proc/sysvipc/shm with `key`."""
    with open("/proc/sysvipc/shm") as f:
        return [line.strip() for line in f if line.split()[0] == str(key)]


def unix_listeners(plant_dir: Path) -> list[socket.socket]:
    """Listening Unix sockets (mode 0777) in each shared world-writable folder that exists, and in `plant_dir`."""
    listeners = []
    for folder in [str(plant_dir), *SOCKET_DIRS]:
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            continue
        path = os.path.join(folder, f"drgrpo-probe-{os.getpid()}.sock")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        os.chmod(path, 0o777)
        listener.listen(8)
        listener.setblocking(False)
        listeners.append(listener)
    return listeners


def accepted_any(listeners: list[socket.socket]) -> bool:
    found = False
    for listener in listeners:
        try:
            listener.accept()[0].close()
            found = True
        except BlockingIOError:
            pass
    return found


def namespace_state(runner_pid: int) -> dict:
    """Processes left below the runner R (in its pid namespace and the programs' namespaces below it), besides the
    slot prepared for the next program (`_prepared`), and files left in R's /tmp (a program's own /tmp dies with its
    mount namespace)."""
    r_pid = next(
        (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _ppid(p) == runner_pid),
        None,
    )
    if r_pid is None:
        return {"processes": None, "files": None}
    try:
        files = sorted(os.listdir(f"/proc/{r_pid}/root/tmp"))
    except PermissionError:  # unprivileged: R is not dumpable, so its /proc entries are closed to us
        return {"processes": "unchecked", "files": "unchecked"}
    # R prepares the next program's slot right after answering: its stage process lives a few milliseconds. A
    # process a program left would stay (its end was before the answer), so it is looked for again a while.
    deadline = time.monotonic() + 2.0
    while True:
        parents = {int(p.name): _ppid(p) for p in Path("/proc").iterdir() if p.name.isdigit()}
        below = [pid for pid in parents if pid != r_pid and _descends_from(pid, r_pid, parents)]
        left = [pid for pid in below if not _prepared(pid, r_pid, parents)]
        if not left or time.monotonic() > deadline:
            return {"processes": left, "files": files}
        time.sleep(0.05)


def _prepared(pid: int, r_pid: int, parents: dict) -> bool:
    """Whether `pid` is an init R made (pid 1 of a namespace of its own: the next program's, or the last one's, which
    exits) that holds nothing but, since issue 52, the next program's process waiting for its job; or that process
    (pid 2 there, a fork of R that has run nothing yet: R's own command line, not a program's)."""

    def waiting(child: int) -> bool:
        return _namespace_pid(child) == 2 and _cmdline(child) == _cmdline(r_pid)

    if _namespace_pid(pid) == 2:
        return waiting(pid) and _namespace_pid(parents[pid]) == 1
    return _namespace_pid(pid) == 1 and all(waiting(c) for c, parent in parents.items() if parent == pid)


def _cmdline(pid: int) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def _descends_from(pid: int, ancestor: int, parents: dict) -> bool:
    seen = 0
    while pid in parents and seen < 64:
        pid, seen = parents[pid], seen + 1
        if pid == ancestor:
            return True
    return False


def _namespace_pid(pid: int) -> int | None:
    """The pid of `pid` in its own (innermost) pid namespace."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except OSError:
        return None
    return None


def _all_pid_namespaces() -> list[tuple[int, str]]:
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                found.append((int(p.name), os.readlink(p / "ns" / "pid")))
            except OSError:
                pass
    return found


def _namespaces_of_children(runners: list[int]) -> set[str]:
    """The pid namespaces below the runners: their children's (R's), and every namespace of a process below R (the
    init waiting for the next program has one of its own)."""
    namespaces = set()
    parents = {int(p.name): _ppid(p) for p in Path("/proc").iterdir() if p.name.isdigit()}
    for pid in parents:
        if any(_descends_from(pid, runner, parents) for runner in runners):
            for name in ("pid_for_children", "pid"):
                try:
                    namespaces.add(os.readlink(f"/proc/{pid}/ns/{name}"))
                except OSError:
                    pass
    return namespaces


def _ppid(proc: Path) -> int | None:
    try:
        for line in (proc / "status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def main() -> None:
    """Arguments: scenario names to run (default all); `--fallback`: simulate a kernel without namespaces and allow
    the fallback (as `DRGRPO_SANDBOX_NO_NAMESPACES=1` with `code_allow_network_fallback`)."""
    logging.basicConfig(level=logging.WARNING)
    fallback = "--fallback" in sys.argv[1:]
    only = [a for a in sys.argv[1:] if not a.startswith("--")]
    if fallback:
        os.environ["DRGRPO_SANDBOX_NO_NAMESPACES"] = "1"
    for key in ("WANDB_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY"):
        os.environ[key] = SECRET  # planted before the sandbox starts
    plant_dir = Path(tempfile.mkdtemp(prefix="drgrpo-plant-", dir="/var/tmp"))
    plant_dir.chmod(0o777)  # world-writable: only the sandbox's read-only file system protects it
    planted = plant_dir / "precious.txt"
    planted.write_text("keep me")
    planted.chmod(0o666)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    unix = unix_listeners(plant_dir)
    settings = RewardArguments(
        code_timeout=TIMEOUT,
        code_num_workers=1,
        code_memory_mb=256,
        code_max_processes=16,
        code_max_output_kb=1024,
        code_allow_network_fallback=fallback,
        code_python="/usr/bin/python3" if fallback else None,  # no mount namespace: a Python uid 65534 can run
    )
    report: dict = {}
    runner_pids, namespaces = [], set()
    try:
        try:
            (reward,) = get_reward_funcs(["code"], settings)
            reward.func.sandbox.start()
        except NamespacesUnavailable as exc:  # only the kernel's refusal skips; any other failure is an error
            print(json.dumps({"unavailable": str(exc)}))
            return
        sandbox = reward.func.sandbox
        report["mode"] = sandbox.mode
        for name, (program, success) in scenarios(planted, port, [u.getsockname() for u in unix]).items():
            if only and name not in only:
                continue
            tests = [{"input": "", "output": success}]
            start = time.monotonic()
            (score,) = reward(completions=[f"```python\n{program}```"], verification_info=[tests])
            elapsed = time.monotonic() - start
            entry = {
                "score": score,
                "elapsed": elapsed,
                "details": reward.last_report.details[0],
                "counters": reward.last_report.counters,
                **namespace_state(sandbox.pids[0]),
            }
            check = sandbox.run("print('ok')")
            entry["sandbox_works_after"] = check.status == "ok" and check.text.strip() == "ok"
            report[name] = entry
        try:
            connection, _ = listener.accept()
            report["listener_accepted"] = True
            connection.close()
        except BlockingIOError:
            report["listener_accepted"] = False
        report["unix_listeners"] = len(unix)
        report["unix_accepted"] = accepted_any(unix)
        report["shm_segments_left"] = shm_segments(SHM_KEY)
        report["planted_intact"] = planted.exists() and planted.read_text() == "keep me"
        report["dropped_outside"] = (plant_dir / "dropped").exists()
        runner_pids = list(sandbox.pids)
        namespaces = _namespaces_of_children(runner_pids)
        sandbox.close()
        report["fallback_dir_left"] = os.path.exists(sandbox.fallback_dir)
    finally:
        listener.close()
        for u in unix:
            os.unlink(u.getsockname())
            u.close()
        for path in plant_dir.iterdir():
            path.unlink()
        plant_dir.rmdir()
    time.sleep(0.2)
    report["runners_left"] = [pid for pid in runner_pids if Path(f"/proc/{pid}").exists()]
    report["namespace_members_left"] = [pid for pid, ns in _all_pid_namespaces() if ns in namespaces]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
