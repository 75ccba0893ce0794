"""The `diag/code/` classes (drgrpo/observe/code_metrics.py): one outcome per answer, read from the `code` reward's own
score and note on it, checked on answers run by the real reward in its sandbox (skipped only where the kernel refuses
namespaces)."""

from __future__ import annotations

import json
import math

import pytest
from conftest import skip_unless_required

from drgrpo.experiments.code_families import sum_plus
from drgrpo.observe.code_metrics import (
    COUNTS,
    answer_counts,
    answer_outcome,
    compiles,
    counts_vector,
    program_lines,
    runs_made,
    shares,
)
from rewards import RewardArguments
from rewards.code import NamespacesUnavailable, code_reward, extract_program
from rewards.report import RewardReport


def test_compiles_runs_nothing():
    assert compiles("print(1)\n") and not compiles("print(1\n") and not compiles("return 3\n")
    assert compiles("raise SystemExit(open('/nonexistent').read())\n")  # valid, and never run here
    assert not compiles("(" * 10_000 + ")" * 10_000)  # too deep for the compiler: not a crash of the trainer


def test_notes_and_lengths():
    assert runs_made("3/5 passed (first: crash)") == 5 and runs_made("0/5 passed (first: wrong answer), 4 not run") == 1
    assert runs_made("no code block") == 0 and runs_made(None) == 0
    assert program_lines("a = 1\n\n   \nprint(a)\n") == 2
    assert answer_outcome(None, 0.0, "no code block") == "no_block"
    assert answer_outcome("x = (", 0.0, "0/5 passed (first: crash)") == "syntax_error"
    assert answer_outcome("x = 1", 1.0, "5/5 passed") == "all_tests"
    assert answer_outcome("x = 1", 0.4, "2/5 passed (first: timeout)") == "timeout"
    assert answer_outcome("x = 1", 0.0, "0/5 passed (first: output_limit)") == "runtime_error"
    assert answer_outcome("x = 1", None, "sandbox error on 1 of 5 tests run") == "sandbox_error"


@pytest.fixture(scope="module")
def reward():
    try:
        # 3 CPU seconds (6 s of wall): the endless loop uses them up, the others need milliseconds on a loaded machine.
        return code_reward(RewardArguments(code_timeout=3.0, code_num_workers=2))
    except NamespacesUnavailable as exc:
        skip_unless_required("namespaces", f"no namespaces on this kernel: {exc}")


def test_every_outcome_from_the_real_reward(reward):
    problem = sum_plus(10, __import__("random").Random(0))
    inputs = [case["input"] for case in problem.tests["test_cases"]]
    first = inputs[0].split()
    answers = {
        "no_block": "The sum is easy.",
        "syntax_error": "```python\nprint(sum(map(int, input().split()) + 10)\n```",
        "all_tests": "```python\nprint(sum(map(int, input().split())) + 10)\n```",
        "wrong_output": "```python\nprint(sum(map(int, input().split())))\n```",
        "runtime_error": "```python\nprint(total + 10)\n```",
        "timeout": "```python\nwhile True:\n    pass\n```",
        # Right on the first test only: passes some tests, fails on a wrong output.
        "partial": f"```python\nline = input()\nprint({sum(map(int, first)) + 10} if line.split() == {first!r} else 0)"
        "\n```",
    }
    texts = list(answers.values())
    report = RewardReport(len(texts))
    scores = reward(texts, report=report, verification_info=[json.dumps(problem.tests)] * len(texts))
    programs = [extract_program(text) for text in texts]
    outcomes = [answer_outcome(p, s, d) for p, s, d in zip(programs, scores, report.details, strict=True)]
    assert outcomes == [*list(answers)[:-1], "wrong_output"]
    counts = answer_counts(programs, scores, report.details)
    assert counts["some_tests"] == 2 and counts["answers"] == 7 and counts["test_runs"] == 6 * 5
    assert counts["program_lines"] == 1 + 1 + 1 + 1 + 2 + 2 and counts["programs_with_lines"] == 6
    metrics = shares(counts_vector(counts), reward_seconds=2.0)
    assert metrics["diag/code/block"] == 6 / 7 and metrics["diag/code/runnable"] == 5 / 7
    assert metrics["diag/code/all_tests"] == metrics["diag/code/timeout"] == 1 / 7
    assert metrics["diag/code/wrong_output"] == 2 / 7 and metrics["diag/code/some_tests"] == 2 / 7
    assert metrics["diag/code/program_lines"] == 8 / 6
    assert metrics["diag/code/programs_per_second"] == 15.0 and metrics["diag/code/test_runs"] == 30.0


def test_an_empty_batch_has_nothing_to_measure():
    metrics = shares(dict.fromkeys(COUNTS, 0))
    assert all(math.isnan(v) for k, v in metrics.items() if k != "diag/code/test_runs")
