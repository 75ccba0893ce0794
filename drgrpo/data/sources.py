"""Sources: one dataset split (hub or local file) with its own column mapping and filter, mapped onto examples."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from datasets import Dataset, load_dataset

from drgrpo.core.errors import RecipeError
from drgrpo.data.arguments import MIXTURE_KEYS, DataArguments, parse_structured, passed_columns
from drgrpo.data.filters import filter_indices, parse_filter
from drgrpo.data.golds import check_answer_format, gold_shape_problem, normalize_gold

_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


@dataclass(frozen=True)
class DataSource:
    """One dataset split with its own column mapping, filter and (in a mixture) weight."""

    name: str | None = None
    config: str | None = None
    path: str | None = None
    split: str = "train"
    prompt_column: str = "prompt"
    answer_column: str | None = "answer"
    answer_extraction: str = "none"
    dataset_filter: dict | None = None
    weight: float | None = None
    keep_columns: tuple[str, ...] = ()  # raw columns passed through to the rewards (e.g. the code tests)
    fraction: float | None = None  # the share of this source's rows kept (open-r1's weight), before any weight

    @property
    def label(self) -> str:
        """A short name for messages: the local path, or `hub_id[config]:split`."""
        if self.path is not None:
            return f"dataset_path {self.path}"
        config = f"[{self.config}]" if self.config else ""
        return f"{self.name}{config}:{self.split}"


def data_sources(args: DataArguments) -> list[DataSource]:
    """The recipe's training sources: one (`dataset_name` or `dataset_path`) or several (`dataset_mixture`)."""
    base = DataSource(
        name=args.dataset_name,
        config=args.dataset_config,
        path=args.dataset_path,
        split=args.dataset_train_split,
        prompt_column=args.prompt_column,
        answer_column=args.answer_column,
        answer_extraction=args.answer_extraction,
        dataset_filter=args.dataset_filter,
        keep_columns=tuple(passed_columns(args)),
    )
    if args.dataset_mixture is None:
        if args.dataset_name and args.dataset_path:
            raise ValueError(
                f"The recipe sets both dataset_name ({args.dataset_name!r}) and dataset_path ({args.dataset_path!r}); "
                "keep one (on the command line `--dataset_name null` or `--dataset_path null` unsets the recipe's), "
                "or list both in dataset_mixture."
            )
        if not args.dataset_name and not args.dataset_path:
            raise ValueError(
                "The recipe names no data: set dataset_name (hub id), dataset_path (local file or folder) or "
                "dataset_mixture."
            )
        return [base]
    if args.dataset_name or args.dataset_path:
        raise ValueError(
            "The recipe sets dataset_mixture and also dataset_name/dataset_path; list every source in "
            "dataset_mixture and remove dataset_name/dataset_path."
        )
    entries = args.dataset_mixture
    if not isinstance(entries, list) or not entries:
        raise ValueError(
            f"dataset_mixture must be a non-empty list of mappings (or open-r1's {{datasets: [...]}}), got {entries!r}."
        )
    sources = []
    for number, entry in enumerate(entries):
        where = f"dataset_mixture[{number}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a mapping (e.g. {{dataset_path: ..., weight: 0.5}}), got {entry!r}.")
        for key in entry:
            if key not in MIXTURE_KEYS:
                close = difflib.get_close_matches(str(key), MIXTURE_KEYS, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"{where}: unknown key {key!r}.{hint} Allowed keys: {', '.join(MIXTURE_KEYS)}.")
        if bool(entry.get("dataset_name")) == bool(entry.get("dataset_path")):
            raise ValueError(f"{where} must set exactly one of dataset_name (hub id) and dataset_path (local).")
        weight = entry.get("weight")
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0):
            raise ValueError(f"{where}: weight must be a positive number, got {weight!r}.")
        fraction = entry.get("fraction")
        if fraction is not None and (
            isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1
        ):
            raise ValueError(f"{where}: fraction is the share of the source's rows kept, in (0, 1]; got {fraction!r}.")
        source_filter = parse_structured(entry.get("dataset_filter", base.dataset_filter), f"{where}.dataset_filter")
        if source_filter is not None:
            parse_filter(source_filter, f"{where}.dataset_filter")
        extraction = entry.get("answer_extraction", base.answer_extraction)
        check_answer_format(extraction, f"{where}.answer_extraction")
        sources.append(
            DataSource(
                name=entry.get("dataset_name"),
                config=entry.get("dataset_config"),
                path=entry.get("dataset_path"),
                split=entry.get("split", base.split),
                prompt_column=entry.get("prompt_column", base.prompt_column),
                answer_column=entry.get("answer_column", base.answer_column),
                answer_extraction=extraction,
                dataset_filter=source_filter,
                weight=None if weight is None else float(weight),
                keep_columns=base.keep_columns,
                fraction=None if fraction is None else float(fraction),
            )
        )
    weighted = [source.weight is not None for source in sources]
    if any(weighted) and not all(weighted):
        raise ValueError(
            "dataset_mixture: give every source a weight, or none (then all rows of every source are used)."
        )
    return sources


