"""The cgroups of a sandbox runner, where the machine lets the trainer make them: CPU fairness between completions
and a memory limit that sees what no process holds.

Each runner (and so each program: one at a time) gets a cgroup of its own beside the trainer's, per controller:
- `cpu`: the default weight (every runner the same share, however many processes its program has) and a quota of
  one CPU (`cpu.max` on cgroup v2, `cpu.cfs_quota_us` on v1). A program whose fifteen children spin then takes one
  runner's share, not fifteen; `setsid` (refused by the seccomp filter anyway) gains nothing, as scheduler
  autogroups only apply in the root cgroup.
- `memory`: a limit (`memory.max` on v2, `memory.limit_in_bytes` on v1; swap the same, where it is accounted) of
  the program's `memory_mb` + its /tmp tmpfs + `RUNNER_MEMORY_MB` for the runner itself. It counts what the
  address-space limit does not: the pages of memfds, SysV segments and /tmp files, which no process's RSS shows;
  past it the kernel's OOM killer acts inside the cgroup, on the program first (its `oom_score_adj` is 1000). What a
  program leaves charged there after its end (files kept in flight) is collected before the next program runs
  (`rewards.code._leftovers`), so each program has the limit to itself.

Possible where the cgroup folders are writable (a root trainer on most machines; a systemd delegation) and, on v2,
where the controllers can be enabled for the trainer's cgroup's children (the kernel refuses that in a cgroup that
holds processes, other than the root one: e.g. inside most containers and Slurm steps). Elsewhere `runner_cgroups`
gives None for that controller and the sandbox runs without (docs/code-rewards.md says what is left; without a
memory cgroup the seccomp filter refuses memfds and SysV shared memory instead). Standard library only.
"""

from __future__ import annotations

import errno
import os
import time

CPU_PERIOD_US = 100_000  # quota of one CPU: CPU_PERIOD_US of CPU time per CPU_PERIOD_US of wall time
RUNNER_MEMORY_MB = 64  # the runner's own share of its memory limit: B and R (~25 MiB), kernel memory, headroom
CONTROLLERS = ("cpu", "memory")
PREFIX = "drgrpo-runner-"


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def controller_folder(controller: str) -> tuple[str, int] | None:
    """(the folder of this process's cgroup for `controller`, the cgroup version), or None."""
    try:
        with open("/proc/self/cgroup") as f:
            memberships = f.read()
        with open("/proc/self/mountinfo") as f:
            mounts = f.read()
    except OSError:
        return None
    return find_folder(controller, memberships, mounts, lambda folder: _has(folder, controller))


def cpu_cgroup_folder() -> tuple[str, int] | None:
    return controller_folder("cpu")


def find_folder(controller: str, memberships: str, mounts: str, has) -> tuple[str, int] | None:
    """`controller_folder` from the texts of /proc/self/cgroup and /proc/self/mountinfo; `has(folder)`: whether a
    v2 folder offers the controller. v1 first: a hybrid machine has it there, and a v2 tree without it."""
    entries = [line.split(":", 2) for line in memberships.splitlines() if line.count(":") >= 2]
    for version in (1, 2):
        for hierarchy, controllers, path in entries:
            if (version == 1 and controller not in controllers.split(",")) or (version == 2 and hierarchy != "0"):
                continue
            for line in mounts.splitlines():
                fields = line.split()
                if "-" not in fields:
                    continue
                separator = fields.index("-")
                fstype, options = fields[separator + 1], fields[separator + 3].split(",")
                if not (fstype == "cgroup" and controller in options if version == 1 else fstype == "cgroup2"):
                    continue
                root, mount_point = fields[3].rstrip("/"), fields[4]
                if path != root and not path.startswith(root + "/") and root:
                    continue
                folder = (mount_point + path[len(root) :]).rstrip("/") or "/"
                if version == 2 and not has(folder):
                    break
                return folder, version
    return None


def find_cpu_folder(memberships: str, mounts: str, has_cpu) -> tuple[str, int] | None:
    return find_folder("cpu", memberships, mounts, has_cpu)


def _has(folder: str, controller: str) -> bool:
    try:
        with open(os.path.join(folder, "cgroup.controllers")) as f:
            return controller in f.read().split()
    except OSError:
        return False


def _settings(controller: str, version: int, memory_bytes: int) -> list[tuple[str, str, bool]]:
    """(file, value, whether the file must exist) that configure a runner's cgroup for `controller`."""
    if controller == "cpu":
        if version == 2:
            return [("cpu.max", f"{CPU_PERIOD_US} {CPU_PERIOD_US}", True)]
        return [("cpu.cfs_period_us", str(CPU_PERIOD_US), True), ("cpu.cfs_quota_us", str(CPU_PERIOD_US), True)]
    if version == 2:  # no swap beyond the limit: a program's memory stays where the limit sees it
        return [("memory.max", str(memory_bytes), True), ("memory.swap.max", "0", False)]
    return [
        ("memory.limit_in_bytes", str(memory_bytes), True),
        ("memory.memsw.limit_in_bytes", str(memory_bytes), False),
    ]


def runner_cgroups(name: str, memory_bytes: int) -> dict[str, str | None]:
    """Create the cgroup `name` beside the trainer's for each controller (one CPU's quota, default weight; a limit
    of `memory_bytes`); controller -> its folder, or None where the machine does not allow it. On v2 both
    controllers share one folder."""
    found = {c: controller_folder(c) for c in CONTROLLERS}
    cgroups: dict[str, str | None] = dict.fromkeys(CONTROLLERS)
    for parent, version in sorted({f for f in found.values() if f is not None}):
        path = os.path.join(parent, name)
        remove_stale(parent)
        try:
            os.mkdir(path)
        except OSError:
            continue
        controllers = [c for c in CONTROLLERS if found[c] == (parent, version)]
        for controller in _enable(parent, controllers) if version == 2 else controllers:
            try:
                for file, value, required in _settings(controller, version, memory_bytes):
                    try:
                        _write(os.path.join(path, file), value)
                    except FileNotFoundError:
                        if required:
                            raise
                cgroups[controller] = path
            except OSError:
                pass
        if path not in cgroups.values():
            remove(path)
    return cgroups


def _enable(parent: str, controllers: list[str]) -> list[str]:
    """Enable `controllers` for the children of the v2 cgroup `parent`; those that are (the kernel refuses with
    EBUSY where `parent` holds processes)."""
    try:
        with open(os.path.join(parent, "cgroup.subtree_control")) as f:
            enabled = f.read().split()
    except OSError:
        return []
    done = []
    for controller in controllers:
        try:
            if controller not in enabled:
                _write(os.path.join(parent, "cgroup.subtree_control"), f"+{controller}")
            done.append(controller)
        except OSError:
            pass
    return done


def join(path: str) -> None:
    """Move the calling process into the cgroup at `path` (its children then start there)."""
    _write(os.path.join(path, "cgroup.procs"), str(os.getpid()))


def remove(path: str, wait_s: float = 2.0) -> None:
    """Delete the (empty) cgroup at `path`; its last processes may take a moment to leave it."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                return
            time.sleep(0.01)


def remove_stale(parent: str) -> None:
    """Delete the runner cgroups that trainers which are gone left behind (killed before they could)."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        try:
            os.kill(int(name[len(PREFIX) :].split("-")[0]), 0)
        except ProcessLookupError:
            remove(os.path.join(parent, name), wait_s=0.0)
        except (ValueError, PermissionError):
            pass
