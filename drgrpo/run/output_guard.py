"""One output directory holds one run: training never silently replaces a model that another configuration wrote.

`transformers` 5 removed `TrainingArguments.overwrite_output_dir`, and `Trainer` writes into any `output_dir`. A
`make train` whose recipe pointed at the demo's `outputs/demo/model` therefore replaced the demo's trained model, and
`metrics.json` then described a model that no longer existed. Here each run records its settings in
`drgrpo_run.json` in its `output_dir`; before training, an `output_dir` that already holds a model or checkpoints is
checked against the record:

- same settings: the run continues (resume from its newest complete checkpoint) or is repeated;
- different settings, or a model written without a record (another tool, or an older version of this code):
  refused, naming the keys that differ and the fix (`--overwrite_output_dir true`, or another `output_dir`);
- `overwrite_output_dir: true`: the run starts afresh there; the old run's `checkpoint-N` folders are deleted, so
  that a later resume cannot pick one of them up.

Settings that only decide what is logged, saved or uploaded (`logging_steps`, `save_steps`, `report_to`, ...) are
not compared; the run's length (`max_steps`, `num_train_epochs`) may change only when resuming from a checkpoint
(extending a run), not when a finished model would be retrained from scratch.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drgrpo.core.checkpoints import WEIGHT_FILES, checkpoint_folders
from drgrpo.core.durable import remove_staging
from drgrpo.core.errors import RecipeError, UsageError, command_flag

logger = logging.getLogger(__name__)

RUN_RECORD = "drgrpo_run.json"
# Keys that change what is logged, saved, evaluated or uploaded, or where, but not the model a run trains.
BOOKKEEPING_KEYS = frozenset(
    {
        "output_dir", "overwrite_output_dir", "run_name", "project", "report_to", "disable_tqdm",
        "resume_from_checkpoint", "show_prompts", "push_to_hub", "local_rank", "do_train", "do_eval", "do_predict",
        "num_completions_to_print", "skip_memory_metrics", "torch_empty_cache_steps", "check_gold_answers",
        "reward_num_workers", "reward_worker_memory_mb", "allow_data_change",
        # Where the vLLM server runs changes with every Slurm job (scripts/slurm passes --vllm_server_host).
        "vllm_server_host", "vllm_server_port", "vllm_server_base_url", "vllm_server_timeout", "vllm_group_port",
    }
)  # fmt: skip
BOOKKEEPING_PREFIXES = (
    "logging_", "log_", "save_", "hub_", "eval_", "per_device_eval_", "include_", "dataloader_", "ddp_", "trackio_",
    "diagnostics_", "correctness_", "warn_",
)  # fmt: skip
# The run's length: may grow when a checkpointed run is continued.
LENGTH_KEYS = frozenset({"max_steps", "num_train_epochs"})
# Files at the top of output_dir that are a saved model (the final `save_model`).
MODEL_FILES = (*WEIGHT_FILES, "config.json", "adapter_config.json")


@dataclass
class OutputDirArguments:
    """The train script's guard against writing over another run's model, and what a run saves there beside the
    trainer's own files (mixed into `ScriptArguments`)."""

    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Train into an output_dir that holds a model or checkpoints of a run with different settings: "
            "start afresh there (its checkpoint-N folders are deleted, its model replaced at the end). Without it "
            "such a run is refused; a run with the same settings resumes from its newest complete checkpoint."
        },
    )
    allow_data_change: bool = field(
        default=False,
        metadata={
            "help": "Resume a run although its training data changed since it started (the run record keeps a "
            "fingerprint of the rows it trains on, drgrpo/run/data_fingerprint.py): without it such a resume is "
            "refused, naming the data; with it the run goes on with the new rows and records them."
        },
    )
    save_merged_model: bool = field(
        default=False,
        metadata={
            "help": "With use_peft: also save the base model with the trained adapter merged in, as a plain model "
            "folder output_dir/merged (for vLLM serving or tools that do not read adapters). output_dir itself "
            "holds the adapter, which scripts/evaluate.py and `make eval` evaluate as it is."
        },
    )


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def run_settings(*argument_objects: Any) -> dict[str, Any]:
    """The settings of a run, `{key: JSON value}`, from its argument dataclasses, minus the bookkeeping keys.

    Trainer arguments go through `TrainingArguments.to_dict` (enums as values, tokens masked).
    """
    settings: dict[str, Any] = {}
    for arguments in argument_objects:
        if hasattr(arguments, "to_dict"):
            values = arguments.to_dict()
        else:
            values = {f.name: getattr(arguments, f.name) for f in dataclasses.fields(arguments) if f.init}
        settings.update(values)
    return {
        key: _jsonable(value)
        for key, value in sorted(settings.items())
        if key not in BOOKKEEPING_KEYS and not key.startswith(BOOKKEEPING_PREFIXES)
    }


def differing_keys(recorded: Mapping[str, Any], current: Mapping[str, Any], ignore: frozenset[str]) -> list[str]:
    """Keys whose value differs between two settings dicts (a key missing on one side counts), minus `ignore`."""
    return sorted(
        key for key in set(recorded) | set(current) if key not in ignore and recorded.get(key) != current.get(key)
    )


