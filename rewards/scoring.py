"""Scoring a jsonl of (completion, gold) rows with any reward specs: for checking a verifier and hunting reward
hacking before spending GPU hours (`scripts/score.py`, `make score`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewards.registry import SafeReward


@dataclass
class ScoreArguments:
    """What `scripts/score.py` scores and where the per-row results go."""

    input: str = field(metadata={"help": "A .jsonl file with one completion and its gold answer per line."})
    output: str | None = field(
        default=None, metadata={"help": "Per-row results (.jsonl). None: <input>.scored.jsonl next to the input."}
    )
    completion_column: str = field(default="completion", metadata={"help": "Column holding the completion."})
    answer_column: str | None = field(
        default=None,
        metadata={
            "help": "Column holding the gold answer (passed to rewards as `answer`). None: `answer` (`gold` in a "
            "file without `answer`: an evaluation's samples.jsonl), or the tests column (tests_column, default "
            "verification_info) when the rewards are code rewards only."
        },
    )
    tokenizer: str | None = field(
        default=None,
        metadata={"help": "Tokenizer (local folder) for token lengths, needed by overlong and cosine_length."},
    )
    max_completion_length: int | None = field(
        default=None, metadata={"help": "L_max of the length rewards (as the trainer's max_completion_length)."}
    )
    batch_size: int = field(default=1024, metadata={"help": "Rows scored per reward call."})
    truncated_column: str = field(
        default="truncated",
        metadata={
            "help": "Column marking completions cut off by the token budget (make eval's samples.jsonl has it); its "
            "rows are counted separately in the summary."
        },
    )
    truncated_as_wrong: bool = field(
        default=False,
        metadata={
            "help": "Truncated rows earn no credit: every positive score becomes 0 (penalties such as overlong's "
            "stay), as the Dr.GRPO paper scores a cut-off completion 0. Needs the truncated_column."
        },
    )
    show: int = field(default=20, metadata={"help": "How many None/failed rows to print."})


# The rewards that read the tests column rather than a gold answer.
CODE_REWARDS = frozenset({"code", "code_format"})
# The code reward's counters that `score.py` prints (rewards.code.reward.COUNTERS): what happened to the programs.
CODE_COUNTER_WORDS = {
    "timeouts": "test runs timed out",
    "crashes": "crashed (error exit, signal or output over the limit)",
    "sandbox_errors": "failed in the sandbox itself (scored None)",
    "unusable_tests": "problems with unusable tests (None)",
    "no_code": "completions without a code block (0)",
    "check_errors": "checks that raised (a failed test)",
    "check_timeouts": "completions whose comparison ran past code_check_timeout (their other tests failed)",
}


# The gold's column in an evaluation's samples.jsonl (drgrpo/evaluation/runner.py writes `gold`, not `answer`).
EVALUATION_GOLD = "gold"


def default_answer_column(reward_funcs: Sequence[str], tests_column: str, columns: Sequence[str] = ()) -> str:
    """The tests column when every reward is a code reward (they read it, not a gold answer); else `answer`, or
    `gold` when the file's first row (`columns`) has no `answer` but a `gold`: an evaluation's samples.jsonl, read as
    it is."""
    if reward_funcs and set(reward_funcs) <= CODE_REWARDS:
        return tests_column
    return EVALUATION_GOLD if "answer" not in columns and EVALUATION_GOLD in columns else "answer"


def first_columns(path: str | Path) -> list[str]:
    """The columns of the first row of a .jsonl file ([] when it cannot be read: `load_rows` then says why)."""
    try:
        with Path(path).open() as f:
            line = next((line for line in f if line.strip()), "")
        row = json.loads(line) if line else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return []
    return sorted(row) if isinstance(row, dict) else []


def load_rows(path: str | Path, completion_column: str, answer_column: str) -> list[dict]:
    """The rows of a .jsonl file; a clear error names the line or the missing column."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--input {str(path)!r}: no such file.")
    rows = []
    with path.open() as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg}).") from exc
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object per line.")
            for column, flag in ((completion_column, "completion_column"), (answer_column, "answer_column")):
                if column not in row:
                    raise ValueError(f"{path}:{number}: no column {column!r} (it has {sorted(row)}); set --{flag}.")
            rows.append(row)
    return rows


def reward_kwargs(rows: Sequence[dict], completion_column: str, answer_column: str, tokenizer=None) -> dict:
    """TRL-style reward keyword lists from rows: every column, the gold as `answer`, optional token ids."""
    columns = {key for row in rows for key in row} - {completion_column}
    kwargs: dict[str, Any] = {key: [row.get(key) for row in rows] for key in columns}
    kwargs["answer"] = [row[answer_column] for row in rows]
    if "prompt" in kwargs:
        kwargs["prompts"] = kwargs.pop("prompt")
    if tokenizer is not None:
        texts = [str(row[completion_column] or "") for row in rows]
        kwargs["completion_ids"] = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return kwargs


