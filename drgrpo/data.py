"""Prompt datasets: hub ids or local files, one source or a weighted mixture, mapped onto `prompt` / `answer`.

The pipeline (`load_prompt_dataset`), in order:
1. each source is loaded (`dataset_name` from the hub, or a local `dataset_path` file/folder);
2. its rows are kept by `dataset_filter` (e.g. MATH levels 3-5);
3. its question column becomes `question` (it must hold strings) and its gold-answer column becomes `answer`
   (optionally cut out of a worked solution by `answer_extraction`);
4. sources are mixed by `weight` (or concatenated), and the result is shuffled with the run's seed;
5. an optional held-out set is split off (`dataset_test_size`) or loaded (`dataset_test_split`/`dataset_test_path`);
6. `max_train_samples` keeps the first N rows;
7. each question is rendered with `prompt_template` (drgrpo.templates) into the `prompt` column;
8. prompts longer than `max_prompt_tokens` (counted the way TRL tokenizes them) are dropped and counted;
9. gold answers that the accuracy reward cannot parse are counted and reported (and optionally dropped).
The trainer sees exactly two columns, `prompt` and `answer`; TRL passes `answer` to every reward function.
"""

from __future__ import annotations

import difflib
import logging
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from datasets import Dataset, load_dataset

from drgrpo.templates import check_template, prompt_text, prompt_token_ids, render_prompt

logger = logging.getLogger(__name__)

