"""`Sandbox`: run untrusted programs on this machine, offline, each as a fresh unprivileged process under limits.

What a program gets (docs/code-rewards.md has the full list of guarantees and non-guarantees):
- its own session and process group, uid/gid 65534 inside (outside, for a root trainer, the next of its runner's
  own uids, never its predecessor's) with no capabilities and `no_new_privs` (never root, even when the trainer is
  root: the kernel does not apply the process limit to root), a fresh session keyring, `oom_score_adj` 1000, and a
  seccomp filter (`rewards.code._seccomp`) refusing what namespaces do not isolate: keyrings, non-namespaced socket
  families (vsock, ...; Unix sockets too where programs share a uid), io_uring, setsid, new namespaces, file
  locks, `sync`;
- network and IPC namespaces of its own (no interface up: no network, not even 127.0.0.1 of the host; no socket
  name, port or SysV object of another program), its runner's pid namespace (it cannot see or signal any process
  outside it; everything it starts dies with the test) and mount namespace, whose root is minimal and read-only
  (/usr, /lib*, /etc, the interpreter, a few devices: no folder of the host where others create files or sockets,
  no repository);
- a fresh working folder on a private tmpfs of `max_files` inodes (deleted after the test), an empty environment
  (PATH, HOME, LANG only), stdin from the test; where the machine allows them, a CPU and a memory cgroup per
  runner (what a program leaves in the kernel, e.g. files in flight, is collected before the next program runs,
  never charged to it: `rewards.code._leftovers`);
- limits: CPU seconds of all its processes (`timeout`), wall seconds (twice that), address space (and memory in
  all, with a memory cgroup), processes/threads, open files, file size, files, output.

Programs run in `num_workers` runner processes (`rewards.code._runner`), one program at a time each, created once
and reused. Where the kernel forbids namespaces (some containers), the sandbox refuses to start unless
`allow_network_fallback` is set and the trainer is root; then programs run as their runner's own uids under the
same rlimits and filter (which then refuses every socket()), Landlock limiting the files they may open where the
kernel has it, in the host's pid namespace and file system; a warning says once what that does not stop.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import math
import os
import queue
import sys
import tempfile
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from rewards.code._cgroup import RUNNER_MEMORY_MB
from rewards.code._filesystem import remove_tree
from rewards.code._runner_client import NamespacesUnavailable, SandboxUnavailable, _Runner

logger = logging.getLogger(__name__)

__all__ = ["NamespacesUnavailable", "RunResult", "Sandbox", "SandboxLimits", "SandboxUnavailable", "get_sandbox"]
STATUSES = ("ok", "crash", "timeout", "output_limit", "sandbox_error")


MAX_FILES = 100_000  # the most files `max_files` may allow (each costs ~1 KiB of kernel memory, ~5 us to free)


@dataclass(frozen=True)
class SandboxLimits:
    """Per-program limits. `timeout`: CPU seconds of the program (all its processes, waited for or not), so that a
    neighbour taking the CPU makes it slower, not wrong; `wall_timeout` None: `2 * timeout`, the wall-clock limit
    (programs that sleep or block); `cpu_seconds` None: `ceil(timeout)`, the RLIMIT_CPU of each of its processes
    (SIGXCPU, then SIGKILL a second later); `memory_mb`: the address space of each process and, where the runner
    has a memory cgroup, all of them together (plus /tmp and the runner's 64 MiB); `max_files`: files and folders
    it may create (tmpfs inodes)."""

    timeout: float = 5.0
    memory_mb: int = 512
    max_processes: int = 16
    max_open_files: int = 64
    max_output_bytes: int = 1 << 20
    max_file_bytes: int = 16 << 20
    max_files: int = 10_000
    cpu_seconds: int | None = None
    wall_timeout: float | None = None

    def __post_init__(self) -> None:
        for key, value in asdict(self).items():
            if value is not None and value <= 0:
                raise ValueError(f"Sandbox limit {key} must be positive, got {value}.")
        if self.max_files > MAX_FILES:
            raise ValueError(f"Sandbox limit max_files must be at most {MAX_FILES}, got {self.max_files}.")

    def for_runner(self) -> dict:
        limits = asdict(self)
        limits["cpu_seconds"] = self.cpu_seconds or math.ceil(self.timeout)
        limits["wall_timeout"] = self.wall_timeout or 2 * self.timeout
        return limits


@dataclass
class RunResult:
    """What one program did: `status` is ok (exit 0), crash (non-zero exit or signal), timeout (CPU or wall time),
    output_limit (printed more than allowed) or sandbox_error (the sandbox failed, not the program). `cpu_s`: the
    CPU seconds of all its processes (each reaped one's usage: waited for by the program or not)."""

    status: str
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    wall_s: float
    cpu_s: float = 0.0

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")


def default_program_python() -> tuple[str, list[str]]:
    """The interpreter programs run with: this Python's base installation (stdlib only, `-I -S`), and the folder
    the sandbox must make reachable for it (its prefix)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = os.path.join(sys.base_prefix, "bin", version)
    if not os.path.exists(python):
        python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    return python, [sys.base_prefix]


def installation_folders(python: str) -> list[str]:
    """The folders an interpreter needs, besides the system's: the one above its `bin/`, for the path as given (a
    venv) and resolved (its base installation)."""
    return sorted({os.path.dirname(os.path.dirname(p)) for p in (os.path.abspath(python), os.path.realpath(python))})


def _close_runners(runners: list[_Runner], fallback_dir: str) -> None:
    for runner in runners:
        runner.kill()
    runners.clear()
    try:
        remove_tree(fallback_dir)  # not shutil.rmtree: a program's folders can nest deeper than its recursion
    except OSError as exc:
        logger.warning("Could not delete the code sandbox's folder %s: %s", fallback_dir, exc)


class Sandbox:
    """`num_workers` runners; `run_many([(program, stdin), ...])` runs the programs in parallel, results in order.

    Args:
        num_workers: programs that may run at once (one runner process each).
        limits: the per-program `SandboxLimits`.
        allow_network_fallback: where namespaces are unavailable, run programs anyway (with a warning) instead of
            raising `SandboxUnavailable`.
        python: interpreter for the programs (None: this Python's base installation, stdlib only).
        python_args: interpreter flags before the program file (default: isolated mode, no site-packages).
    """

    _ids = itertools.count()

    def __init__(
        self,
        num_workers: int = 1,
        limits: SandboxLimits | None = None,
        allow_network_fallback: bool = False,
        python: str | None = None,
        python_args: tuple[str, ...] = ("-I", "-S"),
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"Sandbox needs num_workers >= 1, got {num_workers}.")
        if not sys.platform.startswith("linux"):
            raise SandboxUnavailable("The code sandbox needs Linux (namespaces, rlimits, pidfd).")
        self.num_workers = num_workers
        self.limits = limits or SandboxLimits()
        self.allow_network_fallback = allow_network_fallback
        default_python, expose = default_program_python()
        self.python = python or default_python
        self.python_args = list(python_args)
        self.fallback_dir = tempfile.mkdtemp(prefix="drgrpo-sandbox-")
        os.chmod(self.fallback_dir, 0o711)  # programs (uid 65534) reach their own folder in it, nothing else
        tmpfs_mb = max(64, (self.limits.max_file_bytes * 4) >> 20)
        self.config = {
            "allow_fallback": allow_network_fallback,
            # The minimal root binds these (besides /usr, /lib*, /etc): the runner's own Python and the programs'.
            "expose": [*expose, *installation_folders(self.python)],
            # /tmp: its bytes, and its files (the work folder, main.py and the tmpfs's root are 3 inodes more).
            "tmpfs": f"size={tmpfs_mb}m,nr_inodes={self.limits.max_files + 3}",
            "fallback_dir": self.fallback_dir,
            # Simulate a kernel without namespaces (tests, and checking a fallback set-up before relying on it).
            "no_namespaces": os.environ.get("DRGRPO_SANDBOX_NO_NAMESPACES") == "1",
            # Simulate a machine without writable cgroups (tests of the modes without).
            "no_cgroup": os.environ.get("DRGRPO_SANDBOX_NO_CGROUP") == "1",
            # A runner's memory cgroup: one program's memory in all, its /tmp, and the runner's own share.
            "memory_bytes": (self.limits.memory_mb + tmpfs_mb + RUNNER_MEMORY_MB) << 20,
        }
        self.runners: list[_Runner] = []
        self.mode: str | None = None
        self._idle: queue.Queue[_Runner] = queue.Queue()
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_runners, self.runners, self.fallback_dir)
        atexit.register(self._finalizer)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Kill every runner (and with them every program). Idempotent."""
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self._finalizer()

    @property
    def pids(self) -> list[int]:
        return [r.process.pid for r in self.runners]

    def _start_runner(self) -> _Runner:
        runner = _Runner(self.config)
        if runner.info["mode"] != "namespaces":
            _warn_fallback_once(runner.info["landlock"])
        self.mode = runner.info["mode"]
        self.runners.append(runner)
        return runner

    def start(self) -> None:
        """Start the runners (first use does it too) and check that a trivial program runs; else raise
        `SandboxUnavailable` with the reason."""
        with self._lock:
            if self._closed:
                raise RuntimeError("Sandbox is closed.")
            if self.runners:
                return
            try:
                first = self._start_runner()
            except SandboxUnavailable as exc:
                raise type(exc)(_unavailable_message(str(exc))) from exc
            # The check gets its own generous limit: a tiny code_timeout must not read as a broken interpreter.
            check = first.run(self._job("print('ok')", "", timeout=max(10.0, self.limits.timeout)))
            if check["status"] != "ok" or check["stdout"].strip() != b"ok":
                self._finalizer()
                raise SandboxUnavailable(
                    f"The sandbox started but a trivial program failed ({check['status']}, stderr "
                    f"{check['stderr'][-300:]!r}) with interpreter {self.python}: set code_python to an interpreter "
                    "that uid 65534 can run."
                )
            for _ in range(self.num_workers - 1):
                self._start_runner()
            for runner in self.runners:
                self._idle.put(runner)
            self._executor = ThreadPoolExecutor(self.num_workers, thread_name_prefix="code-sandbox")

    def _job(self, program: str, stdin: str, timeout: float | None = None) -> dict:
        limits = self.limits.for_runner()
        if timeout is not None:
            limits.update(timeout=timeout, cpu_seconds=math.ceil(timeout), wall_timeout=2 * timeout)
        return {
            "id": next(self._ids),
            "program": program.encode("utf-8", errors="surrogatepass"),
            "stdin": stdin.encode("utf-8", errors="surrogatepass"),
            "limits": limits,
            "python": self.python,
            "python_args": self.python_args,
        }

    def _take_runner(self) -> _Runner:
        """An idle runner; if every runner died and none could be restarted, one more start (else the error)."""
        while True:
            try:
                return self._idle.get(timeout=1.0)
            except queue.Empty:
                with self._lock:
                    if not self.runners:
                        return self._start_runner()

    def _replace(self, runner: _Runner, reason: str) -> _Runner | None:
        """Kill `runner` and start another in its place (None if that fails: `_take_runner` tries again)."""
        logger.warning("Code sandbox runner replaced: %s", reason)
        runner.kill()
        with self._lock:
            self.runners.remove(runner)
            try:
                return self._start_runner()
            except Exception as start_error:  # noqa: BLE001
                logger.error("Could not restart a code sandbox runner: %s", start_error)
                return None

    def _run_one(self, program: str, stdin: str, tries: int = 2) -> RunResult:
        try:
            runner = self._take_runner()
        except Exception as exc:  # noqa: BLE001 - no runner at all: this job is a sandbox error, training goes on
            return RunResult("sandbox_error", None, b"", f"no sandbox runner: {exc}".encode(), 0.0)
        rerun = False
        try:
            result = runner.run(self._job(program, stdin))
        except Exception as exc:  # noqa: BLE001 - a hung or dead runner: replace it, the job is a sandbox error
            runner = self._replace(runner, f"it failed ({exc})")
            result = {"status": "sandbox_error", "exit_code": None, "stdout": b"", "stderr": str(exc).encode()}
            result.update(wall_s=0.0, cpu_s=0.0)
        else:
            # A runner that retires (an error of its own, or its limits changed under it) has exited: replace it.
            # One that retires before running the job (an earlier program's memory did not come back to it) asks
            # for the job to run again, on a fresh runner.
            rerun = result.pop("rerun", False) and tries > 1
            if result.pop("retire", False):
                runner = self._replace(runner, f"it retired ({result['stderr'][-200:]!r})")
        if runner is not None:
            self._idle.put(runner)
        return self._run_one(program, stdin, tries - 1) if rerun else RunResult(**result)

    def run(self, program: str, stdin: str = "") -> RunResult:
        """Run one program on one input."""
        return self.run_many([(program, stdin)])[0]

    def run_many(self, jobs: list[tuple[str, str]]) -> list[RunResult]:
        """Run `(program, stdin)` jobs, up to `num_workers` at once; results in job order."""
        if not jobs:
            return []
        self.start()
        if len(jobs) == 1 or self.num_workers == 1:
            return [self._run_one(program, stdin) for program, stdin in jobs]
        return list(self._executor.map(lambda job: self._run_one(*job), jobs))


_warned_fallback = False


def fallback_warning(landlock_abi: int) -> str:
    """What the fallback does and does not stop, on a kernel with Landlock ABI `landlock_abi` (0: none)."""
    common = (
        "code sandbox: this kernel does not allow user/network namespaces, and code_allow_network_fallback is "
        "set: programs run WITHOUT namespaces, each as a uid of its runner's own (so they cannot signal other "
        "completions' programs or any other process), with every socket() refused (no network, no Unix socket "
        "of this machine's services), under the same limits, in the host's pid namespace. "
    )
    if landlock_abi:
        return common + (
            f"Landlock (ABI {landlock_abi}) lets them read only the system and interpreter folders (/usr, /etc, "
            "/lib*, ...: any file there that their uid may read) and create no file anywhere. See "
            "docs/code-rewards.md."
        )
    return common + (
        "This kernel has no Landlock, so NOTHING STOPS A PROGRAM FROM READING EVERY FILE ITS UID MAY READ: the test "
        "cases and expected outputs in a world-readable dataset or clone (a program can print the expected output "
        "and score full marks), /proc, other users' world-readable files; nor from filling world-writable "
        "folders (/tmp, /dev/shm, /var/tmp) with files no limit counts. See docs/code-rewards.md."
    )


def _warn_fallback_once(landlock_abi: int) -> None:
    global _warned_fallback
    if not _warned_fallback:
        _warned_fallback = True
        logger.warning(fallback_warning(landlock_abi))


def _unavailable_message(reason: str) -> str:
    fallback = (
        "To run programs WITHOUT network isolation anyway, set code_allow_network_fallback: true (root trainers "
        "only: programs must run as another user than the trainer's)."
    )
    return (
        f"The code sandbox cannot isolate programs on this machine: {reason}. It needs user and network namespaces "
        "(`unshare --user --net true` must work; in Docker, allow the unshare syscall or run with --privileged, or "
        f"set kernel.unprivileged_userns_clone=1). {fallback}"
    )


_SANDBOXES: dict[tuple, Sandbox] = {}
_SANDBOXES_LOCK = threading.Lock()


def get_sandbox(
    num_workers: int,
    limits: SandboxLimits,
    allow_network_fallback: bool = False,
    python: str | None = None,
    owner: str = "code_reward",
) -> Sandbox:
    """The shared sandbox of `owner` for these settings, created on first use (started lazily). Owners never share
    runners: the Python tool's programs (`owner="python_tool"`, written by the policy mid-answer) never run where
    the code reward's graded programs, which read hidden test cases, ran."""
    key = (owner, num_workers, limits, allow_network_fallback, python)
    with _SANDBOXES_LOCK:
        sandbox = _SANDBOXES.get(key)
        if sandbox is None or sandbox._closed:
            sandbox = _SANDBOXES[key] = Sandbox(num_workers, limits, allow_network_fallback, python)
        return sandbox
