"""What a program leaves in the kernel after its last process, kept from the next program (issue 52).

A program can keep files alive past its end without any process holding them: sent over a Unix socket and then the
socket sent into its own queue, they are "in flight", referenced only by a cycle of socket queues. The kernel frees
such files only when its Unix-socket garbage collector runs, which it does when some Unix socket is released. Until
then they stay charged where they were made: their pages to the runner's memory cgroup (the fifth red team left
540 MiB of memfds there, and the next programs of the runner were OOM-killed: a correct program scored 0), and the
pipe buffer pages and in-flight descriptors they count against their uid outside (`fs.pipe-user-pages-soft`,
`RLIMIT_NOFILE`'s `ETOOMANYREFS`), a bit that the next program of the same uid could read. So:

- each program gets its own uid outside, in turn from a pool of `IDS_PER_RUNNER` per runner (`program_ids_outside`:
  a live runner's pid makes them its own), so two programs of a runner share one only `IDS_PER_RUNNER` programs
  apart. With namespaces, a user namespace whose 65534 is that id holds the program (`rewards.code._program`: made
  by the first program of each id, kept by the runner and entered by the later ones), so inside every program is
  still 65534 and learns nothing from which id it got;
- after each program the runner releases a Unix socket of its own (`wake_unix_gc`), so the collector runs then,
  not whenever another process of the machine happens to release one;
- before the next program starts, what the runner's memory cgroup holds beyond page cache must be back below
  `LEFTOVER_BYTES` (`RunnerMemory.drained`): usually it is at once; else the runner wakes the collector again and
  waits up to `DRAIN_WAIT_S`, and if it does not come back the runner retires, and the trainer runs the job again
  on a fresh runner. So each program has the memory limit to itself, whatever ran before it. (A memory cgroup per
  program was tried first: moving each program's init into its own cgroup makes every fork of the machine wait on
  cgroup v1's threadgroup lock, and cost 0-6% of the throughput of short programs here; this check moves nothing.)

Where programs cannot have a uid of their own (an unprivileged trainer: the kernel lets it map only its own uid),
the seccomp filter refuses them Unix sockets instead (`rewards.code._seccomp`): no file can be put in flight.
Standard library only.
"""

from __future__ import annotations

import ctypes
import os
import socket
import time

OWN_IDS_BASE = 0x70000000  # a range systemd leaves unused (docs/UIDS-GIDS.md), above every container range
# Ids outside per runner: OWN_IDS_BASE + pid * 63 + 62 < 0x7FFE0000 for every pid (pid_max is at most 2^22).
IDS_PER_RUNNER = 63
POOL_IDS_INSIDE = 100_000  # the same ids in the runner's user namespace (a root trainer's): 100000 ... 100062
# What the runner's memory cgroup may hold beyond page cache when a program starts: the runner itself (B and R,
# about 5 MiB), the slot prepared for the next program, and at most what is left of its 64 MiB share: so the program
# always has its memory_mb and /tmp (rewards.code._cgroup.RUNNER_MEMORY_MB).
LEFTOVER_BYTES = 32 << 20
DRAIN_WAIT_S = 2.0  # how long the runner waits for an earlier program's memory before it retires

_libc = ctypes.CDLL(None, use_errno=True)


def program_ids_outside(runner_pid: int) -> range:
    """The uids (and gids) that the programs of runner `runner_pid` have outside, in turn (a root trainer's)."""
    first = OWN_IDS_BASE + runner_pid * IDS_PER_RUNNER
    return range(first, first + IDS_PER_RUNNER)


def wake_unix_gc() -> None:
    """Release a Unix socket of our own: the kernel then runs its Unix-socket garbage collector (when any file is in
    flight anywhere), which frees every file that only a cycle of socket queues holds. It runs asynchronously."""
    fds = (ctypes.c_int * 2)()
    if _libc.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC, 0, fds) == 0:
        os.close(fds[0])
        os.close(fds[1])


class RunnerMemory:
    """The runner's memory cgroup (`rewards.code._cgroup`), opened before its root is replaced (its own root has no
    /sys): read before each program, to tell what an earlier program left charged there."""

    def __init__(self, folder: str) -> None:
        self.fd = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        v1 = os.path.exists(os.path.join(folder, "memory.usage_in_bytes"))
        self.usage_file = "memory.usage_in_bytes" if v1 else "memory.current"

    def _read(self, name: str) -> str:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.fd)
        try:
            return os.read(fd, 1 << 16).decode()
        finally:
            os.close(fd)

    def leftover(self) -> int:
        """Bytes charged to the cgroup that reclaim cannot take back: its usage, less the page cache of files (the
        system folders a program read stay cached, and charged where they were first read)."""
        usage = int(self._read(self.usage_file))
        if usage <= LEFTOVER_BYTES:
            return usage
        stat = dict(line.split() for line in self._read("memory.stat").splitlines() if line.count(" ") == 1)
        return usage - int(stat.get("inactive_file", 0)) - int(stat.get("active_file", 0))

    def drained(self, between=None) -> bool:
        """Whether what the cgroup holds is below `LEFTOVER_BYTES` (waking the collector and calling `between()`,
        e.g. reaping the last program's init, meanwhile, up to `DRAIN_WAIT_S`)."""
        deadline = time.monotonic() + DRAIN_WAIT_S
        while self.leftover() > LEFTOVER_BYTES:
            if time.monotonic() > deadline:
                return False
            wake_unix_gc()
            if between is not None:
                between()
            time.sleep(0.002)
        return True
