"""One run per output directory: an exclusive lock held for the run's whole life.

Two trainings started into one `output_dir` both ran and both exited 0: every step was logged twice in
`log_history.jsonl`, and a `checkpoint-N` could hold one run's model beside the other's optimizer. Here the run takes
`flock(LOCK_EX | LOCK_NB)` on `output_dir/.drgrpo.lock` before it reads or writes anything there, and holds it until
it returns. The kernel releases a flock when its process dies however it dies (SIGKILL, OOM, a power cut ends the
machine), so a killed run never blocks the next one: no stale lock files to delete by hand. The file holds the
holder's pid, host and start time, which a second run names in its one-line refusal. Under `accelerate launch` only
the main process takes it (`drgrpo.run.training.train`): the other ranks are the same run.

flock is advisory and per open file: it holds between processes on one machine and, on most network filesystems
(NFSv4, Lustre with `flock` mounts), between machines; where a filesystem ignores it, the lock does nothing and the
run goes on as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from drgrpo.core.errors import UsageError, command_flag

LOCK_FILE = ".drgrpo.lock"


def _holder(path: Path) -> str:
    """Who holds the lock, from the file's text ("pid 123 on host h since ..."), or a stand-in when unreadable."""
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text or "another process (its pid was not recorded yet)"


@contextlib.contextmanager
def hold_output_dir(output_dir: str | Path) -> Iterator[None]:
    """Hold `output_dir`'s run lock for the block (creating the folder); a `UsageError` naming the run that holds it
    when another process does."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / LOCK_FILE
    handle = open(path, "a+")  # held open for the whole run: the open file *is* the lock
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"output_dir {str(output_dir)!r} is in use by another run ({_holder(path)}): one output_dir holds one "
                f"run at a time. Wait for that run to end (or stop it), or train into another folder "
                f"({command_flag('--output_dir DIR')})."
            ) from None
        handle.seek(0)
        handle.truncate()
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        handle.write(f"pid {os.getpid()} on host {socket.gethostname()} since {started}\n")
        handle.flush()
        yield
    finally:
        handle.close()  # releases the lock
