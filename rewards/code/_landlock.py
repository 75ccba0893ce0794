"""Landlock for the fallback: without a mount namespace, what a program may open is restricted by the kernel's
Landlock LSM instead (Linux 5.13+, unprivileged, inherited by everything the program starts).

`restrict(folders, devices, workdir)`, called in the program's process before `execve`, allows reading and
executing beneath the system and interpreter folders, reading and writing the few devices, reading (not writing)
the program's own work folder, and nothing else: not the repository, the test cases, the datasets, the checkpoints,
`/proc`, the home folders, nor creating a single file anywhere (so no inode or disk flood on the host's file
systems, and a bounded clean-up). From ABI 6 (Linux 6.12) it also scopes signals and abstract Unix sockets to the
program's own processes. Standard library only.
"""

from __future__ import annotations

import ctypes
import os

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
CREATE_RULESET_VERSION, RULE_PATH_BENEATH = 1, 1
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
ABI1_FS = (1 << 13) - 1  # execute ... make_sym: the 13 rights of ABI 1
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2  # ABI 6

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64)]
    _fields_ += [("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is missing or disabled (or a seccomp profile hides it)."""
    version = _libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(int(version), 0)


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"landlock {what}: {os.strerror(code)}")
    return result


def restrict(abi: int, folders: list[str], devices: list[str], workdir: str) -> None:
    """Restrict the calling process (and what it starts) to reading `folders` and `workdir` and to reading and
    writing `devices`; needs `no_new_privs`. `abi` from `abi_version()`, at least 1."""
    handled = ABI1_FS | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)
    attr = _RulesetAttr(handled, 0, (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(attr) if abi >= 6 else ctypes.sizeof(ctypes.c_uint64)  # older kernels: fs rights only
    ruleset = _check(_libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0), "ruleset")
    try:
        read, device = EXECUTE | READ_FILE | READ_DIR, READ_FILE | WRITE_FILE | (handled & TRUNCATE)
        rules = [(path, read) for path in folders] + [(path, device) for path in devices]
        for path, access in [*rules, (workdir, READ_FILE | READ_DIR)]:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except (FileNotFoundError, PermissionError):  # not there, or not the program's to reach anyway
                continue
            try:
                file_rights = EXECUTE | READ_FILE | WRITE_FILE | TRUNCATE  # a file's rule holds no folder rights
                rule = _PathBeneath(access if os.path.isdir(path) else access & file_rights, fd)
                _check(_libc.syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0), path)
            finally:
                os.close(fd)
        _check(_libc.syscall(SYS_RESTRICT_SELF, ruleset, 0), "restrict_self")
    finally:
        os.close(ruleset)