def _is_blank(path: Path, chunk_bytes: int = 1 << 20) -> bool:
    """Whether a file holds nothing but whitespace (read until the first other byte; a real file stops at once)."""
    with open(path, "rb") as file:
        while chunk := file.read(chunk_bytes):
            if chunk.strip():
                return False
    return True


# The folders the shipped recipes read their data from, and the command that writes each (the CPU recipes' data is
# built by their demos, not shipped): a missing file there names the command.
WRITTEN_BY = {
    "outputs/demo/data/": "make demo",
    "outputs/demo-tiny/data/": "make demo-tiny",
    "outputs/bias/data/": "make bias",
}


def load_local(path: str | Path, *, key: str = "dataset_path", role: str = "") -> Dataset:
    """Load a .jsonl/.json/.parquet/.csv file, or every such file in a folder (all of one format).

    `key` and `role` ("training", "held-out") name the recipe key and the split in error messages.
    """
    path = Path(path)
    if not path.exists():
        writer = next((command for folder, command in WRITTEN_BY.items() if path.as_posix().startswith(folder)), None)
        hint = f": run `{writer}` first (it writes {path.parent}), or set {key}" if writer else ""
        raise FileNotFoundError(f"{key} {str(path)!r} does not exist{hint}.")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _FORMATS)
        if not files:
            raise FileNotFoundError(f"{key} {str(path)!r}: no {'/'.join(_FORMATS)} file in this folder.")
    else:
        files = [path]
    kinds = {_FORMATS.get(p.suffix) for p in files}
    if None in kinds:
        raise ValueError(f"{key} {str(path)!r}: unsupported file type; use one of {', '.join(_FORMATS)}.")
    if len(kinds) != 1:
        found = sorted({p.suffix for p in files})
        raise ValueError(f"{key} {str(path)!r} mixes file formats {found}; keep files of one format.")
    # `datasets` fails on an empty file with a bare StopIteration (json), "corresponds to no data" or a parquet error.
    blank = [p for p in files if _is_blank(p)]
    if blank:
        split = f"the {role} split" if role else "it"
        raise ValueError(
            f"{key} {str(path)!r}: {'file ' + str(blank[0]) if path.is_dir() else 'the file'} is empty, so {split} "
            "has no rows. Fill it (e.g. one JSON object per line for .jsonl), or point "
            f"{key} at the data file."
        )
    return load_dataset(kinds.pop(), data_files=[str(p) for p in files], split="train")


class HubDataUnavailable(RecipeError):
    """A hub dataset that neither the local cache nor the hub (unreachable, or switched off) could give: `--explain`,
    which reads local files only, names it as not checked; training stops on it."""

    def __init__(self, message: str, source: DataSource) -> None:
        super().__init__(message)
        self.source = source


def load_source(source: DataSource, role: str = "training") -> Dataset:
    """The raw rows of one source (hub split or local file/folder); `role` names it in errors."""
    if source.path is not None:
        key = "dataset_test_path" if role == "held-out" else "dataset_path"
        return load_local(source.path, key=key, role=role)
    try:
        return load_dataset(source.name, source.config, split=source.split)
    except ConnectionError as error:  # not in the local cache, and the hub out of reach (or switched off)
        raise HubDataUnavailable(hub_load_error(source, role, error), source) from error
    except (OSError, ValueError) as error:  # FileNotFoundError, datasets' DatasetNotFoundError, a missing split
        raise RecipeError(hub_load_error(source, role, error)) from error


