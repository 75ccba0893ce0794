"""Code benchmarks in `make eval`: programs graded by the training reward's sandbox, pass@k, no maj@k."""

from __future__ import annotations

import json

import pytest
from conftest import skip_unless_required

from drgrpo.data.golds import normalize_gold
from drgrpo.evaluation import evaluate
from drgrpo.evaluation.benchmarks import resolve_preset
from drgrpo.evaluation.code import code_settings, grade_code_completions
from rewards.code import NamespacesUnavailable
from rewards.code.taskset import TASKS_FILE, as_completion, load_task_set


def test_code_tests_gold_keeps_the_tests_as_json():
    tests = {"inputs": ["1"], "outputs": ["1"]}
    assert json.loads(normalize_gold(tests, "code_tests")) == tests
    assert normalize_gold('{"inputs": []}', "code_tests") == '{"inputs": []}'
    assert normalize_gold(None, "code_tests") is None
    assert resolve_preset("apps").answer_format == "code_tests"
    assert code_settings({"code_timeout": 2.0, "learning_rate": 1e-6}).code_timeout == 2.0


def test_a_sample_is_correct_only_when_it_passes_every_test():
    rows = load_task_set(TASKS_FILE)[:3]
    completions = [as_completion(r["reference"]) for r in rows] + [as_completion(rows[0]["wrong"]), "no code", "x"]
    golds = [r["verification_info"] for r in rows] + [rows[0]["verification_info"]] * 2 + ["not tests"]
    try:
        verdicts = grade_code_completions(completions, golds, code_settings({"code_num_workers": 1}))
    except NamespacesUnavailable as exc:
        skip_unless_required("namespaces", f"no namespaces on this kernel: {exc}")
    assert [v for v, _ in verdicts] == ["correct"] * 3 + ["incorrect", "no_answer", "gold_unparsable"]


@pytest.mark.slow
def test_make_eval_on_the_shipped_code_tasks(tiny_model_path, tmp_path):
    summary = evaluate(
        tiny_model_path,
        str(TASKS_FILE),
        "question",
        "verification_info",
        "plain",
        answer_format="code_tests",
        n=2,
        temperature=1.0,
        max_new_tokens=8,
        max_problems=4,
        progress=False,
        output_dir=tmp_path / "eval",
    )
    rows = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and summary["num_samples"] == 8
    assert {r["verdict"] for r in rows} <= {"correct", "incorrect", "no_answer"}
    assert summary["pass@1"] == sum(r["correct"] for r in rows) / 8
    assert "pass@2" in summary and "maj@2" not in summary
    assert summary["unparsable_golds"] == 0
