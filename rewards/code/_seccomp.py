"""The seccomp filter every sandboxed program runs under: the system calls that namespaces do not isolate, refused.

A classic BPF program, assembled here and installed by the runner in each program's process just before `execve`
(after `no_new_privs`; it is inherited by everything the program starts and cannot be removed). It refuses:

- `add_key`, `request_key`, `keyctl` (EPERM): kernel keyrings are not namespaced. Without this, a program could
  read the keys of the trainer's session keyring (it inherits it), leave keys in its uid's user keyring for the
  next program to find, and fill its uid's key quota for every other process of that uid;
- `socket` of any family but the allowed ones, `socketpair` of any but `AF_UNIX` (EAFNOSUPPORT): `AF_VSOCK` (the
  VM's host-guest channel), `AF_NETLINK`, `AF_PACKET`, `AF_ALG`, Bluetooth, CAN, TIPC, RDS, XDP, ... With namespaces
  `AF_UNIX`, `AF_INET` and `AF_INET6` remain (see docs/code-rewards.md: why each is safe there); in the fallback
  (no network namespace) no `socket()` at all, only `socketpair(AF_UNIX)`; and where the programs cannot have a uid
  of their own (`unix_sockets=False`: an unprivileged trainer), no `AF_UNIX` either, in `socket()` or
  `socketpair()`: files sent over one and left in flight outlive the program, counted against its uid (issue 52),
  and a filter cannot read `sendmsg`'s control data to refuse just that;
- `io_uring_setup`, `io_uring_enter`, `io_uring_register` (EPERM): io_uring can create sockets and do I/O without
  the system calls this filter sees;
- `setsid` (EPERM): a new session is a new scheduler autogroup, with a CPU share as large as a whole program's;
  fifteen children each in their own would starve the other completions' programs;
- `unshare`, `setns`, and `clone` with a `CLONE_NEW*` flag (EPERM); `clone3` (ENOSYS: its flags are out of the
  filter's reach; the C library then falls back to `clone`): a program in a user namespace of its own could mount a
  tmpfs of its own, outside the inode and size limits of /tmp;
- what reaches beyond the program through the files it shares with the host and the other programs (the read-only
  system folders) or the whole kernel (issue 34): `sync`, `syncfs` (EPERM: writeback of the host's dirty pages,
  waited for uninterruptibly); `flock`, the lock commands of `fcntl` (`F_GETLK`, `F_SETLK`, `F_SETLKW` and their
  `F_OFD_*` forms), leases and `F_NOTIFY` (EPERM, which sqlite, say, reports at once, where ENOLCK or EACCES would
  make it retry for its 5 s busy timeout), checked on `fcntl`'s command as `clone`'s flags are: a lock on
  `/etc/passwd` is a channel between two programs and can block a host process; `inotify_init`, `inotify_init1`,
  `fanotify_init` (EPERM: watching a shared file is a channel too); `perf_event_open`, `bpf`, `userfaultfd`,
  `syslog`, `cachestat` (EPERM: hardware counters, kernel programs, the exploits' favourite fault handler, the
  kernel log, page-cache residency of shared files);
- where the runner has no memory cgroup (`accounted_memory=False`), `memfd_create`, `memfd_secret` and the SysV
  `shmget` and `msgget` (EPERM): their pages belong to no process, so no rlimit and no OOM killer sees them; where
  the program has no IPC namespace of its own (`private_ipc=False`, a fallback that may not make one), every SysV
  and POSIX IPC object (`shmget`, `msgget`, `semget`, `mq_open`: EPERM), which would be the host's;
- any system call of another ABI (32-bit `int 0x80` on x86_64, x32): the process is killed, as the numbers above
  would not mean the same calls.

`join_fresh_session_keyring` (called just before the filter) replaces the inherited session keyring by an empty
one. Syscall numbers are per architecture: x86_64 (arch/x86/entry/syscalls/syscall_64.tbl), aarch64 and riscv64
(both the generic table, include/uapi/asm-generic/unistd.h); elsewhere `program_filter` raises, and the sandbox
refuses to start. Standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import socket
import sys

_GENERIC = {"socket": 198, "socketpair": 199, "clone": 220, "setsid": 157, "add_key": 217, "request_key": 218}
_GENERIC |= {"keyctl": 219, "unshare": 97, "setns": 268, "sync": 81, "syncfs": 267, "flock": 32, "fcntl": 25}
_GENERIC |= {"inotify_init1": 26, "fanotify_init": 262, "perf_event_open": 241, "bpf": 280, "userfaultfd": 282}
_GENERIC |= {"syslog": 116, "memfd_create": 279, "shmget": 194, "msgget": 186, "semget": 190, "mq_open": 180}
_X86_64 = {"socket": 41, "socketpair": 53, "clone": 56, "setsid": 112, "add_key": 248, "request_key": 249}
_X86_64 |= {"keyctl": 250, "unshare": 272, "setns": 308, "sync": 162, "syncfs": 306, "flock": 73, "fcntl": 72}
_X86_64 |= {"inotify_init": 253, "inotify_init1": 294, "fanotify_init": 300, "perf_event_open": 298, "bpf": 321}
_X86_64 |= {"userfaultfd": 323, "syslog": 103, "memfd_create": 319, "shmget": 29, "msgget": 68, "semget": 64}
_X86_64 |= {"mq_open": 240}
# machine -> (AUDIT_ARCH_* of its native ABI, its syscall numbers, whether nr >= 0x40000000 is another ABI: x32)
ARCHITECTURES = {
    "x86_64": (0xC000003E, _X86_64, True),
    "aarch64": (0xC00000B7, _GENERIC, False),
    "riscv64": (0xC00000F3, _GENERIC, False),
}
_SAME_EVERYWHERE = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "clone3": 435}
_SAME_EVERYWHERE |= {"memfd_secret": 447, "cachestat": 451}
NAMESPACE_FLAGS = 0x80 | 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
REFUSED = ("add_key", "request_key", "keyctl", "io_uring_setup", "io_uring_enter", "io_uring_register", "setsid")
REFUSED += ("unshare", "setns", "sync", "syncfs", "inotify_init", "inotify_init1", "fanotify_init")
REFUSED += ("perf_event_open", "bpf", "userfaultfd", "syslog", "cachestat")
UNACCOUNTED = ("memfd_create", "memfd_secret", "shmget", "msgget")  # refused without a memory cgroup
SHARED_IPC = ("shmget", "msgget", "semget", "mq_open")  # refused without an IPC namespace of the program's own
# fcntl commands (include/uapi/asm-generic/fcntl.h, linux/fcntl.h; the same on every 64-bit architecture).
FCNTL_LOCKS = (5, 6, 7, 36, 37, 38)  # F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW
FCNTL_REFUSED = (1024, 1025, 1026)  # F_SETLEASE, F_GETLEASE, F_NOTIFY

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_KILL_PROCESS, _ERRNO, _ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24  # offsets in struct seccomp_data: nr, arch, low 32 bits of args[0], args[1]
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def socket_families(namespaces: bool, unix_sockets: bool = True) -> tuple[int, ...]:
    """The `socket()` families a program may create: with its own network namespace the three whose every address
    belongs to that (empty) namespace or to its minimal root (`AF_UNIX` only where `unix_sockets`); without one (the
    fallback), none."""
    return ((socket.AF_UNIX,) if unix_sockets else ()) + (socket.AF_INET, socket.AF_INET6) if namespaces else ()


def program_filter(
    namespaces: bool,
    machine: str | None = None,
    accounted_memory: bool = True,
    private_ipc: bool = True,
    unix_sockets: bool = True,
) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions, for this machine's architecture (or `machine`).
    `accounted_memory`: the runner has a memory cgroup; `private_ipc`: the program has an IPC namespace of its own;
    `unix_sockets`: it has a uid of its own outside (else no `AF_UNIX` socket: nothing can be put in flight)."""
    machine = machine or platform.machine()
    if machine not in ARCHITECTURES or sys.byteorder != "little":
        known = ", ".join(ARCHITECTURES)
        raise OSError(errno.ENOSYS, f"the sandbox's seccomp filter knows the system calls of {known}, not {machine}")
    arch, numbers, x32 = ARCHITECTURES[machine]
    numbers = numbers | _SAME_EVERYWHERE
    refused = [*REFUSED, *([] if accounted_memory else UNACCOUNTED), *([] if private_ipc else SHARED_IPC)]
    code: list[tuple] = [(_LD_ABS, 0, 0, _ARCH), (_JEQ, "next", "kill", arch), (_LD_ABS, 0, 0, _NR)]
    if x32:
        code.append((_JGE, "kill", "next", 0x40000000))
    code += [(_JEQ, "eperm", "next", number) for number in sorted({numbers[n] for n in refused if n in numbers})]
    code += [(_JEQ, "eperm", "next", numbers["flock"]), (_JEQ, "fcntl", "next", numbers["fcntl"])]
    code += [(_JEQ, "enosys", "next", numbers["clone3"]), (_JEQ, "clone", "next", numbers["clone"])]
    code += [(_JEQ, "socket", "next", numbers["socket"]), (_JEQ, "pair", "next", numbers["socketpair"])]
    code += [(_RET, 0, 0, _ALLOW)]
    labels = {"clone": len(code)}
    code += [(_LD_ABS, 0, 0, _ARG0), (_JSET, "eperm", "allow", NAMESPACE_FLAGS)]
    labels["fcntl"] = len(code)
    code.append((_LD_ABS, 0, 0, _ARG1))
    code += [(_JEQ, "eperm", "next", command) for command in (*FCNTL_LOCKS, *FCNTL_REFUSED)]
    code.append((_RET, 0, 0, _ALLOW))
    pairs = (socket.AF_UNIX,) if unix_sockets else ()
    for label, families in (("socket", socket_families(namespaces, unix_sockets)), ("pair", pairs)):
        labels[label] = len(code)
        code.append((_LD_ABS, 0, 0, _ARG0))
        code += [(_JEQ, "allow", "next", family) for family in families]
        code.append((_RET, 0, 0, _ERRNO | errno.EAFNOSUPPORT))
    for label, value in (("allow", _ALLOW), ("kill", _KILL_PROCESS), ("eperm", _ERRNO | errno.EPERM)):
        labels[label] = len(code)
        code.append((_RET, 0, 0, value))
    labels["enosys"] = len(code)
    code.append((_RET, 0, 0, _ERRNO | errno.ENOSYS))

    def offset(index: int, target) -> int:
        jump = 0 if target in (0, "next") else labels[target] - index - 1
        assert 0 <= jump < 256, (index, target)
        return jump

    return [(op, offset(i, jt), offset(i, jf), k) for i, (op, jt, jf, k) in enumerate(code)]


