"""Freed memory handed back to the system between the stages of a run (evaluation, training, evaluation).

glibc keeps what a process frees in its heap for later allocations, so the peak RSS of a stage sits on top of what the
stages before it freed but never returned: in `make demo` the evaluation before training left ~0.7 GB of free heap
under the training that followed (measured on SmolLM2, AMD EPYC Zen 4). `release_free_memory` collects Python's
garbage and asks glibc to return its free pages (`malloc_trim(0)`, ~0.1 s); elsewhere (macOS, musl) it only collects.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc


@functools.cache
def _malloc_trim():
    """glibc's `malloc_trim`, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None


def release_free_memory() -> bool:
    """Collect garbage and return free heap pages to the system; True where glibc's `malloc_trim` ran."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
