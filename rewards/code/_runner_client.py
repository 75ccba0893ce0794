"""The trainer's side of one sandbox runner (`rewards.code._runner`): start it, write its uid map when the trainer
is root, send jobs and read answers (4-byte big-endian length + pickle), kill it and everything it started."""

from __future__ import annotations

import itertools
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from multiprocessing.connection import wait as wait_readable
from pathlib import Path

from rewards.code import _cgroup
from rewards.code._leftovers import IDS_PER_RUNNER, POOL_IDS_INSIDE, program_ids_outside

_HEADER = struct.Struct(">I")
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
# The runner imports `rewards.code._runner` alone, not the packages' `__init__`s (the reward library, math-verify,
# ...): a lean runner forks its programs faster (the fork copies its page tables), 3 forks per program.
_BOOT = (
    "import sys, types\n"
    "for name in ('rewards', 'rewards.code'):\n"
    "    module = sys.modules[name] = types.ModuleType(name)\n"
    "    module.__path__ = [sys.argv[2] + '/' + name.replace('.', '/')]\n"
    "from rewards.code._runner import main\n"
    "main()"
)
# Seconds beyond a program's own timeout before its runner is considered hung and killed (set-up + clean-up).
RUNNER_GRACE_S = 10.0
START_TIMEOUT_S = 30.0
_cgroup_names = itertools.count()


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot isolate programs here (no namespaces and no fallback allowed, or no usable interpreter)."""


class NamespacesUnavailable(SandboxUnavailable):
    """The kernel (or container) refuses the namespaces the sandbox needs, and no fallback may be used: the one
    unavailability tests may skip on. Every other `SandboxUnavailable` means the sandbox itself is broken here."""


def _write_id_maps(pid: int) -> None:
    """Root outside: map root (the runner) and the programs' ids (`rewards.code._leftovers`: a pool of this runner's
    own outside, one per program in turn, each the 65534 of a user namespace kept for it) into the runner's new user
    namespace."""
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write(f"0 0 1\n{POOL_IDS_INSIDE} {program_ids_outside(pid)[0]} {IDS_PER_RUNNER}\n")


class _Runner:
    """One runner process (see `rewards.code._runner`), talking over its stdin/stdout."""

    def __init__(self, config: dict) -> None:
        # A CPU and a memory cgroup of its own where the machine allows them (rewards.code._cgroup); it joins them.
        name = f"{_cgroup.PREFIX}{os.getpid()}-{next(_cgroup_names)}"
        no_cgroups = config["no_cgroup"]
        self.cgroups = (
            dict.fromkeys(_cgroup.CONTROLLERS) if no_cgroups else _cgroup.runner_cgroups(name, config["memory_bytes"])
        )
        config = {**config, "die_with_parent": threading.current_thread() is threading.main_thread()}
        config["cgroups"] = self.cgroups
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-c", _BOOT, pickle.dumps(config).hex(), _PACKAGE_ROOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={},
            close_fds=True,
            start_new_session=True,
            bufsize=0,
        )
        self.info: dict = {}
        try:
            message = self._receive(START_TIMEOUT_S)
            if message and message[0] == "map":
                try:
                    _write_id_maps(message[1])
                    self._send(("mapped",))
                except OSError as exc:
                    self._send(("failed", str(exc)))
                message = self._receive(START_TIMEOUT_S)
        except BaseException:
            self.kill()
            raise
        if not message or message[0] != "ready":
            self.kill()
            if message and message[0] == "unavailable":
                error = NamespacesUnavailable if message[2] == "namespaces" else SandboxUnavailable
                raise error(message[1])
            raise SandboxUnavailable(f"runner exited ({message!r})")
        self.info = message[1]

    def _send(self, message: tuple) -> None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self.process.stdin.write(_HEADER.pack(len(payload)) + payload)

    def _read_exact(self, size: int, timeout: float) -> bytes | None:
        data = b""
        fd = self.process.stdout.fileno()
        while len(data) < size:
            if not wait_readable([fd], timeout):
                raise TimeoutError("sandbox runner did not answer")
            chunk = os.read(fd, size - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def _receive(self, timeout: float):
        header = self._read_exact(_HEADER.size, timeout)
        if header is None:
            return None
        payload = self._read_exact(_HEADER.unpack(header)[0], timeout)
        return None if payload is None else pickle.loads(payload)

    def run(self, job: dict) -> dict:
        self._send(job)
        message = self._receive(job["limits"]["wall_timeout"] + RUNNER_GRACE_S)
        if message is None:
            raise RuntimeError(f"sandbox runner exited (code {self.process.poll()})")
        job_id, result = message
        if job_id != job["id"]:
            raise RuntimeError("sandbox runner answered out of order")
        return result

    def kill(self) -> None:
        """Kill R, then B, and wait until both are gone, so that nothing of the runner outlives `Sandbox.close()`.
        R goes first (through a pidfd: it is B's child, not ours) so that B, waiting for it, reaps it and exits:
        killed together, R would be left a zombie for the machine's init to reap, whenever it does."""
        r_pidfds = _child_pidfds(self.process.pid)
        for fd in r_pidfds:
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                pass
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5 if r_pidfds else 0.001)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)  # B not yet reaped: its pgid is still its own
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if r_pidfds:
            wait_readable(r_pidfds, 10)  # a pidfd turns readable when its process has exited
        for fd in r_pidfds:
            os.close(fd)
        for path in {path for path in self.cgroups.values() if path is not None}:
            _cgroup.remove(path)


def _child_pidfds(pid: int) -> list[int]:
    """Pidfds of the children of process `pid` (empty if it has none or is gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        return []
    fds = []
    for child in children:
        try:
            fds.append(os.pidfd_open(child))
        except OSError:
            pass
    return fds
