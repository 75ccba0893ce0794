"""A wall-clock budget for one command of a long experiment, so that a shared machine's CPU lock is held for a bounded
time and the next command continues where this one stopped.

`Deadline(seconds)` is checked at safe points only: after a training step (`DeadlineCallback` saves a checkpoint and
stops the trainer when the next step would not fit; the run resumes from it), before a mechanism batch (likewise)
and before a held-out evaluation (each kept when done). Work stopped by its deadline raises `OutOfTime`, which says
what is saved; a script turns it into its exit status `OUT_OF_TIME_EXIT` ("rerun to continue"). `Deadline(None)`
never expires (`make bias-real` run in one go).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from transformers import TrainerCallback

# EX_TEMPFAIL of sysexits.h: "try again later". A driver reruns the command while it exits with this status.
OUT_OF_TIME_EXIT = 75


class OutOfTime(Exception):
    """The command's time budget ran out before its work was done; what was done is saved."""


@dataclass
class Deadline:
    """`seconds` from `start` (monotonic clock); None: no limit."""

    seconds: float | None = None
    start: float = field(default_factory=time.monotonic)

    def remaining(self) -> float:
        """Seconds left (infinite without a limit, negative once past)."""
        if self.seconds is None:
            return math.inf
        return self.start + self.seconds - time.monotonic()

    def expired(self) -> bool:
        return self.remaining() <= 0

    def check(self, before: str) -> None:
        """Raise `OutOfTime` naming what would have started next, if the budget is spent."""
        if self.expired():
            raise OutOfTime(f"time budget of {self.seconds / 60:.0f} min spent before {before}")


class DeadlineCallback(TrainerCallback):
    """Ends training after the last optimizer step that fits the budget (the next would not finish in time, judged
    by the one before it), saving a checkpoint there whatever `save_steps` says, so that the rerun resumes from that
    step and loses nothing."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self._step_end: float | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._step_end = time.monotonic()
        return control

    def on_step_end(self, args, state, control, **kwargs):
        now = time.monotonic()
        last_step = now - self._step_end if self._step_end is not None else 0.0
        self._step_end = now
        if self.deadline.remaining() < last_step and state.global_step < state.max_steps:
            control.should_save = True
            control.should_training_stop = True
        return control
