"""Finding the checkpoint to resume from: the newest *complete* `checkpoint-N` folder of an output directory.

A run killed while it saves leaves a half-written `checkpoint-N` behind, and a file can be cut short after the fact
(a power loss before the page cache reached the disk, a full disk, a copy that stopped). `transformers.trainer_utils.
get_last_checkpoint` returns the highest-numbered folder whatever it holds, so resuming would crash on a missing file
or a truncated optimizer state. Here a checkpoint is complete when its `trainer_state.json` parses and names its own
step, it holds the weights and the optimizer/scheduler files, and *every* file in it reads back as what it claims to
be (`drgrpo.core.file_checks`: a safetensors header against the file's size, a torch archive's zip directory, JSON
that parses). `DrGRPOTrainer` also writes each checkpoint into a staging folder and renames it into place only once
it is whole and fsynced (`drgrpo.core.durable`), so a crash leaves the old set of checkpoints or the new one.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path

from drgrpo.core.file_checks import file_problem

logger = logging.getLogger(__name__)

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
TRAINER_STATE = "trainer_state.json"
# Any one of these holds the model weights (full model, PEFT adapter, or a sharded model's index).
WEIGHT_FILES = (
    "model.safetensors",
    "pytorch_model.bin",
    "adapter_model.safetensors",
    "adapter_model.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)
# Without these a run cannot continue its optimizer and LR schedule (a `save_only_model` checkpoint has neither).
RESUME_FILES = ("optimizer.pt", "scheduler.pt")


def checkpoint_step(path: str | Path) -> int | None:
    """The step N of a `checkpoint-N` folder name, or None for any other name."""
    match = CHECKPOINT_PATTERN.match(Path(path).name)
    return int(match.group(1)) if match else None


def checkpoint_folders(output_dir: str | Path) -> list[Path]:
    """The `checkpoint-N` folders of `output_dir` by step (9 before 10), complete or not; [] when there is none.

    The project's one lister (resume, the output-directory guard, `make plot`). Not transformers'
    `trainer_utils.sort_checkpoints`: importing it imports torch (`make plot` and the guard run without it), and it
    takes any `checkpoint-<digits>...` name.
    """
    folders = [p for p in Path(output_dir).glob("checkpoint-*") if p.is_dir() and checkpoint_step(p) is not None]
    return sorted(folders, key=checkpoint_step)


def _nonempty(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def _deepspeed_state(checkpoint: Path) -> Path | None:
    """DeepSpeed's own state folder (`global_stepN`, named by the `latest` file), if this is a DeepSpeed checkpoint."""
    latest = checkpoint / "latest"
    if not _nonempty(latest):
        return None
    folder = checkpoint / latest.read_text().strip()
    return folder if folder.is_dir() else None


def _broken_file(folder: Path) -> str | None:
    """The first file of `folder` (not its subfolders) that does not read back whole, as a sentence; None if none."""
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        problem = file_problem(path)
        if problem is not None:
            return problem
    return None


def incomplete_reason(checkpoint: str | Path) -> str | None:
    """Why `checkpoint` cannot be resumed from (a sentence naming the missing or broken file), or None if complete."""
    checkpoint = Path(checkpoint)
    step = checkpoint_step(checkpoint)
    state_path = checkpoint / TRAINER_STATE
    if not state_path.is_file():
        return f"{TRAINER_STATE} is missing (written last, so the save did not finish)"
    try:
        state = json.loads(state_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return f"{TRAINER_STATE} is not valid JSON ({error}); the save was interrupted while writing it"
    if not isinstance(state, dict) or state.get("global_step") != step:
        found = state.get("global_step") if isinstance(state, dict) else None
        return f"{TRAINER_STATE} records global_step={found}, not the folder's step {step}"

    deepspeed_state = _deepspeed_state(checkpoint)
    if deepspeed_state is not None:
        # ZeRO keeps weights and optimizer shards in its own folder; the model files may be absent by design.
        if not any(_nonempty(path) for path in deepspeed_state.iterdir()):
            return f"DeepSpeed state folder {deepspeed_state.name} is empty"
        problem = _broken_file(deepspeed_state)
        if problem is not None:
            return f"{deepspeed_state.name}/{problem}"
    else:
        weights = [checkpoint / name for name in WEIGHT_FILES if _nonempty(checkpoint / name)]
        if not weights:
            return f"no model weights ({', '.join(WEIGHT_FILES[:2])}, ...)"
        for index in (path for path in weights if path.name.endswith(".index.json")):
            if (problem := file_problem(index)) is not None:
                return problem
            shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
            missing = sorted(shard for shard in shards if not _nonempty(checkpoint / shard))
            if missing:
                return f"weight shards missing or empty: {', '.join(missing)}"
        for name in RESUME_FILES:
            if not _nonempty(checkpoint / name):
                return f"{name} is missing or empty (a save_only_model checkpoint cannot continue its optimizer)"
    return _broken_file(checkpoint)


def weights_problem(folder: str | Path) -> str | None:
    """Why the model weights saved in `folder` (a run's output_dir or a checkpoint) cannot load, or None: a weight
    file or shard that does not read back whole. A folder without weight files is not judged here."""
    folder = Path(folder)
    names = [name for name in WEIGHT_FILES if (folder / name).is_file()]
    for name in names:
        if (problem := file_problem(folder / name)) is not None:
            return problem
        if name.endswith(".index.json"):
            for shard in sorted(set(json.loads((folder / name).read_text()).get("weight_map", {}).values())):
                if (problem := file_problem(folder / shard)) is not None:
                    return problem
    return None


def newest_complete_checkpoint(
    output_dir: str | Path, on_skip: Callable[[Path, str], None] | None = None
) -> Path | None:
    """The highest-step complete `checkpoint-N` folder under `output_dir`, or None when there is none; each newer,
    incomplete one is passed to `on_skip(folder, reason)` on the way."""
    for checkpoint in reversed(checkpoint_folders(output_dir)):
        reason = incomplete_reason(checkpoint)
        if reason is None:
            return checkpoint
        if on_skip is not None:
            on_skip(checkpoint, reason)
    return None


def _warn_skipped(checkpoint: Path, reason: str) -> None:
    logger.warning(
        "Skipping incomplete checkpoint %s: %s. The complete checkpoint before it is used instead (a resumed run "
        "saves this step again).",
        checkpoint,
        reason,
    )


def find_resumable_checkpoint(output_dir: str | Path) -> Path | None:
    """`newest_complete_checkpoint`, saying in one warning per skipped folder which one and why: a run killed while
    saving, or whose newest checkpoint was cut short later, resumes from the complete checkpoint before instead of
    crashing or loading a truncated state."""
    return newest_complete_checkpoint(output_dir, _warn_skipped)
