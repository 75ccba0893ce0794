"""Problems and prompts: benchmark rows as (question, gold) problems, their fingerprint, and their rendered prompts."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from drgrpo.data.golds import gold_shape_problem, normalize_gold
from drgrpo.evaluation.hub import load_hub_rows


@dataclass(frozen=True)
class Problem:
    """One benchmark problem: its position (stable across runs), question and normalised gold (None: unreadable)."""

    index: int
    question: str
    gold: str | None


def problems_from_rows(
    rows: Iterable[dict], question_column: str, answer_column: str, answer_format: str, source: str = "the dataset"
) -> list[Problem]:
    """Turn dataset rows into `Problem`s, reading the gold with `answer_format`."""
    problems = []
    for index, row in enumerate(rows):
        for column in (question_column, answer_column):
            if column not in row:
                raise ValueError(
                    f"Column {column!r} not in {source}; its rows have {sorted(row)}. "
                    "Set --question_column / --answer_column."
                )
        question = row[question_column]
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"Row {index} of {source}: question column {question_column!r} is empty or not text.")
        # Read as training reads it (drgrpo.data.golds): a list gold under a text format is refused, not turned into
        # the text of its repr, which no answer ever matches.
        if (problem := gold_shape_problem(row[answer_column], answer_format)) is not None:
            raise ValueError(
                f"Row {index} of {source}: answer column {answer_column!r} holds {problem}: every answer would be "
                "graded wrong. Use --answer_format list (or auto) for a list of answers, or store the gold as text, "
                "as training requires (answer_extraction)."
            )
        problems.append(Problem(index, question, normalize_gold(row[answer_column], answer_format)))
    return problems


def load_rows(
    data: str | None = None,
    dataset_name: str | None = None,
    dataset_config: str | None = None,
    split: str = "test",
    preset: str | None = None,
) -> list[dict]:
    """Rows of a local file (via the data layer's loader) or of a hub dataset split (`drgrpo.evaluation.hub`: one
    probe of the hub, then the cache only where it is out of reach). `preset` names the benchmark in the error."""
    if data:
        from drgrpo.data import load_local

        if not Path(data).exists():
            raise FileNotFoundError(f"Evaluation data {str(data)!r} does not exist (--data / BENCH=FILE).")
        return list(load_local(data))
    if dataset_name:
        return load_hub_rows(dataset_name, dataset_config, split, preset)
    raise ValueError("No data: pass a benchmark preset (--benchmark) or a local file (--data FILE).")


def data_fingerprint(problems: Sequence[Problem]) -> str:
    """A short hash of the questions and golds, so that a resumed run is known to evaluate the same problems."""
    digest = hashlib.sha256()
    for problem in problems:
        digest.update(json.dumps([problem.question, problem.gold]).encode())
    return digest.hexdigest()[:16]


def build_prompts(
    tokenizer,
    questions: Sequence[str],
    template: str,
    system_prompt: str | None = None,
    chat_template_kwargs: dict | None = None,
    examples: Sequence[dict] | None = None,
) -> list[tuple[str, list[int]]]:
    """(prompt text, prompt token ids) for each question, exactly as training builds them.

    Uses the template layer (`drgrpo.data.templates`): text templates are rendered and tokenized as TRL tokenizes text
    prompts; `chat` goes through the tokenizer's chat template with `add_generation_prompt=True` and the recipe's
    `chat_template_kwargs`, as TRL does for conversational prompts; `examples` are the recipe's `chat_examples`.
    """
    from drgrpo.data.templates import prompt_text, prompt_token_ids, render_prompt

    rendered = [render_prompt(question, template, system_prompt, examples) for question in questions]
    texts = [prompt_text(prompt, tokenizer, chat_template_kwargs) for prompt in rendered]
    ids = prompt_token_ids(rendered, tokenizer, chat_template_kwargs)
    return list(zip(texts, ids, strict=True))