ANSWER_EXTRACTIONS = ("none", "boxed", "gsm8k")
FILTER_OPERATORS = ("==", "!=", "<", "<=", ">", ">=", "in", "not_in")
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
)
_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
_TOKEN_BATCH = 256  # prompts tokenized per call when counting prompt tokens


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
            "rows). On the command line: a JSON/YAML string."
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
    answer_column: str = field(default="answer", metadata={"help": "Dataset column holding the gold answer."})
    answer_extraction: str = field(
        default="none",
        metadata={
            "help": "How the gold answer is read from answer_column: 'none' (as it is), 'boxed' (the last \\boxed{} "
            "of a worked solution, e.g. MATH's 'solution'), 'gsm8k' (the text after '####')."
        },
    )
    prompt_template: str = field(
        default="chat",
        metadata={
            "help": "How a question becomes a prompt: 'chat' (the tokenizer's chat template, with system_prompt and "
            "chat_template_kwargs), 'r1' (R1-Zero template), 'qwen_math' (Qwen-Math template) or 'plain' (the "
            "question alone). See drgrpo/templates.py."
        },
    )
    system_prompt: str | None = field(
        default=None, metadata={"help": "System message for the 'chat' template (None: no system message)."}
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
    dataset_test_size: int | None = field(
        default=None,
        metadata={"help": "Hold out this many rows of the shuffled training data for evaluation during training."},
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
        check_template(self.prompt_template, self.system_prompt)
        check_answer_extraction(self.answer_extraction, "answer_extraction")
        for key in ("max_prompt_tokens", "max_train_samples", "dataset_test_size", "dataset_mixture_size"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ValueError(f"{key} must be a positive integer or unset, got {value}.")
        if self.show_prompts < 0:
            raise ValueError(f"show_prompts must be >= 0, got {self.show_prompts}.")


# --------------------------------------------------------------------------------------------------------------
# Recipe values


def parse_structured(value: Any, key: str) -> Any:
    """A mapping/list recipe value as it is; a command-line string parsed as JSON/YAML (None stays None)."""
    if value is None or not isinstance(value, str):
        return value
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError as error:
        raise ValueError(f"{key}: cannot parse {value!r} as JSON/YAML ({error}).") from error


def check_answer_extraction(value: str, where: str) -> None:
    if value not in ANSWER_EXTRACTIONS:
        raise ValueError(f"{where}={value!r} is unknown. Choose one of: {', '.join(ANSWER_EXTRACTIONS)}.")


# --------------------------------------------------------------------------------------------------------------
# Gold answers out of worked solutions


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed x`) in `text`, or None.

    Braces are matched, so nested groups such as `\\boxed{\\frac{1}{2}}` come out whole. Follows the MATH benchmark's
    `last_boxed_only_string` + `remove_boxed` (Hendrycks et al. 2021, github.com/hendrycks/math, math_equivalence).
    """
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    command = "\\boxed" if text.startswith("\\boxed", start) else "\\fbox"
    rest = text[start + len(command) :]
    if rest.startswith(" "):  # `\boxed 5`: the answer runs to the next `$` or the end
        answer = rest[1:].split("$")[0].strip()
        return answer or None
    rest = rest.lstrip()
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, char in enumerate(rest):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return rest[1:i].strip()
    return None  # unbalanced braces


def gsm8k_final_answer(text: str) -> str | None:
    """The final answer of a GSM8K solution: the text after the last `####`, thousands commas removed, or None.

    GSM8K (Cobbe et al. 2021, github.com/openai/grade-school-math) ends each solution with `#### <number>`.
    """
    if "####" not in text:
        return None
    answer = text.rsplit("####", 1)[1].strip().replace(",", "")
    return answer or None


def extract_answer(value: Any, extraction: str) -> str:
    """The gold answer string of a raw answer-column value; "" when there is none (it is then reported)."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # csv/parquet readers turn integer answers with gaps into floats: 72.0 -> "72"
    text = str(value).strip()
    if extraction == "boxed":
        return last_boxed(text) or ""
    if extraction == "gsm8k":
        return gsm8k_final_answer(text) or ""
    return text


# --------------------------------------------------------------------------------------------------------------
# Filters


class Condition(NamedTuple):
    """One `dataset_filter` condition: `column op operand`."""

    column: str
    op: str
    operand: Any

    def __str__(self) -> str:
        return f"{self.column} {self.op} {self.operand!r}"


def parse_filter(spec: Any, where: str) -> list[Condition]:
    """The conditions of a `dataset_filter` mapping, in order; raise a `ValueError` on a malformed one."""
    if not isinstance(spec, dict):
        raise ValueError(
            f"{where} must be a mapping of column: condition, got {type(spec).__name__} {spec!r}. Example: "
            "{level: ['Level 3', 'Level 4', 'Level 5']}."
        )
    conditions = []
    for column, condition in spec.items():
        if isinstance(condition, dict):
            for op, operand in condition.items():
                if op not in FILTER_OPERATORS:
                    raise ValueError(
                        f"{where}: unknown operator {op!r} for column {column!r}. Use one of: "
                        f"{', '.join(FILTER_OPERATORS)}."
                    )
                if op in ("in", "not_in") and not isinstance(operand, list):
                    raise ValueError(f"{where}: {column!r} {op} needs a list of values, got {operand!r}.")
                conditions.append(Condition(str(column), op, operand))
        elif isinstance(condition, list):
            conditions.append(Condition(str(column), "in", condition))
        else:
            conditions.append(Condition(str(column), "==", condition))
    return conditions


def condition_holds(value: Any, op: str, operand: Any) -> bool:
    """Whether `value op operand` holds (`in`/`not_in`: membership in the operand list)."""
    if op == "==":
        return value == operand
    if op == "!=":
        return value != operand
    if op == "in":
        return value in operand
    if op == "not_in":
        return value not in operand
    if value is None:
        return False
    if op == "<":
        return value < operand
    if op == "<=":
        return value <= operand
    if op == ">":
        return value > operand
    if op == ">=":
        return value >= operand
    raise ValueError(f"Unknown filter operator {op!r}. Use one of: {', '.join(FILTER_OPERATORS)}.")


def _examples(values: Sequence[Any], limit: int = 8) -> list[Any]:
    seen: list[Any] = []
    for value in values:
        if value not in seen:
            seen.append(value)
            if len(seen) == limit:
                break
    return seen


def filter_indices(columns: dict[str, list], conditions: Sequence[Condition], where: str) -> list[int]:
    """Indices of the rows that satisfy every condition; raise if a condition leaves no row, naming that condition.

    `columns` maps each filtered column name to its values (one per row).
    """
    keep = list(range(len(next(iter(columns.values())))) if columns else [])
    for condition in conditions:
        values = columns[condition.column]
        before = len(keep)
        try:
            keep = [i for i in keep if condition_holds(values[i], condition.op, condition.operand)]
        except TypeError as error:
            raise ValueError(
                f"{where}: dataset_filter condition `{condition}` cannot compare column {condition.column!r} "
                f"(values such as {_examples([values[i] for i in keep], 3)!r}) with {condition.operand!r}: {error}."
            ) from error
        if not keep:
            raise ValueError(
                f"{where}: dataset_filter condition `{condition}` kept 0 of {before} rows, so the dataset is empty. "
                f"Column {condition.column!r} holds values such as {_examples(values)!r}; fix the filter."
            )
    return keep


# --------------------------------------------------------------------------------------------------------------
# Sources


@dataclass(frozen=True)
class DataSource:
    """One dataset split with its own column mapping, filter and (in a mixture) weight."""

    name: str | None = None
    config: str | None = None
    path: str | None = None
    split: str = "train"
    prompt_column: str = "prompt"
    answer_column: str = "answer"
    answer_extraction: str = "none"
    dataset_filter: dict | None = None
    weight: float | None = None

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
    )
    if args.dataset_mixture is None:
        if args.dataset_name and args.dataset_path:
            raise ValueError(
                "The recipe sets both dataset_name and dataset_path; keep one (or list both in dataset_mixture)."
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
        raise ValueError(f"dataset_mixture must be a non-empty list of mappings, got {entries!r}.")
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
        source_filter = parse_structured(entry.get("dataset_filter", base.dataset_filter), f"{where}.dataset_filter")
        if source_filter is not None:
            parse_filter(source_filter, f"{where}.dataset_filter")
        extraction = entry.get("answer_extraction", base.answer_extraction)
        check_answer_extraction(extraction, f"{where}.answer_extraction")
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
            )
        )
    weighted = [source.weight is not None for source in sources]
    if any(weighted) and not all(weighted):
        raise ValueError(
            "dataset_mixture: give every source a weight, or none (then all rows of every source are used)."
        )
    return sources


def load_local(path: str | Path) -> Dataset:
    """Load a .jsonl/.json/.parquet/.csv file, or every such file in a folder (all of one format)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset_path {str(path)!r} does not exist.")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _FORMATS)
        if not files:
            raise FileNotFoundError(f"dataset_path {str(path)!r}: no {'/'.join(_FORMATS)} file in this folder.")
    else:
        files = [path]
    kinds = {_FORMATS.get(p.suffix) for p in files}
    if None in kinds:
        raise ValueError(f"dataset_path {str(path)!r}: unsupported file type; use one of {', '.join(_FORMATS)}.")
    if len(kinds) != 1:
        found = sorted({p.suffix for p in files})
        raise ValueError(f"dataset_path {str(path)!r} mixes file formats {found}; keep files of one format.")
    return load_dataset(kinds.pop(), data_files=[str(p) for p in files], split="train")


def load_source(source: DataSource) -> Dataset:
    """The raw rows of one source (hub split or local file/folder)."""
    if source.path is not None:
        return load_local(source.path)
    return load_dataset(source.name, source.config, split=source.split)


class Example(NamedTuple):
    """One canonical row before templating; `source` and `row` (0-based, in the raw data) locate it for messages."""

    question: str
    answer: str
    source: str
    row: int


def column_values(dataset: Dataset, column: str) -> list:
    """Every value of one column as Python objects, in one Arrow conversion (indexing row by row is ~1000x slower)."""
    return dataset.select_columns([column]).to_dict()[column]


def check_columns(dataset: Dataset, source: DataSource) -> None:
    """Raise a `ValueError` naming each mapped or filtered column that the dataset lacks, and the columns it has."""
    wanted = {"prompt_column": source.prompt_column, "answer_column": source.answer_column}
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
    answers = column_values(dataset, source.answer_column)
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
        if isinstance(answer, list | dict):
            raise ValueError(
                f"{source.label}: row {i} (0-based) has a {type(answer).__name__} in answer column "
                f"{source.answer_column!r}: {answer!r:.200}. The gold answer must be a string or a number."
            )
        examples.append(Example(question, extract_answer(answer, source.answer_extraction), source.label, i))
    return examples


# --------------------------------------------------------------------------------------------------------------
# Mixtures


def normalized_weights(weights: Sequence[float]) -> list[Fraction]:
    """Weights as exact fractions summing to 1 (exact, so that the counts below never overshoot a source)."""
    fractions = [Fraction(w) for w in weights]
    total = sum(fractions)
    return [w / total for w in fractions]


def default_mixture_size(sizes: Sequence[int], weights: Sequence[float]) -> int:
    """The largest mixture in which every source i supplies share w_i without repeating rows: min_i floor(n_i / w_i).

    With sizes [100, 50] and weights [1, 1] that is 100 (50 rows from each); with weights [2, 1], 150.
    """
    shares = normalized_weights(weights)
    return min(math.floor(Fraction(size) / share) for size, share in zip(sizes, shares, strict=True))


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Split `total` rows among sources in proportion to `weights`: the largest-remainder (Hamilton) method.

    Each source gets floor(total * w_i); the rows left over go one each to the largest remainders (ties: the earlier
    source). The counts sum to `total`; e.g. apportion(10, [1, 1, 1]) == [4, 3, 3].
    """
    quotas = [total * share for share in normalized_weights(weights)]
    counts = [math.floor(q) for q in quotas]
    by_remainder = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def sample_rows(examples: Sequence[Example], count: int, rng: random.Random) -> list[Example]:
    """`count` rows of `examples` in random order: without repetition up to its size, then whole repeats + a sample."""
    repeats, remainder = divmod(count, len(examples))
    sampled = [example for _ in range(repeats) for example in examples]
    return sampled + rng.sample(list(examples), remainder)


def mix_sources(
    per_source: Sequence[Sequence[Example]],
    weights: Sequence[float] | None,
    size: int | None,
    rng: random.Random,
) -> list[Example]:
    """All rows of every source (`weights` None), or a weighted mixture of `size` rows (None: the default size)."""
    if weights is None:
        return [example for examples in per_source for example in examples]
    sizes = [len(examples) for examples in per_source]
    total = size if size is not None else default_mixture_size(sizes, weights)
    counts = apportion(total, weights)
    mixed = []
    for examples, count in zip(per_source, counts, strict=True):
        label = examples[0].source
        if count > len(examples):
            logger.warning("dataset_mixture: %s repeats rows (%d drawn from %d).", label, count, len(examples))
        logger.info("dataset_mixture: %d rows from %s (%d available).", count, label, len(examples))
        mixed.extend(sample_rows(examples, count, rng))
    return mixed


# --------------------------------------------------------------------------------------------------------------
# Gold answers the accuracy reward cannot parse


# Grading any extractable answer against a gold makes the reward parse that gold. `?` is extracted but is no number,
# so the grader skips its numeric fast path and parses the gold, and comparing with it costs no sympy simplification.
GOLD_PROBE = "\\boxed{?}"


def reward_gold_check(args: Any = None) -> Callable[[list[str]], list[bool]]:
    """Whether each gold answer is usable by the accuracy reward, decided by the reward's own grader.

    A probe answer is graded against every gold with `rewards.grading` (the accuracy reward's code path: the same
    gold normalisation, math-verify parsing, time limit and verifier processes), so "unparseable" here means exactly
    "the accuracy reward scores None for it". A gold whose parsing times out or crashes counts as unusable too.
    The grader settings are the recipe's `reward_timeout`, `reward_num_workers` and `reward_worker_memory_mb` when
    `args` is the train script's `ScriptArguments` (which mixes in `rewards.RewardArguments`), else the defaults.
    """
    from rewards.grading import FAILURES, GOLD_UNPARSABLE, get_grader, grade_batch

    grader = get_grader(
        timeout=getattr(args, "reward_timeout", 5.0),
        num_workers=getattr(args, "reward_num_workers", None),
        memory_mb=getattr(args, "reward_worker_memory_mb", 2048),
    )

    def usable(golds: list[str]) -> list[bool]:
        results = grade_batch([GOLD_PROBE] * len(golds), golds, grader)
        return [r.status != GOLD_UNPARSABLE and r.status not in FAILURES for r in results]

    return usable


def unparseable_indices(answers: Sequence[str], usable: Callable[[list[str]], list[bool]]) -> list[int]:
    """Indices of the answers that `usable` rejects; each distinct answer is checked once, in one batch."""
    distinct = list(dict.fromkeys(answers))
    verdicts = dict(zip(distinct, usable(distinct), strict=True))
    return [i for i, answer in enumerate(answers) if not verdicts[answer]]


def report_unparseable(examples: Sequence[Example], bad: Sequence[int], which: str) -> str:
    """The start-up message for the rows whose gold answer cannot be parsed: how many, and three examples."""
    shown = "; ".join(f"{examples[i].source} row {examples[i].row}: answer {examples[i].answer!r:.80}" for i in bad[:3])
    return (
        f"{len(bad)} of {len(examples)} {which} rows have a gold answer the accuracy reward cannot parse (they can "
        f"never be rewarded), e.g. {shown}. Check answer_column/answer_extraction, or set "
        "drop_unparseable_answers: true."
    )


# --------------------------------------------------------------------------------------------------------------
# The pipeline


def _finish(
    examples: list[Example],
    args: DataArguments,
    which: str,
    tokenizer: Any,
    chat_template_kwargs: dict | None,
    gold_check: Callable[[list[str]], list[bool]] | None,
) -> Dataset:
    """Template, `max_prompt_tokens`, gold check: the `prompt` / `answer` dataset the trainer sees."""
    prompts = [render_prompt(example.question, args.prompt_template, args.system_prompt) for example in examples]
    if args.max_prompt_tokens is not None:
        if tokenizer is None:
            raise ValueError("max_prompt_tokens needs the model's tokenizer to count prompt tokens; pass tokenizer=.")
        lengths = [
            len(ids)
            for start in range(0, len(prompts), _TOKEN_BATCH)
            for ids in prompt_token_ids(prompts[start : start + _TOKEN_BATCH], tokenizer, chat_template_kwargs)
        ]
        keep = [i for i, length in enumerate(lengths) if length <= args.max_prompt_tokens]
        dropped = len(prompts) - len(keep)
        if not keep:
            raise ValueError(
                f"max_prompt_tokens={args.max_prompt_tokens} drops every {which} prompt (the shortest has "
                f"{min(lengths)} tokens); raise max_prompt_tokens."
            )
        if dropped:
            logger.warning(
                "max_prompt_tokens=%d: dropped %d of %d %s prompts (longest: %d tokens).",
                args.max_prompt_tokens,
                dropped,
                len(prompts),
                which,
                max(lengths),
            )
        examples = [examples[i] for i in keep]
        prompts = [prompts[i] for i in keep]
    if gold_check is not None:
        bad = unparseable_indices([example.answer for example in examples], gold_check)
        if bad:
            logger.warning(report_unparseable(examples, bad, which))
            if args.drop_unparseable_answers:
                if len(bad) == len(examples):
                    raise ValueError(f"drop_unparseable_answers: no {which} row has a parseable gold answer.")
                dropped = set(bad)
                examples = [e for i, e in enumerate(examples) if i not in dropped]
                prompts = [p for i, p in enumerate(prompts) if i not in dropped]
                logger.warning("drop_unparseable_answers: dropped %d %s rows.", len(bad), which)
        else:
            logger.info("All %d %s gold answers parse.", len(examples), which)
    return Dataset.from_dict({"prompt": prompts, "answer": [example.answer for example in examples]})


def eval_source(args: DataArguments, sources: list[DataSource]) -> DataSource | None:
    """The held-out source named by `dataset_test_split` / `dataset_test_path` (None when neither is set)."""
    if args.dataset_test_split is None and args.dataset_test_path is None:
        return None
    if args.dataset_test_split is not None:
        if len(sources) != 1 or sources[0].name is None:
            raise ValueError(
                "dataset_test_split names a split of dataset_name; with dataset_path or dataset_mixture use "
                "dataset_test_path (a local file) or dataset_test_size (rows held out of the training data)."
            )
        return replace(sources[0], split=args.dataset_test_split, weight=None)
    if len(sources) == 1:  # the training source's column mapping, filter and extraction, read from another file
        return replace(sources[0], name=None, config=None, path=args.dataset_test_path, weight=None)
    # A mixture has no single mapping: the top-level keys describe the held-out file.
    return DataSource(
        path=args.dataset_test_path,
        prompt_column=args.prompt_column,
        answer_column=args.answer_column,
        answer_extraction=args.answer_extraction,
        dataset_filter=args.dataset_filter,
    )


def load_prompt_dataset(
    args: DataArguments,
    seed: int = 42,
    tokenizer: Any = None,
    chat_template_kwargs: dict | None = None,
    gold_check: Callable[[list[str]], list[bool]] | None = None,
) -> tuple[Dataset, Dataset | None]:
    """The training set and the optional held-out set, as `prompt` / `answer` datasets (see the module docstring).

    `tokenizer` is needed for `max_prompt_tokens` (and to check that a `chat` prompt can be rendered);
    `chat_template_kwargs` is the recipe's (TRL's `GRPOConfig.chat_template_kwargs`). `gold_check` decides whether a
    batch of distinct gold answers is usable (default: `reward_gold_check(args)`, when `check_gold_answers` is on).
    """
    held_out_keys = [k for k in ("dataset_test_split", "dataset_test_path", "dataset_test_size") if getattr(args, k)]
    if len(held_out_keys) > 1:
        raise ValueError(f"Set at most one of {', '.join(held_out_keys)} (they all name the held-out set).")
    if args.prompt_template == "chat" and tokenizer is not None:
        prompt_text(render_prompt("1+1=", "chat", args.system_prompt), tokenizer, chat_template_kwargs)
    sources = data_sources(args)
    held_out_source = eval_source(args, sources)  # checked before any loading, so a bad recipe fails fast
    per_source = [source_examples(load_source(source), source) for source in sources]
    rng = random.Random(seed)
    weights = [s.weight for s in sources] if sources[0].weight is not None else None
    examples = mix_sources(per_source, weights, args.dataset_mixture_size, rng)
    rng.shuffle(examples)

    eval_examples = None if held_out_source is None else source_examples(load_source(held_out_source), held_out_source)
    if args.dataset_test_size is not None:
        if args.dataset_test_size >= len(examples):
            raise ValueError(
                f"dataset_test_size={args.dataset_test_size} holds out every training row (there are "
                f"{len(examples)}); make it smaller."
            )
        eval_examples, examples = examples[: args.dataset_test_size], examples[args.dataset_test_size :]
    if args.max_train_samples is not None:
        examples = examples[: args.max_train_samples]
    logger.info("Training prompts: %d rows from %s.", len(examples), ", ".join(s.label for s in sources))

    if not args.check_gold_answers:
        gold_check = None
    elif gold_check is None:
        gold_check = reward_gold_check(args)
    train = _finish(examples, args, "training", tokenizer, chat_template_kwargs, gold_check)
    held_out = None
    if eval_examples is not None:
        held_out = _finish(eval_examples, args, "held-out", tokenizer, chat_template_kwargs, gold_check)
    return train, held_out


def format_prompts(
    dataset: Dataset, count: int, tokenizer: Any = None, chat_template_kwargs: dict | None = None
) -> str:
    """The first `count` prompts as the trainer renders them, with their token counts and gold answers."""
    blocks = []
    count = min(count, len(dataset))
    for i in range(count):
        text = prompt_text(dataset[i]["prompt"], tokenizer, chat_template_kwargs)
        tokens = ""
        if tokenizer is not None:
            tokens = f", {len(prompt_token_ids([dataset[i]['prompt']], tokenizer, chat_template_kwargs)[0])} tokens"
        # The text is printed raw; its ending (spaces, newlines) decides what the model writes first, so show it quoted.
        blocks.append(
            f"===== prompt {i + 1} of {count}{tokens} =====\n{text}\n===== ends with: {text[-40:]!r} =====\n"
            f"gold answer: {dataset[i]['answer']}"
        )
    return "\n\n".join(blocks)


def preview_prompts(
    args: DataArguments,
    *,
    model_name_or_path: str | None,
    revision: str | None = None,
    seed: int = 42,
    chat_template_kwargs: dict | None = None,
) -> str:
    """`--show_prompts N`: load the tokenizer (not the model) and the data, and format the first N training prompts."""
    from transformers import AutoTokenizer

    if not model_name_or_path:
        raise ValueError("show_prompts needs the model's tokenizer: set model_name_or_path.")
    tokenizer = AutoTokenizer.from_pretrained(model_name_or_path, revision=revision)
    train, _ = load_prompt_dataset(args, seed=seed, tokenizer=tokenizer, chat_template_kwargs=chat_template_kwargs)
    header = (
        f"prompt_template={args.prompt_template!r}, chat_template_kwargs={chat_template_kwargs or {}}, "
        f"{len(train)} training prompts; the first {min(args.show_prompts, len(train))}, exactly as the trainer "
        "renders them:"
    )
    return header + "\n\n" + format_prompts(train, args.show_prompts, tokenizer, chat_template_kwargs)
