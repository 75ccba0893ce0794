"""A folder saved whole or not at all: written under a staging name, fsynced, then renamed into place.

transformers writes a checkpoint straight into `output_dir/checkpoint-N`, file after file, and fsyncs nothing: a kill
leaves a half-written folder under the final name, and a power loss can leave files the page cache never wrote out.
Here a checkpoint is written into `output_dir/.staging/checkpoint-N`, every file and folder of it is fsynced, and
one `rename` puts it in place (atomic on one filesystem: POSIX `rename(2)`), after which the parent folder is fsynced
so that the rename itself survives a power loss. A crash before the rename leaves only the staging folder, which no
lister takes for a checkpoint and which the next save or run removes.

Standard library only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

STAGING_FOLDER = ".staging"  # not `checkpoint-*`: neither transformers' rotation nor ours ever lists it
REPLACED_SUFFIX = ".replaced"


def staging_root(output_dir: str | Path) -> Path:
    """The folder under which a checkpoint of `output_dir` is written before it is renamed into place."""
    return Path(output_dir) / STAGING_FOLDER


def remove_staging(output_dir: str | Path) -> None:
    """Remove what an interrupted save left in `output_dir` (its staging folder, a replaced checkpoint)."""
    output_dir = Path(output_dir)
    shutil.rmtree(staging_root(output_dir), ignore_errors=True)
    for leftover in output_dir.glob(f".checkpoint-*{REPLACED_SUFFIX}"):
        shutil.rmtree(leftover, ignore_errors=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: str | Path) -> None:
    """fsync every file and folder under `folder` (the folder included), deepest first."""
    folder = Path(folder)
    for root, _, files in os.walk(folder, topdown=False):
        for name in files:
            _fsync(Path(root) / name)
        _fsync(Path(root))


def publish_folder(staged: str | Path, final: str | Path) -> None:
    """Make the whole, staged folder `staged` appear as `final` in one rename, durably.

    `staged` is fsynced first; a folder already at `final` (a stale one of the same step) is moved aside, then
    removed after the rename. The parent folder is fsynced after the rename."""
    staged, final = Path(staged), Path(final)
    fsync_tree(staged)
    replaced = None
    if final.exists():
        replaced = final.with_name(f".{final.name}{REPLACED_SUFFIX}")
        shutil.rmtree(replaced, ignore_errors=True)
        os.rename(final, replaced)
    os.rename(staged, final)
    _fsync(final.parent)
    if replaced is not None:
        shutil.rmtree(replaced, ignore_errors=True)
