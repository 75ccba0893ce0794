"""The file system a sandboxed program sees, set up by the runner R (`rewards.code._runner`) in its own mount
namespace: a minimal read-only root, a fresh /tmp per job, and a delete that no tree defeats.

The root (`minimal_root`) is a new tmpfs onto which R binds, read-only, only what running the interpreter needs:
`/usr`, `/bin`, `/sbin`, `/lib*`, `/etc` (or their symlinks), the interpreter's own installation (`expose`), and
`/dev/{null,zero,full,random,urandom}`; `/proc` is an empty folder. `pivot_root` makes it `/` and the host's
tree is detached. So no folder where the host (or a trainer) can create a file is there: not `/tmp`, `/var/tmp`,
`/dev/shm`, `/run` (its locks and service sockets), `/home`, `/root`, the repository, ... A Unix socket that
lives in such a folder cannot be named, hence not connected to (a socket file is reachable by path alone, across
network namespaces and whatever its mount's read-only flag). Nothing here imports beyond the standard library.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (generic syscall table, Linux 5.12)
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "ppc64": 203, "s390x": 217}
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
MNT_DETACH = 2
ROOT_FOLDERS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")  # bound, or symlinked, as is
DEVICES = ("null", "zero", "full", "random", "urandom")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64)]
    _fields_ += [("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def _visible(real: str) -> bool:
    """Whether `real` lies in a folder the minimal root binds anyway (a real folder of `ROOT_FOLDERS`), or is `/`
    (an interpreter in /bin: found in the bound /bin or /usr/bin; the host's root is never bound)."""
    if real == "/":
        return True
    top = "/" + real.strip("/").split("/")[0]
    return top[1:] in ROOT_FOLDERS and os.path.isdir(top) and not os.path.islink(top)


def _makedirs(path: str) -> None:
    """`os.makedirs` with mode 0755 whatever the umask (uid 65534 must traverse the folders above an exposed one)."""
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        _makedirs(parent)
    if not os.path.isdir(path):
        os.mkdir(path)
        os.chmod(path, 0o755)


def minimal_root(expose: list[str], tmpfs: str) -> list[str]:
    """Make a minimal read-only tree `/` (see the module's docstring) with a writable tmpfs on `/tmp`; the mount
    points it made. `expose`: folders (the interpreter's installation) to bind at their own path; `tmpfs`: the
    options of /tmp (`size=...,nr_inodes=...`: its bytes and its files)."""
    pivot_root = SYS_PIVOT_ROOT.get(platform.machine())
    if pivot_root is None:
        raise OSError(errno.ENOSYS, f"no pivot_root syscall number known for {platform.machine()}")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Bind sources are opened before /tmp (the new root's staging place) can cover one of them.
    sources = {}
    for path in expose:
        real = os.path.realpath(path)
        if os.path.isdir(real) and not _visible(real) and real not in sources:
            sources[real] = os.open(real, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    new = "/tmp"
    _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=1024,mode=0755")  # read-only below
    made = ["/"]
    for name in ROOT_FOLDERS:
        source = "/" + name
        if os.path.islink(source):
            os.symlink(os.readlink(source), new + source)
        elif os.path.isdir(source):
            os.mkdir(new + source, 0o755)
            _mount(source, new + source, None, MS_BIND | MS_REC)
            made.append(source)
    for real, fd in sources.items():
        _makedirs(new + real)
        _mount(f"/proc/self/fd/{fd}", new + real, None, MS_BIND | MS_REC)
        os.close(fd)
        made.append(real)
    os.mkdir(new + "/dev", 0o755)
    for device in DEVICES:
        if os.path.exists("/dev/" + device):
            os.close(os.open(new + "/dev/" + device, os.O_CREAT | os.O_WRONLY, 0o644))
            _mount("/dev/" + device, new + "/dev/" + device, None, MS_BIND)
            made.append("/dev/" + device)
    for name in ("proc", "tmp", ".old"):
        os.mkdir(f"{new}/{name}", 0o755)
    os.chdir(new)
    _check(_libc.syscall(pivot_root, b".", b".old"), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.old", MNT_DETACH), "umount the old root")
    os.rmdir("/.old")
    _read_only(made)
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"{tmpfs},mode=0755")
    return made


def _read_only(mount_points: list[str]) -> None:
    """Every mount read-only: one recursive `mount_setattr` (Linux 5.12+), else a bind remount of each."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    if _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)) == 0:
        return
    for target in sorted(mount_points, key=len):
        try:
            _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        except OSError:
            pass  # a mount that cannot be remounted on its own; checked below
    if os.access("/usr", os.W_OK) or os.access("/", os.W_OK):
        raise OSError(errno.EPERM, "could not make the file system read-only")


def fresh_tmp(tmpfs: str) -> None:
    """Replace /tmp (work folders, and whatever a program wrote there) by an empty tmpfs: a detach frees the old one
    whatever it holds (a tree deeper than any recursive delete, files a program made read-only), in a time bounded
    by its `nr_inodes` (about 5 ms per 1,000 files)."""
    _check(_libc.umount2(b"/tmp", MNT_DETACH), "umount /tmp")
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"{tmpfs},mode=0755")


def remove_tree(path: str, max_entries: int = 1_000_000) -> None:
    """Delete folder `path` and everything in it, without recursion: a program can nest folders deeper than Python's
    recursion limit (shutil.rmtree's RecursionError) and than PATH_MAX. Descends by directory fd and climbs back by
    `..`, checking each folder's identity on the way up, so that a folder moved elsewhere meanwhile is never
    followed out of the tree; stops with OSError after `max_entries` removals (a process still filling it)."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return
    identities, names = [_identity(fd)], []
    try:
        for _ in range(max_entries):
            subfolder = None
            for entry in list(os.scandir(fd)):
                if entry.is_dir(follow_symlinks=False):
                    subfolder = entry.name
                    break
                os.unlink(entry.name, dir_fd=fd)
            if subfolder is not None:
                child = os.open(subfolder, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
                identities.append(_identity(fd))
                names.append(subfolder)
                continue
            if not names:
                os.close(fd)
                fd = -1
                os.rmdir(path)
                return
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            identities.pop()
            if _identity(fd) != identities[-1]:
                raise OSError(errno.ESTALE, f"a folder under {path} was moved while it was being deleted")
            os.rmdir(names.pop(), dir_fd=fd)
        raise OSError(errno.EMLINK, f"{path} still had entries after {max_entries} removals")
    finally:
        if fd >= 0:
            os.close(fd)


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino
