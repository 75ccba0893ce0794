"""The cgroups of a sandbox runner, where the machine lets the trainer make them: CPU fairness between completions
and a memory limit that sees what no process holds.

Each runner (and so each program: one at a time) gets a cgroup of its own beside the trainer's, per controller:
- `cpu`: the default weight (every runner the same share, however many processes its program has) and a quota of
  one CPU (`cpu.max` on cgroup v2, `cpu.cfs_quota_us` on v1). A program whose fifteen children spin then takes one
  runner's share, not fifteen; `setsid` (refused by the seccomp filter anyway) gains nothing, as scheduler
  autogroups only apply in the root cgroup.
- `memory`: a folder holding `runner` (the runner itself) and `program-0` ... `program-{PROGRAM_CGROUPS - 1}`, which
  its programs take in turn (issue 52: each program's memory is accounted apart, so that what one leaves charged,
  e.g. files kept in flight past its end, never counts against the next; `rewards.code._leftovers` checks that a
  program cgroup's memory came back before it is taken again). Each has a limit (`memory.max` on v2,
  `memory.limit_in_bytes` on v1; swap the same, where it is accounted) of the program's `memory_mb` + its /tmp
  tmpfs + `RUNNER_MEMORY_MB` (the runner's share before issue 52, now the headroom for a program cgroup's init and
  what the last program there left uncollected). It counts what the address-space limit does not: the pages of
  memfds, SysV segments and /tmp files, which no process's RSS shows; past it the kernel's OOM killer acts inside
  the cgroup, on the program first (its `oom_score_adj` is 1000).

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
RUNNER_MEMORY_MB = 64  # a program cgroup's headroom: its init (~5 MiB), kernel memory, an earlier program's leftovers
CONTROLLERS = ("cpu", "memory")
PROGRAM_CGROUPS = 2  # one program runs in one while the last one's leftovers are collected in the other
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


def no_cgroups() -> dict:
    """What `runner_cgroups` gives where the machine allows none."""
    return {"cpu": None, "memory": None, "programs": [], "version": None, "join": [], "folders": []}


def runner_cgroups(name: str, memory_bytes: int) -> dict:
    """Create the cgroups of runner `name` beside the trainer's, where the machine allows them (see the module's
    docstring). Returns `cpu`: the folder whose quota the runner and its programs share; `memory`: the runner's own
    memory cgroup; `programs`: its programs' memory cgroups; `version`: the memory controller's cgroup version;
    `join`: the folders the runner joins; `folders`: every folder made, deepest first (None or [] where the machine
    does not allow it). On v2 both controllers share one tree, whose processes live in its leaves."""
    found = {c: controller_folder(c) for c in CONTROLLERS}
    cgroups = no_cgroups()
    for parent, version in sorted({f for f in found.values() if f is not None}):
        path = os.path.join(parent, name)
        remove_stale(parent)
        try:
            os.mkdir(path)
        except OSError:
            continue
        controllers = [c for c in CONTROLLERS if found[c] == (parent, version)]
        enabled = _enable(parent, controllers) if version == 2 else controllers
        made, join = [path], path
        if "cpu" in enabled and _configure(path, "cpu", version, memory_bytes):
            cgroups["cpu"] = path
        if "memory" in enabled:
            children = _memory_children(path, version, memory_bytes)
            if children:
                cgroups.update(memory=children[0], programs=children[1:], version=version)
                made, join = [*children, path], children[0]
        if made == [path] and cgroups["cpu"] != path:
            remove(path)
            continue
        cgroups["join"].append(join)
        cgroups["folders"] = made + cgroups["folders"]
    return cgroups


def _configure(path: str, controller: str, version: int, memory_bytes: int) -> bool:
    """Write `controller`'s settings into the cgroup at `path`; whether it worked."""
    try:
        for file, value, required in _settings(controller, version, memory_bytes):
            try:
                _write(os.path.join(path, file), value)
            except FileNotFoundError:
                if required:
                    raise
        return True
    except OSError:
        return False


def _memory_children(path: str, version: int, memory_bytes: int) -> list[str]:
    """`runner` and the program cgroups under `path`, each limited to `memory_bytes`; [] (and none left) where the
    machine refuses one."""
    made: list[str] = []
    try:
        if version == 2:  # a v2 cgroup whose children have a controller holds no process itself: they live in `runner`
            _write(os.path.join(path, "cgroup.subtree_control"), "+memory")
        for child in ("runner", *(f"program-{k}" for k in range(PROGRAM_CGROUPS))):
            made.append(os.path.join(path, child))
            os.mkdir(made[-1])
            if not _configure(made[-1], "memory", version, memory_bytes):
                raise OSError(f"cannot limit the memory of {made[-1]}")
        return made
    except OSError:
        for folder in reversed(made):
            remove(folder, wait_s=0.0)
        return []


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
            path = os.path.join(parent, name)
            for child in _subfolders(path):
                remove(child, wait_s=0.0)
            remove(path, wait_s=0.0)
        except (ValueError, PermissionError):
            pass


def _subfolders(path: str) -> list[str]:
    try:
        return [entry.path for entry in os.scandir(path) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []
