"""The load average while something runs: wall times on a shared machine mean little without it.

`LoadSampler` reads the 1-minute load average every `interval` seconds in a daemon thread while its `with` block
runs; `mean` is what a report prints beside the block's wall time (`make bias-real`, `make compare`). A run resumed
over several commands adds one `(seconds, load)` segment per command to a file (`add_segment`); `segments_total` is
its whole wall time and time-weighted load.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path


def load_average() -> float | None:
    """The 1-minute load average, or None where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


class LoadSampler:
    """Samples the 1-minute load average at the start, every `interval` seconds and at the end of a `with` block."""

    def __init__(self, interval: float = 30.0) -> None:
        self.interval = interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        value = load_average()
        if value is not None:
            self.samples.append(value)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> LoadSampler:
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    @property
    def mean(self) -> float | None:
        """Mean of the samples so far (None without any)."""
        return round(sum(self.samples) / len(self.samples), 2) if self.samples else None


def add_segment(path: str | Path, seconds: float, load: float | None) -> None:
    """Append one command's wall time and mean load to the JSON list in `path` (created if missing)."""
    path = Path(path)
    segments = json.loads(path.read_text()) if path.is_file() else []
    segments.append({"seconds": round(seconds, 1), "load": load})
    path.write_text(json.dumps(segments) + "\n")


def segments_total(path: str | Path) -> tuple[float, float | None]:
    """(total seconds, load weighted by each segment's seconds) of the segments in `path`; (0, None) without any."""
    path = Path(path)
    segments = json.loads(path.read_text()) if path.is_file() else []
    seconds = sum(s["seconds"] for s in segments)
    timed = [(s["seconds"], s["load"]) for s in segments if s["load"] is not None]
    weight = sum(t for t, _ in timed)
    load = round(sum(t * v for t, v in timed) / weight, 2) if weight else None
    return seconds, load
