"""Loading a prompt dataset (hub id or local files) onto the canonical `prompt` / `answer` columns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset, load_dataset

from drgrpo.templates import render_prompt


@dataclass
class DataArguments:
    """Where the prompts come from and how a question becomes a prompt.

    The dataset is a hub id (`dataset_name`) or a local file/folder (`dataset_path`); its question and gold-answer
    columns are mapped onto the canonical `prompt` and `answer` columns that the trainer and the rewards see.
    """

    dataset_name: str | None = field(
        default=None, metadata={"help": "Hub dataset id, e.g. 'DigitalLearningGmbH/MATH-lighteval'."}
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    dataset_path: str | None = field(
        default=None, metadata={"help": "Local .jsonl/.json/.parquet/.csv file, or a folder of them."}
    )
    dataset_train_split: str = field(default="train", metadata={"help": "Split used for training."})
    dataset_test_split: str | None = field(
        default=None, metadata={"help": "Optional held-out split for evaluation during training."}
    )
    prompt_column: str = field(default="prompt", metadata={"help": "Dataset column holding the question."})
    answer_column: str = field(default="answer", metadata={"help": "Dataset column holding the gold answer."})
    prompt_template: str = field(
        default="chat",
        metadata={"help": "How a question becomes a prompt: 'chat', 'r1', 'qwen_math' or 'plain'."},
    )
    system_prompt: str | None = field(
        default=None, metadata={"help": "System message for the 'chat' template (None: no system message)."}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Keep only the first N training rows after shuffling (None: all)."}
    )


_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def load_local(path: str | Path, split: str = "train") -> Dataset:
    """Load a .jsonl/.json/.parquet/.csv file, or every such file in a folder."""
    path = Path(path)
    files = sorted(p for p in path.iterdir() if p.suffix in _FORMATS) if path.is_dir() else [path]
    if not files or not path.exists():
        raise FileNotFoundError(f"dataset_path {str(path)!r}: no .jsonl/.json/.parquet/.csv file found there.")
    kinds = {_FORMATS.get(p.suffix) for p in files}
    if None in kinds or len(kinds) != 1:
        raise ValueError(f"dataset_path {str(path)!r}: expected files of one format among {sorted(_FORMATS)}.")
    return load_dataset(kinds.pop(), data_files=[str(p) for p in files], split="train")


def load_split(args: DataArguments, split: str) -> Dataset:
    if args.dataset_path:
        return load_local(args.dataset_path)
    if args.dataset_name:
        return load_dataset(args.dataset_name, args.dataset_config, split=split)
    raise ValueError("The recipe names no data: set dataset_name (hub id) or dataset_path (local file).")


def to_prompt_dataset(dataset: Dataset, args: DataArguments) -> Dataset:
    """Map the question/answer columns onto `prompt` (rendered with the template) and `answer`."""
    for column in (args.prompt_column, args.answer_column):
        if column not in dataset.column_names:
            raise ValueError(
                f"Column {column!r} not in the dataset; it has {dataset.column_names}. "
                "Set prompt_column / answer_column in the recipe."
            )

    def render(row: dict) -> dict:
        return {
            "prompt": render_prompt(row[args.prompt_column], args.prompt_template, args.system_prompt),
            "answer": str(row[args.answer_column]),
        }

    return dataset.map(render, remove_columns=dataset.column_names)


def load_prompt_dataset(args: DataArguments, seed: int = 42) -> Dataset:
    """The training set as `prompt` / `answer` rows, shuffled with `seed`."""
    dataset = load_split(args, args.dataset_train_split).shuffle(seed=seed)
    if args.max_train_samples is not None:
        dataset = dataset.select(range(min(args.max_train_samples, len(dataset))))
    return to_prompt_dataset(dataset, args)
