"""Finding the checkpoint to resume from: the newest *complete* `checkpoint-N` folder of an output directory.

A run killed while it saves leaves a half-written `checkpoint-N` behind. `transformers.trainer_utils.
get_last_checkpoint` returns the highest-numbered folder whatever it holds, so resuming would crash on a missing
file or, worse, load a truncated optimizer state. `transformers.Trainer._save_checkpoint` writes the model, then the
optimizer, scheduler and RNG states, and `trainer_state.json` last; a folder whose `trainer_state.json` parses and
names its own step, and which holds the weights and optimizer/scheduler files, was therefore saved to the end.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

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
    else:
        weights = [checkpoint / name for name in WEIGHT_FILES if _nonempty(checkpoint / name)]
        if not weights:
            return f"no model weights ({', '.join(WEIGHT_FILES[:2])}, ...)"
        for index in (path for path in weights if path.name.endswith(".index.json")):
            shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
            missing = sorted(shard for shard in shards if not _nonempty(checkpoint / shard))
            if missing:
                return f"weight shards missing or empty: {', '.join(missing)}"
        for name in RESUME_FILES:
            if not _nonempty(checkpoint / name):
                return f"{name} is missing or empty (a save_only_model checkpoint cannot continue its optimizer)"
    return None


def find_resumable_checkpoint(output_dir: str | Path) -> Path | None:
    """The highest-step complete `checkpoint-N` folder under `output_dir`, or None when there is none.

    Every newer folder that is incomplete is skipped with a warning that names it and the reason, so that a run
    killed while saving resumes from the checkpoint before instead of crashing or loading a truncated state.
    """
    for checkpoint in reversed(checkpoint_folders(output_dir)):
        reason = incomplete_reason(checkpoint)
        if reason is None:
            return checkpoint
        logger.warning(
            "Skipping incomplete checkpoint %s: %s. It was probably being written when the run stopped; delete it "
            "once the run has resumed.",
            checkpoint,
            reason,
        )
    return None