class ProgramFilter:
    """The filter, assembled once (in the runner) and installed in each program's process by `install()`."""

    def __init__(
        self, namespaces: bool, accounted_memory: bool = True, private_ipc: bool = True, unix_sockets: bool = True
    ) -> None:
        options = {"accounted_memory": accounted_memory, "private_ipc": private_ipc, "unix_sockets": unix_sockets}
        instructions = program_filter(namespaces, **options)
        self._array = (_SockFilter * len(instructions))(*(_SockFilter(*ins) for ins in instructions))
        self._program = _SockFprog(len(instructions), self._array)
        self._libc = ctypes.CDLL(None, use_errno=True)

    def install(self) -> None:
        """Filter the calling process and everything it will start (needs `no_new_privs` or CAP_SYS_ADMIN)."""
        if self._libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(self._program), 0, 0) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"seccomp filter: {errno.errorcode.get(code, code)}")


KEYCTL_JOIN_SESSION_KEYRING = 1


def join_fresh_session_keyring() -> None:
    """Give the calling process a new, empty, anonymous session keyring in place of the one it inherited (the
    trainer's, where the trainer runs in a login session or a service): what the kernel looks up there on its
    behalf (NFS/CIFS/AFS credentials, fscrypt keys) is then nothing. A kernel without keyrings (ENOSYS), or an outer
    seccomp profile that refuses `keyctl` (EPERM), has nothing to inherit either."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    number = ARCHITECTURES[platform.machine()][1]["keyctl"]
    if libc.syscall(number, KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EPERM):
            raise OSError(code, f"keyctl(JOIN_SESSION_KEYRING): {os.strerror(code)}")
