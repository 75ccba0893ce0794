"""Benchmark presets from the Hugging Face hub, failing fast where the hub is out of reach.

`datasets.load_dataset` retries an unreachable hub for about 30 s (five retries with backoff, each warning printed
twice: once by huggingface_hub's handler, once by the root logger), then raises. So before a preset is loaded the hub
is probed once (one API call, no retries: a failed DNS lookup or a refused connection ends it at once, a silent
network after `HUB_TIMEOUT_S`). Where it is switched off (`HF_HUB_OFFLINE=1`) or the probe fails, the dataset is
read from the local cache only (datasets' offline mode, switched on for that one call), and a dataset that is not
cached fails in one line that names the preset and the fix: the subset the project ships (`data/gsm8k_test100.jsonl`
for gsm8k), else how to point the preset at a local file.
"""

from __future__ import annotations

import os
from pathlib import Path

from drgrpo.core.errors import ROOT, UsageError, command_flag
from drgrpo.core.models import HUB_TIMEOUT_S, cache_only, hub_gave_no_answer, hub_offline
from drgrpo.evaluation.benchmarks import SHIPPED_SUBSETS


def hub_unreachable(dataset_name: str) -> str | None:
    """Why the hub cannot be reached (`HF_HUB_OFFLINE=1`, or the connection error of one probe), or None when it can.

    Any answer from the hub (the dataset, a 404, a gated repo) means it is reachable: `datasets` then loads or raises
    its own error, which is the better message for those."""
    from huggingface_hub import HfApi, constants

    if hub_offline() or constants.is_offline_mode():  # TRANSFORMERS_OFFLINE=1 switches the hub off too
        return "the hub is switched off (HF_HUB_OFFLINE=1)"
    try:
        HfApi().dataset_info(dataset_name, timeout=HUB_TIMEOUT_S)
    except Exception as error:
        if hub_gave_no_answer(error):
            return f"the hub cannot be reached from here ({type(error).__name__})"
    return None


def local_fix(preset: str, dataset_name: str, split: str) -> str:
    """How to evaluate `preset` without the hub: the project's shipped subset, else a downloaded file of the split."""
    make = bool(os.environ.get("MAKELEVEL"))
    shipped = SHIPPED_SUBSETS.get(preset)
    if shipped is not None and (ROOT / shipped[0]).is_file():
        # Relative to where the user runs it when that is the project root (`make eval` always is), else absolute.
        file = shipped[0] if Path(shipped[0]).is_file() else str(ROOT / shipped[0])
        command = f"make eval BENCH={file}" if make else f"--benchmark {file}"
        return f"{command} (the project ships {shipped[1]})"
    data = command_flag("--data DIR/FILE")
    command = f"make eval BENCH={preset} {data}" if make else f"--benchmark {preset} --data DIR/FILE"
    return (
        f"download it where the hub is reachable (`hf download {dataset_name} --repo-type dataset --local-dir DIR`) "
        f"and point the preset at its {split} file: {command} (the preset keeps its columns and gold format)"
    )


def load_hub_rows(dataset_name: str, dataset_config: str | None, split: str, preset: str | None = None) -> list[dict]:
    """The rows of a hub dataset split: from the hub when it answers, else from the local cache, else one line naming
    the preset (or the dataset) and the fix."""
    from datasets import load_dataset

    name = preset or dataset_name
    where = f"{dataset_name} ({dataset_config + ', ' if dataset_config else ''}{split})"
    unreachable = hub_unreachable(dataset_name)
    try:
        if unreachable is None:
            return list(load_dataset(dataset_name, dataset_config, split=split))
        with cache_only():
            return list(load_dataset(dataset_name, dataset_config, split=split))
    except (ConnectionError, OSError) as error:  # not cached, and the hub out of reach (or it failed mid-download)
        cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        reason = unreachable or f"the hub failed ({cause})"
        raise UsageError(
            f"benchmark {name}: {where} is not in the local cache and {reason}. Fix: "
            f"{local_fix(name, dataset_name, split)}."
        ) from None
