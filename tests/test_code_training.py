"""A code run end to end: the data pipeline passes the tests column through to the rewards (no answer column), and
a tiny-model Dr.GRPO run with the `code` reward on the shipped task set completes and logs the code counters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from drgrpo.data import load_prompt_dataset
from drgrpo.run.arguments import ScriptArguments
from rewards.code.taskset import TASKS_FILE, load_task_set

ROOT = Path(__file__).resolve().parents[1]


def test_the_pipeline_carries_the_tests_column_when_code_is_rewarded():
    args = ScriptArguments(
        dataset_path=str(TASKS_FILE),
        prompt_column="question",
        answer_column=None,
        prompt_template="plain",
        reward_funcs=["code", "code_format"],
        check_gold_answers=True,  # skipped anyway: there is no answer column
    )
    train, _ = load_prompt_dataset(args, seed=0)
    assert train.column_names == ["prompt", "answer", "verification_info"]
    by_prompt = {row["question"]: row["verification_info"] for row in load_task_set()}
    assert all(by_prompt[row["prompt"]] == row["verification_info"] for row in train)
    assert set(train["answer"]) == {""}
    plain = ScriptArguments(
        dataset_path=str(TASKS_FILE),
        prompt_column="question",
        answer_column=None,
        prompt_template="plain",
        reward_funcs=["code_format"],
    )
    assert load_prompt_dataset(plain, seed=0)[0].column_names == ["prompt", "answer"]


def test_a_missing_tests_column_is_named(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"question": "q", "tests": "[]"}) + "\n")
    args = ScriptArguments(
        dataset_path=str(path),
        prompt_column="question",
        answer_column=None,
        prompt_template="plain",
        reward_funcs=["code"],
    )
    with pytest.raises(ValueError, match="column 'verification_info' \\(from keep_columns/tests_column.*tests"):
        load_prompt_dataset(args, seed=0)


@pytest.mark.slow
def test_a_tiny_code_run_completes(tiny_model_path, tmp_path):
    output = tmp_path / "run"
    command = [
        sys.executable,
        "scripts/train.py",
        "recipes/tiny_drgrpo_code.yaml",
        "--model_name_or_path",
        str(tiny_model_path),
        "--output_dir",
        str(output),
        "--max_steps",
        "2",
        "--reward_funcs",
        "code",
        "--reward_weights",
        "1.0",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, textwrap.shorten(done.stderr[-3000:], 3000)
    state = json.loads((output / "trainer_state.json").read_text())
    logs = [entry for entry in state["log_history"] if "rewards/code/mean" in entry]
    assert len(logs) == 2
    for entry in logs:
        # 2 problems x 4 completions per step: each one either had no code block or ran its tests in the sandbox.
        assert entry["rewards/code/unusable_tests"] == 0.0
        assert entry["rewards/code/sandbox_errors"] == 0.0
        assert 0.0 <= entry["rewards/code/no_code"] <= 8.0
        # What the programs did (drgrpo/algorithm/code_logs.py), every answer in one outcome.
        assert entry["diag/code/no_block"] == 1.0 - entry["diag/code/block"]
        assert entry["diag/code/test_runs"] == 6 * round(8 * entry["diag/code/block"])  # 6 tests a problem, all run
        assert entry["diag/code/programs_per_second"] >= 0.0


def test_kept_columns_of_a_mixture_become_json_strings(tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(json.dumps({"q": "p1", "tests": {"inputs": ["1"], "outputs": ["1"]}}) + "\n")
    second.write_text(json.dumps({"q": "p2", "tests": [{"input": "2", "output": "2"}]}) + "\n")
    args = ScriptArguments(
        dataset_mixture=[{"dataset_path": str(first)}, {"dataset_path": str(second)}],
        prompt_column="q",
        answer_column=None,
        prompt_template="plain",
        keep_columns=["tests"],
        reward_funcs=["code_format"],
    )
    train, _ = load_prompt_dataset(args, seed=0)
    kept = dict(zip(train["prompt"], train["tests"], strict=True))
    assert json.loads(kept["p1"]) == {"inputs": ["1"], "outputs": ["1"]}
    assert json.loads(kept["p2"]) == [{"input": "2", "output": "2"}]
    with pytest.raises(ValueError, match="'answer' is the name of a canonical column"):
        load_prompt_dataset(ScriptArguments(dataset_path=str(first), prompt_column="q", keep_columns=["answer"]))