def saved_model_files(output_dir: Path) -> list[str]:
    """Names of the model files `save_model` left at the top of `output_dir`."""
    return [name for name in MODEL_FILES if (output_dir / name).is_file()]


def read_record(output_dir: Path) -> dict[str, Any] | None:
    """The run record of `output_dir`, or None when there is none (or it is unreadable: treated as absent)."""
    path = output_dir / RUN_RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("settings"), dict) else None


def _describe(key: str, recorded: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    def show(settings: Mapping[str, Any]) -> str:
        return json.dumps(settings[key]) if key in settings else "unset"

    return f"{key} {show(recorded)} -> {show(current)}"


def check_writable(output_dir: str | Path, key: str = "output_dir") -> None:
    """A `UsageError` naming `key`, the path and the fix when training could not write `output_dir`: it is a file,
    a file stands where one of its parent folders should be, or the folder (or its nearest existing parent, where
    it is to be created) is not writable. Read-only; run before anything loads, so a 20-line traceback from
    transformers' first save after the model and data have loaded becomes one line at start-up."""
    path = Path(output_dir)
    fix = f"set {key} to a folder you can write ({command_flag(f'--{key} DIR')})"
    if path.exists() and not path.is_dir():
        raise UsageError(f"{key} {str(path)!r} is a file, not a folder (the run saves its model there): {fix}.")
    existing = path
    while not existing.exists() and existing != existing.parent:  # the nearest part of the path that exists
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{key} {str(path)!r} cannot be created: {str(existing)!r} is a file, not a folder: {fix}.")
    try:  # a real write (os.access says yes to root on a read-only mount): an empty folder, removed at once
        os.rmdir(tempfile.mkdtemp(prefix=".drgrpo-write-check-", dir=existing))
    except OSError as error:
        where = "" if existing == path else f" (in {str(existing)!r}, where it would be created)"
        raise UsageError(f"{key} {str(path)!r} cannot be written{where}: {error.strerror}: {fix}.") from None


def check_output_dir(output_dir: str | Path, settings: Mapping[str, Any], *, overwrite: bool = False) -> None:
    """Raise a `RecipeError` when training with `settings` into `output_dir` would replace another run's work.

    Read-only: every process of a launch may call it. See the module docstring for the rules.
    """
    output_dir = Path(output_dir)
    model_files = saved_model_files(output_dir) if output_dir.is_dir() else []
    checkpoints = checkpoint_folders(output_dir)
    if overwrite or not (model_files or checkpoints):
        return
    fix = (
        f"Pass {command_flag('--overwrite_output_dir true')} to start afresh there, or set another output_dir "
        f"({command_flag('--output_dir DIR')})."
    )
    held = f"a model ({', '.join(model_files)})" if model_files else f"{len(checkpoints)} checkpoint(s)"
    record = read_record(output_dir)
    if record is None:
        raise RecipeError(
            f"output_dir {str(output_dir)!r} already holds {held} that no run of these settings wrote (no "
            f"{RUN_RECORD}); training would replace it. {fix}"
        )
    # Continuing a checkpointed run may extend it; retraining a finished model from scratch must match it exactly.
    ignore = LENGTH_KEYS if checkpoints else frozenset()
    changed = differing_keys(record["settings"], settings, ignore)
    if changed:
        shown = "; ".join(_describe(key, record["settings"], settings) for key in changed[:4])
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        run = f"run {record['run_name']!r}" if record.get("run_name") else "a run"
        raise RecipeError(
            f"output_dir {str(output_dir)!r} holds {held} of {run} with different settings: {shown}{more}. "
            f"To continue that run, use its settings. {fix}"
        )


def start_run(
    output_dir: str | Path,
    settings: Mapping[str, Any],
    *,
    run_name: str | None,
    overwrite: bool,
    data: Mapping[str, Any] | None = None,
) -> None:
    """Claim `output_dir` for this run (main process only): write its record (its settings, and `data`, what
    `drgrpo.run.data_fingerprint.data_record` keeps of its training data); with `overwrite`, first delete the old
    run's checkpoints and record, so that nothing of it can be resumed later. What an interrupted save left (its
    staging folder, drgrpo/core/durable.py) is removed."""
    output_dir = Path(output_dir)
    if overwrite:
        stale = checkpoint_folders(output_dir)
        for folder in stale:
            shutil.rmtree(folder)
        if stale:
            logger.warning(
                "overwrite_output_dir: deleted %d checkpoint(s) of the previous run in %s (%s).",
                len(stale),
                output_dir,
                ", ".join(folder.name for folder in stale),
            )
    output_dir.mkdir(parents=True, exist_ok=True)
    remove_staging(output_dir)
    record: dict[str, Any] = {"run_name": run_name, "settings": dict(settings)}
    if data is not None:
        record["data"] = dict(data)
    temporary = output_dir / f"{RUN_RECORD}.tmp"
    temporary.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    temporary.replace(output_dir / RUN_RECORD)