def hub_load_error(source: DataSource, role: str, error: Exception) -> str:
    """One line for a hub source that `datasets` could not load: the source, the likely cause and its fix.

    `datasets` raises FileNotFoundError for a local path given as a hub id, ConnectionError when the hub is
    unreachable (or HF_HUB_OFFLINE is set) and the dataset is not cached, DatasetNotFoundError for a wrong or
    private id, and ValueError for a split or config the dataset lacks.
    """
    name = str(source.name)
    cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if Path(name).exists() or Path(name).suffix in _FORMATS:
        kind = "folder" if Path(name).is_dir() else "file"
        return (
            f"dataset_name {name!r} is a local {kind}, not a hub dataset: set dataset_path: {name} instead, and drop "
            "dataset_name and dataset_config (they name hub datasets)."
        )
    where = f"dataset_name {name!r} ({'config ' + source.config + ', ' if source.config else ''}split {source.split})"
    if isinstance(error, ValueError):
        return f"{where}, the {role} source: {cause}"
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        reason = "HF_HUB_OFFLINE=1 is set and it is not in the local cache"
        fix = "run once with network access (HF_HUB_OFFLINE unset) to cache it"
    elif isinstance(error, ConnectionError):
        reason = "the hub is unreachable from here and it is not in the local cache"
        fix = "run once with network access to cache it (HF_HOME sets the cache folder)"
    else:
        reason = "the hub has no such dataset, or it is private"
        fix = "check the id (owner/name on huggingface.co/datasets); for a private one, `hf auth login`"
    return (
        f"{where} could not be loaded: {reason} ({cause}). Fix: {fix}, or download it and point dataset_path at "
        "the local file."
    )


class Example(NamedTuple):
    """One canonical row before templating; `source` and `row` (0-based, in the raw data) locate it for messages."""

    question: str
    answer: str
    source: str
    row: int
    extras: dict | None = None  # the source's keep_columns values of this row


def column_values(dataset: Dataset, column: str) -> list:
    """Every value of one column as Python objects, in one Arrow conversion (indexing row by row is ~1000x slower)."""
    return dataset.select_columns([column]).to_dict()[column]


def check_columns(dataset: Dataset, source: DataSource) -> None:
    """Raise a `ValueError` naming each mapped or filtered column that the dataset lacks, and the columns it has."""
    wanted = {"prompt_column": source.prompt_column}
    if source.answer_column is not None:
        wanted["answer_column"] = source.answer_column
    for column in source.keep_columns:
        wanted[f"keep_columns/tests_column ({column})"] = column
    for condition in parse_filter(source.dataset_filter, "dataset_filter") if source.dataset_filter else []:
        wanted.setdefault(f"dataset_filter ({condition.column})", condition.column)
    for key, column in wanted.items():
        if column not in dataset.column_names:
            raise ValueError(
                f"{source.label}: column {column!r} (from {key}) is not in the dataset; its columns are "
                f"{dataset.column_names}. Set {key.split(' ')[0]} in the recipe to one of them."
            )


def source_examples(dataset: Dataset, source: DataSource) -> list[Example]:
    """Filter one source's raw rows and map them onto (question, answer); non-string questions are errors."""
    check_columns(dataset, source)
    if len(dataset) == 0:
        raise ValueError(f"{source.label} has no rows.")
    keep = list(range(len(dataset)))
    if source.dataset_filter:
        conditions = parse_filter(source.dataset_filter, "dataset_filter")
        columns = {c.column: column_values(dataset, c.column) for c in conditions}
        keep = filter_indices(columns, conditions, source.label)
    questions = column_values(dataset, source.prompt_column)
    answers = column_values(dataset, source.answer_column) if source.answer_column else [""] * len(dataset)
    kept = {column: column_values(dataset, column) for column in source.keep_columns}
    examples = []
    for i in keep:
        question = questions[i]
        if not isinstance(question, str):
            raise ValueError(
                f"{source.label}: row {i} (0-based) has a {type(question).__name__} in prompt column "
                f"{source.prompt_column!r}, not a string: {question!r:.200}. Fix that row or point prompt_column at "
                "a text column."
            )
        answer = answers[i]
        if gold_shape_problem(answer, source.answer_extraction) is not None:
            raise ValueError(
                f"{source.label}: row {i} (0-based) has a {type(answer).__name__} in answer column "
                f"{source.answer_column!r}: {answer!r:.200}. The gold answer must be a string or a number (a list "
                "with answer_extraction: list)."
            )
        extras = {column: values[i] for column, values in kept.items()} if kept else None
        gold = normalize_gold(answer, source.answer_extraction) or ""  # "": no gold (the gold check reports it)
        examples.append(Example(question, gold, source.label, i, extras))
    return examples
