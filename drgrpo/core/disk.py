"""A full disk, said as one line naming the folder, the bytes free and the fix, instead of the writer's traceback.

Each writer of a run reports a full disk its own way: Python's `OSError: [Errno 28] No space left on device`,
safetensors' `SafetensorError: ... No space left on device (os error 28)`, and torch's `RuntimeError: [enforce fail at
inline_container.cc:672] unexpected pos 576 vs 534` (its zip writer checks positions, not errno; measured on a 2 MB
tmpfs). None names the run's `output_dir`. `disk_full` recognises all three (an errno of ENOSPC or EDQUOT anywhere in
the exception's chain, their text, or torch's writer failing on a disk with no room left) and `DiskFullError` is the
one line the scripts print for it (`drgrpo.core.errors.run_main`).

Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
from collections.abc import Iterator
from pathlib import Path

from drgrpo.core.errors import RecipeError, command_flag

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "os error 28", "os error 122")
# torch's zip writer (caffe2's inline_container.cc) reports a short write by position, without an errno.
TORCH_WRITE_FAILURES = ("inline_container.cc", "PytorchStreamWriter failed")
# Below this many free bytes a failed write of torch's zip writer is a full disk (a real one leaves ~0 free).
NEARLY_FULL_BYTES = 1 << 20


class DiskFullError(RecipeError):
    """The disk that holds a run's output ran out of space while the run wrote to it."""

    traceback_hint = False


def free_bytes(path: str | Path) -> int | None:
    """Bytes free to this user on the filesystem that holds `path` (or its nearest existing parent); None if unknown."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def disk_full(error: BaseException, path: str | Path) -> bool:
    """Whether `error`, raised while writing under `path`, means the disk that holds `path` is full."""
    for link in _chain(error):
        if isinstance(link, OSError) and link.errno in FULL_ERRNOS:
            return True
        text = str(link)
        if any(marker in text for marker in FULL_TEXTS):
            return True
        if any(marker in text for marker in TORCH_WRITE_FAILURES):
            free = free_bytes(path)
            return free is not None and free < NEARLY_FULL_BYTES
    return False


def human_bytes(count: int | None) -> str:
    """`1.5 MB`-style text for a byte count (None: unknown)."""
    if count is None:
        return "an unknown number of bytes"
    size = float(count)
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{count} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def disk_full_error(output_dir: str | Path, doing: str, after: str = "", needed: int | None = None) -> DiskFullError:
    """The one-line error for a full disk under `output_dir` while `doing` (e.g. "saving checkpoint-4"); `after` says
    what was kept ("checkpoint-2 stays the newest"), `needed` roughly how many bytes the write takes."""
    free = free_bytes(output_dir)
    need = f"; it takes about {human_bytes(needed)}" if needed else ""
    kept = f" {after}." if after else ""
    return DiskFullError(
        f"output_dir {str(output_dir)!r}: the disk is full ({human_bytes(free)} free) while {doing}{need}.{kept} "
        "Free space on that disk and rerun the same command (it resumes from the newest complete checkpoint), or copy "
        f"output_dir to a larger disk and rerun with {command_flag('--output_dir COPY')}."
    )


@contextlib.contextmanager
def disk_full_as_one_line(output_dir: str | Path, doing: str) -> Iterator[None]:
    """Turn a full-disk error raised inside the block into `disk_full_error(output_dir, doing)`; others pass."""
    try:
        yield
    except Exception as error:  # torch's RuntimeError, OSError, safetensors' SafetensorError (an Exception)
        if not isinstance(error, DiskFullError) and disk_full(error, output_dir):
            raise disk_full_error(output_dir, doing) from error
        raise
