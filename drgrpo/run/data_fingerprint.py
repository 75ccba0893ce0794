"""The data a run resumes on is the data it started on.

The run record (`drgrpo_run.json`, drgrpo/run/output_guard.py) held the dataset's *path*, so a file rewritten
between a stop and its resume resumed silently on other rows. The record now also keeps a fingerprint of what the run
trains on: a SHA-256 of the training set's rows as the trainer receives them (after loading, filtering, mixing,
shuffling and the prompt template), so any change to what a step would see is caught, whatever caused it (an edited
file, a new revision of a hub dataset, another tokenizer's chat template). Hashing costs one pass over the rows
(~20 ms per 10,000 prompts). `datasets`' own `_fingerprint` is not used: the pipeline builds its datasets from Python
lists, whose fingerprints `datasets` draws at random.

A resume whose data differs stops in one line naming the sources and the two ways on: `--allow_data_change true`
(the record then takes the new fingerprint) or a new `output_dir`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from drgrpo.core.errors import RecipeError, command_flag

logger = logging.getLogger(__name__)

RECORD_KEY = "data"
BATCH_ROWS = 1024


def dataset_fingerprint(dataset: Any) -> str:
    """A SHA-256 (hex, first 16 digits) of a `datasets.Dataset`'s rows in order, every column, as JSON."""
    digest = hashlib.sha256()
    digest.update(json.dumps(sorted(dataset.column_names)).encode())
    for batch in dataset.iter(batch_size=BATCH_ROWS):
        digest.update(json.dumps(batch, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def data_record(fingerprint: str, sources: Sequence[str], rows: int) -> dict[str, Any]:
    """What the run record keeps of the training data."""
    return {"fingerprint": fingerprint, "sources": list(sources), "rows": rows}


def check_resumed_data(
    record: Mapping[str, Any] | None, current: Mapping[str, Any], output_dir: str, *, allow_change: bool
) -> None:
    """Raise a `RecipeError` when a run resumed in `output_dir` would train on other data than it started on.

    `record` is the run record (None, or one written before fingerprints: nothing to compare, the run goes on);
    `current` is `data_record` of the data loaded now. With `allow_change` a difference is a warning instead."""
    recorded = (record or {}).get(RECORD_KEY)
    if not isinstance(recorded, Mapping) or recorded.get("fingerprint") in (None, current["fingerprint"]):
        return
    sources = ", ".join(current["sources"]) or "the recipe's data"
    was = f"{recorded.get('rows', '?')} rows, fingerprint {recorded['fingerprint']}"
    now = f"{current['rows']} rows, fingerprint {current['fingerprint']}"
    if allow_change:
        logger.warning(
            "allow_data_change: the run in %s resumes on changed training data (%s: %s, was %s).",
            output_dir, sources, now, was,
        )  # fmt: skip
        return
    raise RecipeError(
        f"output_dir {output_dir!r} holds a run that started on other training data: {sources} now gives {now}, the "
        f"run started on {was} (the file changed, or what the recipe selects from it). To resume on the new data "
        f"anyway, add {command_flag('--allow_data_change true')}; to train on it from step 0, use another output_dir "
        f"({command_flag('--output_dir DIR')})."
    )
