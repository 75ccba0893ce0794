"""What a run can resume from, said out loud: at start-up (checkpoints on or off, what this run starts from) and when
it is stopped with Ctrl-C (what a rerun of the same command will do).

A recipe with `save_strategy: "no"` saves nothing until the end, so a stopped run is lost and its rerun starts at
step 0; the run says so when it starts and when it is interrupted, instead of a rerun silently starting over.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from drgrpo.core.checkpoints import checkpoint_step, find_resumable_checkpoint
from drgrpo.core.errors import command_flag
from drgrpo.run.output_guard import checkpoint_folders, read_record, saved_model_files


def _strategy(args: Any) -> str:
    strategy = getattr(args, "save_strategy", "no")
    return str(getattr(strategy, "value", strategy))


def checkpoint_policy(args: Any) -> str:
    """When the run saves checkpoints, in words."""
    strategy = _strategy(args)
    if strategy == "no":
        keep = f"{command_flag('--save_strategy steps --save_steps N')} keeps progress"
        return f'checkpoints off (save_strategy: "no"): a stopped run cannot resume, a rerun starts at step 0 ({keep})'
    every = "at the end of every epoch" if strategy == "epoch" else f"every {args.save_steps:g} steps"
    every = "after every step" if every == "every 1 steps" else every
    if strategy == "best":
        every = "whenever the evaluation metric improves"
    limit = f", the newest {args.save_total_limit} kept" if getattr(args, "save_total_limit", None) else ""
    return (
        f"checkpoints {every} in {args.output_dir}{limit}: a stopped run resumes from the newest complete one when the "
        "same command is rerun"
    )


def unfinished_run(output_dir: str | Path) -> bool:
    """Whether `output_dir` holds a run that started (its record) but left neither a model nor a checkpoint: a run
    stopped before its first checkpoint, or one that saved none."""
    output_dir = Path(output_dir)
    started = read_record(output_dir) is not None
    return started and not saved_model_files(output_dir) and not checkpoint_folders(output_dir)


def start_status(args: Any, resume_from: str | Path | None, *, overwrite: bool, unfinished: bool) -> str:
    """The start-up line: what this run starts from (a checkpoint, or step 0, after an unfinished run that left no
    checkpoint or afresh), then `checkpoint_policy`."""
    if resume_from is not None:
        start = f"Resuming from checkpoint {resume_from} (step {checkpoint_step(resume_from)})"
    elif overwrite:
        start = "overwrite_output_dir: starting afresh at step 0"
    elif unfinished:
        start = f"{args.output_dir} holds an unfinished run with no checkpoint to resume from: starting over at step 0"
    else:
        start = "Starting at step 0"
    return f"{start}; {checkpoint_policy(args)}."


def interrupted_message(output_dir: str | Path, args: Any, step: int) -> str:
    """What Ctrl-C at `step` leaves, and what rerunning the same command does then."""
    max_steps = getattr(args, "max_steps", -1)
    at = f"step {step} of {max_steps}" if max_steps and max_steps > 0 else f"step {step}"
    newest = find_resumable_checkpoint(output_dir)
    if newest is not None:
        return f"stopped at {at}; rerun the same command to resume from {newest} (step {checkpoint_step(newest)})."
    if _strategy(args) == "no":
        return (
            f'stopped at {at}; no checkpoint was saved (save_strategy: "no"), so rerunning starts over at step 0 '
            f"(set {command_flag('--save_strategy steps --save_steps N')} to keep progress)."
        )
    return f"stopped at {at}, before the first checkpoint; rerunning starts over at step 0."
