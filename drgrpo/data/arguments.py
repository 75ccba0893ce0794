"""`DataArguments`: the recipe keys that say where the prompts come from and how a question becomes a prompt."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from drgrpo.data.filters import FILTER_OPERATORS, parse_filter
from drgrpo.data.golds import check_answer_format
from drgrpo.data.open_r1 import from_open_r1, is_open_r1_shape
from drgrpo.data.templates import check_template

MIXTURE_KEYS = (
    "dataset_name",
    "dataset_config",
    "dataset_path",
    "split",
    "prompt_column",
    "answer_column",
    "answer_extraction",
    "dataset_filter",
    "weight",
    "fraction",
)


@dataclass
class DataArguments:
    """Where the prompts come from and how a question becomes a prompt.

    The data is a hub id (`dataset_name`), a local file/folder (`dataset_path`) or a weighted `dataset_mixture` of
    several; the question and gold-answer columns are mapped onto the canonical `prompt` and `answer` columns that
    the trainer and the rewards see. `chat_template_kwargs` is TRL's own `GRPOConfig` field (one key, used both by
    the trainer and here).
    """

    dataset_name: str | None = field(
        default=None, metadata={"help": "Hub dataset id, e.g. 'DigitalLearningGmbH/MATH-lighteval'."}
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    dataset_path: str | None = field(
        default=None, metadata={"help": "Local .jsonl/.json/.parquet/.csv file, or a folder of files of one format."}
    )
    dataset_train_split: str = field(default="train", metadata={"help": "Hub split used for training."})
    dataset_mixture: list | str | None = field(
        default=None,
        metadata={
            "help": "Several sources instead of dataset_name/dataset_path: a list of mappings with keys "
            f"{', '.join(MIXTURE_KEYS)}. Unset prompt_column, answer_column, answer_extraction and dataset_filter "
            "fall back to the top-level keys, split to dataset_train_split. "
            "'weight' is the source's share of the mixed training set (all sources or none; none: concatenate all "
            "rows); 'fraction' keeps that share of the source's own rows (0 < f <= 1, sampled), before any weight. "
            "open-r1's shape ({datasets: [{id, config, split, columns, weight}], seed, test_split_size}) is read "
            "as this (drgrpo/data/open_r1.py). On the command line: a JSON/YAML string."
        },
    )
    dataset_mixture_seed: int | None = field(
        default=None,
        metadata={
            "help": "Seed of the mixture's sampling, shuffle and held-out split (open-r1's dataset_mixture.seed). "
            "None: the run's seed."
        },
    )
    dataset_mixture_size: int | None = field(
        default=None,
        metadata={
            "help": "Rows in the weighted mixture. None: the most rows for which no source has to repeat rows. A "
            "larger size repeats rows of the sources that are too small (and says so)."
        },
    )
    dataset_filter: dict | str | None = field(
        default=None,
        metadata={
            "help": "Keep rows by column conditions, all of which must hold: {column: value} (equal), {column: [v1, "
            "v2]} (one of), or {column: {op: value}} with op in " + ", ".join(FILTER_OPERATORS) + ". Example (MATH "
            "levels 3-5): {level: ['Level 3', 'Level 4', 'Level 5']}. Applied to the raw columns before mapping."
        },
    )
    prompt_column: str = field(default="prompt", metadata={"help": "Dataset column holding the question."})
    answer_column: str | None = field(
        default="answer",
        metadata={
            "help": "Dataset column holding the gold answer. null: none (e.g. code problems, whose `code` reward reads "
            "the test cases from tests_column); the answer column is then empty and not checked."
        },
    )
    keep_columns: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Raw dataset columns passed unchanged to the reward functions, next to prompt and answer (values "
            "that are mappings or lists become JSON strings). tests_column is added by itself when reward_funcs "
            "uses `code`."
        },
    )
    answer_extraction: str = field(
        default="none",
        metadata={
            "help": "How the gold answer is read from answer_column, by the reader that evaluation's --answer_format "
            "of the same name uses (drgrpo/data/golds.py): 'none' or 'plain' (as it is, without enclosing $), "
            "'boxed' or 'last_boxed' (the final \\boxed{} of a worked solution, e.g. MATH's 'solution'; a final run "
            "of boxes, '\\boxed{1} and \\boxed{2}', is one answer '1, 2'), 'gsm8k' (the text after '####', "
            "thousands separators dropped), 'auto' (any of these by its shape), 'list', 'number', 'code_tests'."
        },
    )
    prompt_template: str = field(
        default="chat",
        metadata={
            "help": "How a question becomes a prompt: 'chat' (the tokenizer's chat template, with system_prompt and "
            "chat_template_kwargs), 'r1' (R1-Zero template), 'qwen_math' (Qwen-Math template) or 'plain' (the "
            "question alone). See drgrpo/data/templates.py."
        },
    )
    system_prompt: str | None = field(
        default=None, metadata={"help": "System message for the 'chat' template (None: no system message)."}
    )
    chat_examples: list | str | None = field(
        default=None,
        metadata={
            "help": "Few-shot demonstrations for the 'chat' template: a list of {question, answer} mappings, put "
            "before each question as user/assistant turns (after system_prompt). E.g. one worked answer that calls "
            "the Python tool (recipes/smollm2_135m_drgrpo_tools.yaml). The evaluator reads them from --recipe."
        },
    )
    max_prompt_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Drop prompts longer than this many tokens (counted after the template, as the trainer "
            "tokenizes them) and report how many were dropped. None: keep all."
        },
    )
    max_train_samples: int | None = field(
        default=None,
        metadata={"help": "Keep only the first N training rows after shuffling (before max_prompt_tokens; None: all)."},
    )
    dataset_test_split: str | None = field(
        default=None,
        metadata={"help": "Held-out hub split of dataset_name for evaluation during training (e.g. 'test')."},
    )
    dataset_test_path: str | None = field(
        default=None,
        metadata={"help": "Held-out local file/folder for evaluation during training (same columns as training)."},
    )
    dataset_test_size: float | None = field(
        default=None,
        metadata={
            "help": "Hold out this many rows of the shuffled training data for evaluation during training, or this "
            "share of them when below 1 (0.1: a tenth, rounded up, as datasets' train_test_split and open-r1's "
            "test_split_size)."
        },
    )
    check_gold_answers: bool = field(
        default=True,
        metadata={
            "help": "At start-up, count the gold answers that the accuracy reward cannot parse and report three of "
            "them. Turn off for tasks whose answers are not math."
        },
    )
    drop_unparseable_answers: bool = field(
        default=False,
        metadata={"help": "Drop rows whose gold answer cannot be parsed (they can never earn accuracy reward)."},
    )
    show_prompts: int = field(
        default=0,
        metadata={
            "help": "Print the first N prompts exactly as the trainer renders them (chat template and "
            "chat_template_kwargs applied) with their gold answers, then exit without loading the model."
        },
    )

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        self.dataset_filter = parse_structured(self.dataset_filter, "dataset_filter")
        if self.dataset_filter is not None:
            parse_filter(self.dataset_filter, "dataset_filter")
        self.dataset_mixture = parse_structured(self.dataset_mixture, "dataset_mixture")
        if is_open_r1_shape(self.dataset_mixture):  # open-r1's recipes' shape, read as ours (drgrpo/data/open_r1.py)
            self._read_open_r1_mixture()
        self.chat_examples = parse_structured(self.chat_examples, "chat_examples")
        check_template(self.prompt_template, self.system_prompt, self.chat_examples)
        check_answer_format(self.answer_extraction, "answer_extraction")
        for key in ("max_prompt_tokens", "max_train_samples", "dataset_mixture_size"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ValueError(f"{key} must be a positive integer or unset, got {value}.")
        if self.dataset_test_size is not None:
            size = self.dataset_test_size
            if isinstance(size, bool) or not size > 0 or size >= 1 and size != int(size):
                raise ValueError(
                    f"dataset_test_size must be a number of rows (a whole number, 1 or more) or a share of them "
                    f"(between 0 and 1), got {size}."
                )
            self.dataset_test_size = int(size) if size >= 1 else float(size)
        if self.show_prompts < 0:
            raise ValueError(f"show_prompts must be >= 0, got {self.show_prompts}.")

    def _read_open_r1_mixture(self) -> None:
        """`dataset_mixture` in open-r1's shape: its datasets become our entries, its seed and held-out share ours."""
        mixture = from_open_r1(self.dataset_mixture, self.prompt_column, self.answer_column)
        self.dataset_mixture = mixture.entries
        if mixture.seed is not None and self.dataset_mixture_seed is None:
            self.dataset_mixture_seed = mixture.seed
        if mixture.test_size is not None:
            held_out = [
                key for key in ("dataset_test_split", "dataset_test_path", "dataset_test_size") if getattr(self, key)
            ]
            if held_out:
                raise ValueError(
                    f"dataset_mixture's test_split_size and {held_out[0]} both name the held-out set; keep one."
                )
            self.dataset_test_size = mixture.test_size


def passed_columns(args: Any) -> list[str]:
    """The raw columns the trainer passes to the rewards besides `prompt` and `answer`: `keep_columns`, and the code
    reward's `tests_column` when `reward_funcs` uses `code` (args is the train script's `ScriptArguments`)."""
    columns = list(getattr(args, "keep_columns", None) or [])
    specs = getattr(args, "reward_funcs", None) or []
    if any(str(spec).strip() == "code" for spec in specs) and getattr(args, "tests_column", None):
        columns.append(args.tests_column)
    for column in columns:
        if column in ("prompt", "answer"):
            raise ValueError(f"keep_columns: {column!r} is the name of a canonical column; rename the raw column.")
    return list(dict.fromkeys(columns))


def parse_structured(value: Any, key: str) -> Any:
    """A mapping/list recipe value as it is; a command-line string parsed as JSON/YAML (None stays None)."""
    if value is None or not isinstance(value, str):
        return value
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError as error:
        raise ValueError(f"{key}: cannot parse {value!r} as JSON/YAML ({error}).") from error
