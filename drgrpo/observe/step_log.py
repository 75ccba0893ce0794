"""What a run prints per logged step: one short line of the numbers a user watches, instead of transformers' dict of
every metric (~35 keys, ~1,000 characters a step), which still goes, whole, to `output_dir/log_history.jsonl` (one
JSON object per log, written as it happens, so a killed run keeps it) and to `trainer_state.json` (at checkpoints
and at the end).

    step 3/15 | reward 0.412 | pass 40.6% | length 35.2 (12-64) | truncated 6.2% | 71.3 s/step, 2 threads

`s/step` is wall time: the seconds since the line before (or since training started), per step, so that the lines
add up to the run's time; an evaluation, which prints a line of its own, is left out of the next step's, a checkpoint
save is counted in it. TRL's own `step_time` (its `training_step` alone, without the optimizer, callbacks and saves:
0.0-0.1 s on the tiny model's 0.3 s steps) stays in `log_history.jsonl` under its own name. `threads` is torch's
thread count on a CPU run (`drgrpo/core/threads.py` chooses it before every step; `1-2 threads` when it changed).

`StepLineCallback` replaces transformers' `ProgressCallback` (the tqdm bar, which printed the dict) and
`StepLinePrinter` its `PrinterCallback` (`disable_tqdm: true`); `drgrpo.run.training.train` swaps them in.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from drgrpo.core.disk import disk_full_as_one_line
from drgrpo.observe.metric_names import PASS_RATE, TRL_MEAN_LENGTH, TRL_REWARD, TRUNCATION_RATE

LOG_FILE = "log_history.jsonl"
TRL_MIN_LENGTH = "completions/min_length"
TRL_MAX_LENGTH = "completions/max_length"
TRL_CLIPPED_RATIO = "completions/clipped_ratio"  # TRL's share of completions cut at max_completion_length


def _number(logs: Mapping[str, Any], key: str) -> float | None:
    value = logs.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def step_line(
    logs: Mapping[str, Any],
    step: int,
    max_steps: int | None = None,
    first_step: int = 0,
    *,
    seconds: float | None = None,
    threads: str | None = None,
) -> str:
    """The one-line summary of a training log entry (`eval_`-prefixed keys for an evaluation's); metrics a run does
    not log are left out. The end-of-training entry (`train_runtime`) becomes this invocation's steps and time:
    `first_step` is the step it started from (a resumed run's checkpoint), so its steps are `step - first_step`.
    `seconds`: wall seconds a step (`StepClock`); `threads`: torch's thread count on a CPU run."""
    if "train_runtime" in logs:
        seconds, trained = float(logs["train_runtime"]), step - first_step
        per_step = f" ({seconds / trained:.1f} s/step)" if trained > 0 else ""
        total = f" (resumed at step {first_step}: {step} in all)" if first_step else ""
        return (
            f"trained {trained} step{'' if trained == 1 else 's'}{total} in {seconds:.1f} s{per_step}; every step's "
            f"metrics: {LOG_FILE} in "
            "output_dir"
        )
    prefix = "eval_" if any(key.startswith("eval_") for key in logs) else ""
    get = lambda key: _number(logs, prefix + key)  # noqa: E731
    parts = [("eval at step " if prefix else "step ") + (f"{step}/{max_steps}" if max_steps else str(step))]
    if (reward := get(TRL_REWARD)) is not None:
        parts.append(f"reward {reward:.3f}")
    if (pass_rate := get(PASS_RATE)) is not None:
        parts.append(f"pass {100 * pass_rate:.1f}%")
    if (length := get(TRL_MEAN_LENGTH)) is not None:
        low, high = get(TRL_MIN_LENGTH), get(TRL_MAX_LENGTH)
        spread = f" ({low:.0f}-{high:.0f})" if low is not None and high is not None else ""
        parts.append(f"length {length:.1f}{spread}")
    truncated = get(TRUNCATION_RATE)
    truncated = get(TRL_CLIPPED_RATIO) if truncated is None else truncated
    if truncated is not None:
        parts.append(f"truncated {100 * truncated:.1f}%")
    if seconds is not None or threads is not None:
        timing = [f"{seconds:.1f} s/step" if seconds is not None else "", f"{threads} threads" if threads else ""]
        parts.append(", ".join(part for part in timing if part))
    return " | ".join(parts)


class StepClock:
    """Wall seconds a step since the last line, and the torch thread counts the steps ran with (module docstring)."""

    def __init__(self, threads: bool) -> None:
        self.threads = threads
        self.start(0)

    def start(self, step: int) -> None:
        self.since, self.since_step, self.seen = time.monotonic(), step, set()

    def step_end(self) -> None:
        if self.threads:
            import torch

            self.seen.add(torch.get_num_threads())

    def line(self, logs: Mapping[str, Any], step: int, max_steps: int | None, first_step: int) -> str:
        """`step_line` for `logs`, with the wall seconds and threads of the steps since the last line; the clock then
        restarts (after an evaluation's line too, so that its time is not counted in the next step)."""
        seconds = threads = None
        if not any(key.startswith("eval_") for key in logs) and "train_runtime" not in logs and step > self.since_step:
            seconds = (time.monotonic() - self.since) / (step - self.since_step)
            low, high = min(self.seen, default=None), max(self.seen, default=None)
            threads = None if low is None else str(low) if low == high else f"{low}-{high}"
        text = step_line(logs, step, max_steps, first_step, seconds=seconds, threads=threads)
        self.start(step)
        return text


def _json_value(value: Any) -> Any:
    return value if isinstance(value, int | float | str | bool | type(None)) else str(value)


class _LogFile:
    """`output_dir/log_history.jsonl`, kept equal to the run's log history: rows after the step a run starts from
    (0, or its checkpoint's step on resume) are dropped at the start, so a resumed run never repeats a step."""

    first_step = 0

    def start(self, args, state) -> None:
        self.first_step = state.global_step  # the step this invocation starts from (a resumed checkpoint's)
        path = Path(args.output_dir) / LOG_FILE
        kept = []
        if path.is_file() and state.global_step > 0:
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a torn last line of a killed run
                    continue
                # The end-of-training row of a run that is now extended is dropped: the run is not over.
                if isinstance(row, dict) and row.get("step", 0) <= state.global_step and "train_runtime" not in row:
                    kept.append(line + "\n")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(kept))

    def append(self, args, state, logs: Mapping[str, Any]) -> None:
        row = {"step": state.global_step, **{key: _json_value(value) for key, value in logs.items()}}
        # A full disk is one line naming output_dir (drgrpo/core/disk.py), not a traceback from this write.
        with (
            disk_full_as_one_line(args.output_dir, f"writing {LOG_FILE}"),
            open(Path(args.output_dir) / LOG_FILE, "a") as f,
        ):
            f.write(json.dumps(row) + "\n")


class StepLineCallback(ProgressCallback):
    """transformers' progress bar, with `step_line` written under it in place of the metrics dict."""

    def __init__(self, max_str_len: int = 100, threads: bool = False):
        super().__init__(max_str_len)
        self.log_file, self.clock = _LogFile(), StepClock(threads)

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.log_file.start(args, state)
            self.clock.start(state.global_step)
        return super().on_train_begin(args, state, control, **kwargs)

    def on_step_end(self, args, state, control, **kwargs):
        self.clock.step_end()
        return super().on_step_end(args, state, control, **kwargs)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            self.log_file.append(args, state, logs)
            line = self.clock.line(logs, state.global_step, state.max_steps, self.log_file.first_step)
            if self.training_bar is not None:
                self.training_bar.write(line)
            else:
                print(line, flush=True)


class StepLinePrinter(TrainerCallback):
    """`step_line` printed per log, for `disable_tqdm: true` (transformers' `PrinterCallback` printed the dict)."""

    def __init__(self, threads: bool = False):
        self.log_file, self.clock = _LogFile(), StepClock(threads)

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.log_file.start(args, state)
            self.clock.start(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        self.clock.step_end()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            self.log_file.append(args, state, logs)
            print(self.clock.line(logs, state.global_step, state.max_steps, self.log_file.first_step), flush=True)


def use_step_lines(trainer) -> None:
    """Swap transformers' progress bar (or, with `disable_tqdm`, its printer) for the step-line callbacks above; a CPU
    run's lines say torch's thread count too."""
    threads = trainer.accelerator.device.type == "cpu"
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(StepLineCallback(threads=threads))
    elif trainer.pop_callback(PrinterCallback) is not None:
        trainer.add_callback(StepLinePrinter(threads=threads))
