"""A CPU cgroup per sandbox runner, where the machine lets the trainer make one: CPU fairness between completions.

Each runner (and so each program: one at a time) gets a cgroup of its own under the trainer's cgroup for the `cpu`
controller, with the default weight (every runner the same share, however many processes its program has) and a
quota of one CPU (`cpu.max` on cgroup v2, `cpu.cfs_quota_us` on v1). A program whose fifteen children spin then
takes one runner's share, not fifteen; `setsid` (refused by the seccomp filter anyway) gains nothing, as
scheduler autogroups only apply in the root cgroup.

Possible where the cgroup folder is writable (a root trainer on most machines; a systemd delegation) and, on v2,
where `cpu` can be enabled for the trainer's cgroup's children (the kernel refuses that in a cgroup that holds
processes, other than the root one: e.g. inside most containers and Slurm steps). Elsewhere `runner_cgroup`
returns None and the sandbox runs without (docs/code-rewards.md says what is left). Standard library only.
"""

from __future__ import annotations

import errno
import os
import time

CPU_PERIOD_US = 100_000  # quota of one CPU: CPU_PERIOD_US of CPU time per CPU_PERIOD_US of wall time
PREFIX = "drgrpo-runner-"


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def cpu_cgroup_folder() -> tuple[str, int] | None:
    """(the folder of this process's cgroup for the `cpu` controller, the cgroup version), or None."""
    try:
        with open("/proc/self/cgroup") as f:
            memberships = f.read()
        with open("/proc/self/mountinfo") as f:
            mounts = f.read()
    except OSError:
        return None
    return find_cpu_folder(memberships, mounts, _has_cpu)


def find_cpu_folder(memberships: str, mounts: str, has_cpu) -> tuple[str, int] | None:
    """`cpu_cgroup_folder` from the texts of /proc/self/cgroup and /proc/self/mountinfo; `has_cpu(folder)`: whether
    a v2 folder offers the `cpu` controller. v1 first: a hybrid machine has `cpu` there, and a v2 tree without it."""
    entries = [line.split(":", 2) for line in memberships.splitlines() if line.count(":") >= 2]
    for version in (1, 2):
        for hierarchy, controllers, path in entries:
            if (version == 1 and "cpu" not in controllers.split(",")) or (version == 2 and hierarchy != "0"):
                continue
            for line in mounts.splitlines():
                fields = line.split()
                if "-" not in fields:
                    continue
                separator = fields.index("-")
                fstype, options = fields[separator + 1], fields[separator + 3].split(",")
                if not (fstype == "cgroup" and "cpu" in options if version == 1 else fstype == "cgroup2"):
                    continue
                root, mount_point = fields[3].rstrip("/"), fields[4]
                if path != root and not path.startswith(root + "/") and root:
                    continue
                folder = (mount_point + path[len(root) :]).rstrip("/") or "/"
                if version == 2 and not has_cpu(folder):
                    break
                return folder, version
    return None


def _has_cpu(folder: str) -> bool:
    try:
        with open(os.path.join(folder, "cgroup.controllers")) as f:
            return "cpu" in f.read().split()
    except OSError:
        return False


def runner_cgroup(name: str) -> str | None:
    """Create the cgroup `name` (one CPU's quota, default weight) beside the trainer's; its folder, or None where
    the machine does not allow it."""
    found = cpu_cgroup_folder()
    if found is None:
        return None
    parent, version = found
    remove_stale(parent)
    path = os.path.join(parent, name)
    try:
        if version == 2:
            with open(os.path.join(parent, "cgroup.subtree_control")) as f:
                enabled = "cpu" in f.read().split()
            if not enabled:
                _write(os.path.join(parent, "cgroup.subtree_control"), "+cpu")  # EBUSY where it holds processes
        os.mkdir(path)
    except OSError:
        return None
    try:
        if version == 2:
            _write(os.path.join(path, "cpu.max"), f"{CPU_PERIOD_US} {CPU_PERIOD_US}")
        else:
            _write(os.path.join(path, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
            _write(os.path.join(path, "cpu.cfs_quota_us"), str(CPU_PERIOD_US))
    except OSError:
        remove(path)
        return None
    return path


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
