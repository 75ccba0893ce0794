"""scripts/score.py and rewards.scoring: per-row results, the summary, the flagged rows, clear input errors."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

from rewards import RewardArguments, get_reward_funcs
from rewards.scoring import flagged_rows, load_rows, score_rows, summarize, truncated_flags

ROOT = Path(__file__).resolve().parents[1]
ROWS = [
    {"completion": "so \\boxed{72}", "answer": "#### 72", "prompt": "q1"},
    {"completion": "the answer is 5", "answer": "6", "prompt": "q2"},
    {"completion": "\\boxed{1}", "answer": "", "prompt": "q3"},
    {"completion": "<think>x</think><answer>4</answer>", "answer": 4.0, "prompt": "q4"},
]


def test_score_rows_summary_and_flagged_rows():
    funcs = get_reward_funcs(["accuracy", "boxed_format"], RewardArguments(reward_num_workers=0))
    results = score_rows(ROWS, funcs, batch_size=3)  # two batches
    assert [r["accuracy"] for r in results] == [1.0, 0.0, None, 1.0]
    assert [r["accuracy_detail"] for r in results] == ["72", "5", "gold_unparsable", "4"]
    assert [r["boxed_format"] for r in results] == [1.0, 0.0, 1.0, 0.0]
    summary = summarize(results, ["accuracy", "boxed_format"])
    assert summary["accuracy"] == {
        "rows": 4,
        "mean": 2 / 3,
        "share_1.0": 2 / 3,
        "none": 1,
        "failures": 0,
        "truncated": 0,
        "truncated_1.0": 0,
    }
    assert summary["boxed_format"]["mean"] == 0.5
    assert [r["index"] for r in flagged_rows(results, ["accuracy", "boxed_format"])] == [2]


def test_load_rows_names_the_problem(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"completion": "1", "answer": "1"}\n{"completion": "2"}\n')
    with pytest.raises(ValueError, match=r"rows.jsonl:2: no column 'answer'.*--answer_column"):
        load_rows(path, "completion", "answer")
    path.write_text('{"completion": "1", "answer": "1"}\nnot json\n')
    with pytest.raises(ValueError, match=r"rows.jsonl:2: not valid JSON"):
        load_rows(path, "completion", "answer")
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_rows(tmp_path / "missing.jsonl", "completion", "answer")


def test_score_script_writes_results_and_prints_the_summary(tmp_path, monkeypatch, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    output = tmp_path / "scored.jsonl"
    argv = ["score.py", "--input", str(rows), "--output", str(output), "--reward_funcs", "accuracy"]
    monkeypatch.setattr(sys, "argv", argv + ["--reward_num_workers", "0"])
    runpy.run_path(str(ROOT / "scripts" / "score.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert "accuracy: mean 0.6667, scored 1.0: 66.67%, None: 1, failures: 0" in printed
    assert "1 rows scored None or failed" in printed and "row 2: gold=''" in printed
    written = [json.loads(line) for line in output.read_text().splitlines()]
    assert [w["accuracy"] for w in written] == [1.0, 0.0, None, 1.0]


TRUNCATED_ROWS = [
    {"completion": "so \\boxed{72}", "answer": "72", "truncated": False},
    {"completion": "48 + 24 = 72 and then we need to subtract the \\boxed{72", "answer": "72", "truncated": True},
    {"completion": "We have 72 so far. Next, \\boxed{7", "answer": "72", "truncated": True},
]


def test_truncated_rows_are_counted_apart_and_can_be_scored_wrong():
    funcs = get_reward_funcs(["accuracy", "boxed_format"], RewardArguments(reward_num_workers=0))
    flags = truncated_flags(TRUNCATED_ROWS, "truncated", required=True)
    graded = score_rows(TRUNCATED_ROWS, funcs, truncated=flags)
    assert [r["accuracy"] for r in graded] == [1.0, 1.0, 1.0]  # cut-off text with the number in it is graded right
    assert summarize(graded, ["accuracy"])["accuracy"]["truncated"] == 2
    assert summarize(graded, ["accuracy"])["accuracy"]["truncated_1.0"] == 2
    paper = score_rows(TRUNCATED_ROWS, funcs, truncated=flags, truncated_as_wrong=True)
    assert [r["accuracy"] for r in paper] == [1.0, 0.0, 0.0]
    assert paper[1]["accuracy_detail"] == "truncated, counted wrong (graded 1)"
    assert summarize(paper, ["accuracy"])["accuracy"]["truncated_1.0"] == 0


def test_truncated_as_wrong_needs_the_column():
    with pytest.raises(ValueError, match=r"--truncated_as_wrong: no row has a 'cut' column.*--truncated_column"):
        truncated_flags(ROWS, "cut", required=True)
    assert truncated_flags(ROWS, "cut", required=False) == [False] * len(ROWS)


def test_score_script_reports_truncated_rows(tmp_path, monkeypatch, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in TRUNCATED_ROWS))
    argv = ["score.py", "--input", str(rows), "--reward_funcs", "accuracy", "--reward_num_workers", "0"]
    monkeypatch.setattr(sys, "argv", argv + ["--truncated_as_wrong", "true"])
    runpy.run_path(str(ROOT / "scripts" / "score.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert "accuracy: mean 0.3333" in printed
    assert "2 truncated rows (counted wrong): 0 scored 1.0" in printed


def run_score(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    """`python scripts/score.py ARGV` in this process: (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["score.py", *argv])
    code = 0
    try:
        runpy.run_path(str(ROOT / "scripts" / "score.py"), run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_score_without_input_is_a_short_usage_line(monkeypatch, capsys):
    """`make score` without SCORE_INPUT: one line with make's usage (was argparse's usage of every option)."""
    monkeypatch.setenv("MAKELEVEL", "1")
    code, _, err = run_score(monkeypatch, capsys, "--reward_funcs", "accuracy")
    assert code == 2 and len(err.strip().splitlines()) <= 3 and "usage:" not in err, err
    assert err.startswith("error: No input file to score. Usage: make score SCORE_INPUT=samples.jsonl")
    monkeypatch.delenv("MAKELEVEL")
    _, _, err = run_score(monkeypatch, capsys, "--reward_funcs", "accuracy")
    assert "Usage: python scripts/score.py --input samples.jsonl" in err


def test_score_code_rewards_read_the_tests_column_and_count_timeouts_and_crashes(tmp_path, monkeypatch, capsys):
    """`make score SCORE_REWARDS="code code_format"` on rows with a tests column and no `answer` column: scored,
    with the programs that timed out or crashed counted and listed (they score 0, not None)."""
    from test_code_rewards import code_reward_or_skip

    code_reward_or_skip(RewardArguments(code_num_workers=1))  # skips where the kernel refuses namespaces
    tests = [{"input": "2\n", "output": "4\n"}]
    programs = [
        "```python\nprint(int(input()) * 2)\n```",
        "```python\nimport time\ntime.sleep(60)\n```",
        "```python\nraise ValueError\n```",
    ]
    path = tmp_path / "programs.jsonl"
    path.write_text("".join(json.dumps({"completion": p, "verification_info": tests}) + "\n" for p in programs))
    code, out, err = run_score(
        monkeypatch, capsys, "--input", str(path), "--reward_funcs", "code", "code_format",
        "--code_timeout", "1", "--code_num_workers", "1",
    )  # fmt: skip
    assert code == 0, err
    assert f"3 rows from {path} (gold column 'verification_info')" in out
    assert (
        "code: 1 test runs timed out, 1 crashed (error exit, signal or output over the limit), 0 failed in the " in out
    )
    assert "0 rows scored None or failed." in out
    assert "2 rows whose program timed out or crashed first (scored as failed tests, not None):" in out
    assert "'0/1 passed (first: timeout)'" in out and "'0/1 passed (first: crash)'" in out
