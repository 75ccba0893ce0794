"""open-r1's `dataset_mixture`, the recipe shape its users bring, read as this project's mixture.

open-r1 (github.com/huggingface/open-r1, `src/open_r1/configs.py` and `utils/data.py`; TRL's `DatasetMixtureConfig`
has the same shape with `path`/`name`) writes a mixture as a mapping:

    dataset_mixture:
      datasets:
        - id: open-r1/OpenR1-Math-220k     # or path: (TRL); a hub id, or a local file or folder
          config: default                  # or name: (TRL)
          split: train
          columns: [problem, answer]       # the columns kept
          weight: 0.5                      # the share of *this* dataset's rows kept (open-r1: int(len * weight))
      seed: 42                             # shuffles and samples the mixture
      test_split_size: 0.1                 # this share of the mixed rows held out

`from_open_r1` translates it into ours: each dataset an entry (`dataset_name` or `dataset_path`, `dataset_config`,
`split`), its `weight` our entry's `fraction` (a share of the source's own rows, as open-r1 means it; our `weight`
is a share of the mixture), `columns` checked to hold the recipe's prompt and gold columns (the only ones training
reads), `seed` the mixture's seed (`dataset_mixture_seed`), `test_split_size` the held-out share
(`dataset_test_size` below 1). The rows drawn are not open-r1's (another sampler), their counts are.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENTRY_KEYS = ("id", "path", "config", "name", "split", "columns", "weight")
MIXTURE_SHAPE_KEYS = ("datasets", "seed", "test_split_size")
_DATA_FILES = (".jsonl", ".json", ".parquet", ".csv")


@dataclass(frozen=True)
class OpenR1Mixture:
    """A mixture in our terms: the entries of `dataset_mixture`, its seed and its held-out share (None: unset)."""

    entries: list[dict]
    seed: int | None
    test_size: float | None


def is_open_r1_shape(value: Any) -> bool:
    """Whether a `dataset_mixture` value is open-r1's mapping (`datasets: [...]`) rather than our list of sources."""
    return isinstance(value, dict) and "datasets" in value


def _unknown(key: Any, allowed: tuple[str, ...], where: str) -> ValueError:
    close = difflib.get_close_matches(str(key), allowed, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(f"{where}: unknown key {key!r}.{hint} open-r1's keys here: {', '.join(allowed)}.")


def _entry(dataset: Any, where: str, prompt_column: str, answer_column: str | None) -> dict:
    if not isinstance(dataset, dict):
        raise ValueError(f"{where} must be a mapping (e.g. {{id: open-r1/OpenR1-Math-220k, weight: 0.5}}).")
    for key in dataset:
        if key not in ENTRY_KEYS:
            raise _unknown(key, ENTRY_KEYS, where)
    names = [dataset[key] for key in ("id", "path") if dataset.get(key)]
    if len(names) != 1 or not isinstance(names[0], str):
        raise ValueError(f"{where} must name its dataset once: id (open-r1) or path (TRL), a hub id or a local file.")
    name = names[0]
    local = Path(name).expanduser().exists() or Path(name).suffix in _DATA_FILES
    entry: dict[str, Any] = {"dataset_path" if local else "dataset_name": name}
    config = dataset.get("config", dataset.get("name"))
    if config is not None:
        entry["dataset_config"] = config
    if dataset.get("split") is not None:
        entry["split"] = dataset["split"]
    columns = dataset.get("columns")
    if columns is not None:
        wanted = {"prompt_column": prompt_column, "answer_column": answer_column}
        missing = [f"{key} {column!r}" for key, column in wanted.items() if column and column not in columns]
        if missing:
            raise ValueError(
                f"{where}.columns {columns} lacks the recipe's {' and '.join(missing)}: open-r1 keeps only the listed "
                "columns, and training reads these. Add them to columns, or set prompt_column / answer_column."
            )
    weight = dataset.get("weight")
    if weight is not None:
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight <= 1:
            raise ValueError(
                f"{where}.weight={weight!r}: open-r1 keeps int(rows x weight) of the dataset, so it takes a share in "
                "(0, 1]."
            )
        entry["fraction"] = float(weight)
    return entry


def from_open_r1(value: dict, prompt_column: str, answer_column: str | None) -> OpenR1Mixture:
    """open-r1's `dataset_mixture` mapping as ours (the module docstring); a key or value open-r1 would not take, or
    one training could not use, is a `ValueError` naming it."""
    where = "dataset_mixture (open-r1's shape)"
    for key in value:
        if key not in MIXTURE_SHAPE_KEYS:
            raise _unknown(key, MIXTURE_SHAPE_KEYS, where)
    datasets = value["datasets"]
    if not isinstance(datasets, list) or not datasets:
        raise ValueError(
            f"{where}: datasets must be a non-empty list of mappings (id, config, split, columns, weight)."
        )
    entries = [
        _entry(dataset, f"dataset_mixture.datasets[{number}]", prompt_column, answer_column)
        for number, dataset in enumerate(datasets)
    ]
    seed = value.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"{where}: seed={seed!r} must be a whole number.")
    test_size = value.get("test_split_size")
    if test_size is not None and (isinstance(test_size, bool) or not isinstance(test_size, int | float)
                                  or not 0 < test_size < 1):  # fmt: skip
        raise ValueError(f"{where}: test_split_size={test_size!r} must be a share of the rows, between 0 and 1.")
    return OpenR1Mixture(entries, seed, None if test_size is None else float(test_size))
