"""What a run can resume from, said out loud: at start-up (checkpoints on or off, what this run starts from) and when
it is stopped with Ctrl-C (what a rerun of the same command will do).

A recipe with `save_strategy: "no"` saves nothing until the end, so a stopped run is lost and its rerun starts at
step 0; the run says so when it starts and when it is interrupted, instead of a rerun silently starting over.

A finished run (its newest checkpoint at its last step, its model saved after it) is left as it is by a rerun of the
same command: `finished_run` says so in one line, and `train()` returns before anything loads. transformers would
resume it and train one step more (it checks for the last step only after training one), replacing the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from drgrpo.core.checkpoints import (
    TRAINER_STATE,
    checkpoint_folders,
    checkpoint_step,
    find_resumable_checkpoint,
    incomplete_reason,
)
from drgrpo.core.errors import command_flag
from drgrpo.run.output_guard import read_record, saved_model_files


def _strategy(args: Any) -> str:
    strategy = getattr(args, "save_strategy", "no")
    return str(getattr(strategy, "value", strategy))


def checkpoint_policy(args: Any) -> str:
    """When the run saves checkpoints, in words."""
    strategy = _strategy(args)
    if strategy == "no":
        keep = f"{command_flag('--save_strategy steps --save_steps N')} keeps progress"
        return f'checkpoints off (save_strategy: "no"): a stopped run cannot resume, a rerun starts at step 0 ({keep})'
    max_steps, save_steps = getattr(args, "max_steps", -1), args.save_steps
    if strategy == "steps" and max_steps > 0 and save_steps >= max_steps:  # transformers saves the last step too
        keep = f"{command_flag('--save_steps N')} with N < {max_steps} keeps progress"
        return (
            f"no checkpoint before the last step (save_steps {save_steps:g} >= max_steps {max_steps}): a stopped run "
            f"loses the steps it trained ({keep}); the last step is saved as "
            f"{Path(args.output_dir) / f'checkpoint-{max_steps}'}"
        )
    every = "at the end of every epoch" if strategy == "epoch" else f"every {save_steps:g} steps"
    if strategy == "steps" and 0 < save_steps < 1:  # transformers: a fraction of the run's steps
        every = f"every {save_steps:.0%} of the run's steps"
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


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def finished_run(output_dir: str | Path, args: Any) -> str | None:
    """The one line a rerun of a finished run prints instead of training, or None when the run is not finished.

    Finished: the newest checkpoint is complete and at (or past) the run's last step (`max_steps`, or for a run by
    epochs the last step of the same `num_train_epochs`), and the final model and `trainer_state.json` were saved
    after it (same step). A larger `max_steps` or `num_train_epochs` is a longer run: it resumes."""
    output_dir = Path(output_dir)
    folders = checkpoint_folders(output_dir)
    if not folders or not saved_model_files(output_dir) or incomplete_reason(folders[-1]) is not None:
        return None
    last, step = folders[-1], checkpoint_step(folders[-1])
    if _json(output_dir / TRAINER_STATE).get("global_step") != step:  # the model was not saved after this step
        return None
    if getattr(args, "max_steps", -1) > 0:
        total, length = args.max_steps, f"max_steps {args.max_steps}"
    else:  # by epochs: the step count the checkpointed run computed, if it ran the same epochs (its record says)
        recorded = (read_record(output_dir) or {}).get("settings", {})
        same_length = recorded.get("max_steps", -1) <= 0 and recorded.get("num_train_epochs") == args.num_train_epochs
        total = _json(last / TRAINER_STATE).get("max_steps") if same_length else None
        length = f"the end of num_train_epochs {args.num_train_epochs:g}"
    if not isinstance(total, int) or total <= 0 or step < total:
        return None
    longer = command_flag("--max_steps N" if args.max_steps > 0 else "--num_train_epochs N")
    return (
        f"{output_dir} holds a finished run: {last.name} is its last step ({length}) and its model is saved; nothing "
        f"trained, nothing changed. To train longer, rerun with a larger {longer} (it resumes from {last.name}); to "
        f"start afresh, {command_flag('--overwrite_output_dir true')}."
    )


def start_status(args: Any, resume_from: str | Path | None, *, overwrite: bool, unfinished: bool) -> str:
    """The start-up line: what this run starts from (a checkpoint, or step 0, after an unfinished run that left no
    checkpoint or afresh), then `checkpoint_policy`."""
    if resume_from is not None:
        step, max_steps = checkpoint_step(resume_from), getattr(args, "max_steps", -1)
        start = f"Resuming from checkpoint {resume_from} (step {step})"
        if step is not None and 0 < max_steps <= step:  # stopped after its last checkpoint, before its final save
            start += f", the run's last step (max_steps {max_steps}): nothing left to train, saving its model"
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