def truncated_flags(rows: Sequence[dict], column: str, required: bool) -> list[bool]:
    """Whether each row's completion was cut off (`column` truthy); a missing column is all False, or, when
    `required` (`--truncated_as_wrong`), a one-line error naming the column and the fix."""
    if required and not any(column in row for row in rows):
        raise ValueError(
            f"--truncated_as_wrong: no row has a {column!r} column marking cut-off completions; set "
            "--truncated_column to the column that does (make eval's samples.jsonl has 'truncated')."
        )
    return [bool(row.get(column)) for row in rows]


def score_rows(
    rows: Sequence[dict],
    reward_funcs: Sequence[SafeReward],
    completion_column: str = "completion",
    answer_column: str = "answer",
    tokenizer=None,
    batch_size: int = 1024,
    counters: dict[str, dict[str, int]] | None = None,
    truncated: Sequence[bool] | None = None,
    truncated_as_wrong: bool = False,
) -> list[dict]:
    """Per-row results: `{"index", "truncated", "<name>": score, "<name>_failed": bool, "<name>_detail": str|None}`
    per reward.

    `counters`, when given, is filled with each reward's counts summed over the batches (`RewardReport.counters`:
    the code reward's timeouts, crashes, sandbox errors, ...). `truncated` (aligned flags): with
    `truncated_as_wrong`, those rows' positive scores become 0 and their detail says so."""
    truncated = list(truncated) if truncated is not None else [False] * len(rows)
    if len(truncated) != len(rows):
        raise ValueError(f"{len(truncated)} truncated flags for {len(rows)} rows: they must align.")
    results = [{"index": i, "truncated": truncated[i]} for i in range(len(rows))]
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        kwargs = reward_kwargs(batch, completion_column, answer_column, tokenizer)
        completions = [row[completion_column] for row in batch]
        for reward in reward_funcs:
            scores = reward(completions=completions, **kwargs)
            report = reward.last_report
            if counters is not None:
                totals = counters.setdefault(reward.__name__, {})
                for key, value in report.counters.items():
                    totals[key] = totals.get(key, 0) + int(value)
            for offset, score in enumerate(scores):
                result = results[start + offset]
                result[reward.__name__] = score
                result[f"{reward.__name__}_failed"] = report.failed[offset]
                result[f"{reward.__name__}_detail"] = report.details[offset]
                if truncated_as_wrong and result["truncated"] and score is not None and score > 0:
                    result[reward.__name__] = 0.0
                    result[f"{reward.__name__}_detail"] = f"truncated, counted wrong (graded {score:g})"
    return results


def summarize(results: Sequence[dict], names: Sequence[str]) -> dict[str, dict]:
    """Per reward: rows, mean over scored rows, share of rows scoring 1.0 (accuracy), None count, failures, and the
    truncated rows apart: how many, and how many of them the reward scored 1.0 (after `truncated_as_wrong`)."""
    summary = {}
    for name in names:
        scores = [r[name] for r in results]
        scored = [s for s in scores if s is not None]
        truncated = [r[name] for r in results if r.get("truncated")]
        summary[name] = {
            "rows": len(scores),
            "mean": sum(scored) / len(scored) if scored else None,
            "share_1.0": sum(s == 1.0 for s in scored) / len(scored) if scored else None,
            "none": len(scores) - len(scored),
            "failures": sum(bool(r[f"{name}_failed"]) for r in results),
            "truncated": len(truncated),
            "truncated_1.0": sum(s == 1.0 for s in truncated),
        }
    return summary


def counter_line(name: str, counts: dict[str, int]) -> str | None:
    """`code: 2 test runs timed out, 1 crashed (...), 0 failed in the sandbox itself (...)`: what happened to the
    programs a code reward ran (timeouts, crashes and sandbox errors always; the other counts when not 0); None for
    a reward without such counters."""
    if not set(counts) & set(CODE_COUNTER_WORDS):
        return None
    always = ("timeouts", "crashes", "sandbox_errors")
    parts = [f"{counts.get(key, 0)} {CODE_COUNTER_WORDS[key]}" for key in always]
    parts += [
        f"{counts[key]} {CODE_COUNTER_WORDS[key]}"
        for key in CODE_COUNTER_WORDS
        if key not in always and counts.get(key)
    ]
    return f"{name}: " + ", ".join(parts)


def flagged_rows(results: Sequence[dict], names: Sequence[str]) -> list[dict]:
    """The rows that some reward scored None or failed on: what to read first when checking a verifier."""
    return [r for r in results if any(r[n] is None or r[f"{n}_failed"] for n in names)]
