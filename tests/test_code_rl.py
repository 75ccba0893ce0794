"""`make code-rl` (issue 55): the recipe is the math demo's with its data and rewards swapped, training problems are
never held out, the goal is judged per seed, the samples are the first held-out problems. No model here but in the
slow miniature at the end (the experiment itself runs on SmolLM2)."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

from drgrpo.experiments import code_rl
from drgrpo.experiments.code_families import held_out_set, training_set
from drgrpo.experiments.code_rl import (
    TASK,
    before_after_samples,
    curve_summary,
    results_table,
    seed_recipe,
    seed_verdict,
)
from drgrpo.recipe.file import read_recipe

MATH = ROOT / "recipes/smollm2_135m_drgrpo.yaml"
CODE = ROOT / "recipes/smollm2_135m_drgrpo_code.yaml"
# What the swap changes: the data (and the prompt's one worked example), the rewards, the code limits the reward needs,
# where the run writes; and the token budget the timing trial set (docs/code-rl.md). Every other key is the math demo's.
SWAPPED = {
    "dataset_path", "answer_column", "tests_column", "check_gold_answers", "chat_examples", "max_prompt_tokens",
    "reward_funcs", "correctness_reward", "code_timeout", "code_num_workers", "output_dir",
}  # fmt: skip


def test_the_code_recipe_is_the_math_recipe_with_data_and_rewards_swapped():
    math, code = read_recipe(MATH), read_recipe(CODE)
    differing = {key for key in math.keys() | code.keys() if math.get(key) != code.get(key)}
    assert differing <= SWAPPED, differing - SWAPPED
    assert code["reward_funcs"][0] == "code" and math["reward_funcs"] == ["accuracy"]
    for key in ("dr_grpo", "bf16", "learning_rate", "num_generations", "temperature", "max_steps", "seed"):
        assert code[key] == math[key], key
    assert code["bf16"] == "auto"


def test_a_seeds_recipe_changes_only_the_data_folder_and_seed(tmp_path):
    base = read_recipe(CODE)
    recipe = seed_recipe(base, tmp_path / "train.jsonl", tmp_path / "model", 2)
    assert {key for key in recipe if recipe.get(key) != base.get(key)} == {
        "dataset_path", "output_dir", "seed", "overwrite_output_dir", "save_strategy"
    }  # fmt: skip
    assert recipe["seed"] == 2 and recipe["save_strategy"] == "no"


@pytest.mark.parametrize("task", [TASK or "sum_plus"])
def test_the_task_trains_on_problems_never_held_out(task):
    held_out = held_out_set(task, 50)
    train = training_set(task, 500, held_out)
    assert len(train) >= 150 and not {p.key for p in train} & {p.key for p in held_out}
    assert not {p.question for p in train} & {p.question for p in held_out}


def _evaluation(greedy: float, pass_k: float) -> dict:
    outcome = {"block": 1.0, "runnable": 0.9, "some_tests": 0.5, "truncated": 0.0}
    return {"greedy": {"pass@1": greedy, **outcome}, "sampled": {"pass@1": greedy / 2, "pass@8": pass_k}}


def test_the_goal_by_hand():
    before = _evaluation(0.20, 0.50)
    met = {"after": _evaluation(0.36, 0.70), "train_seconds": 900.0, "steps": 15, "programs_per_second": 42.0}
    missed = {"after": _evaluation(0.34, 0.60), "train_seconds": 1260.0, "steps": 15, "programs_per_second": None}
    assert seed_verdict(before, met) == {"rise_points": 16.0, "rise_met": True}  # 20% -> 36%: +16 (goal 15)
    assert seed_verdict(before, missed) == {"rise_points": 14.0, "rise_met": False}
    seeds = {"0": met | {"verdict": seed_verdict(before, met)}, "1": missed | {"verdict": seed_verdict(before, missed)}}
    summary = {
        "task": "sum_plus",
        "machine": "CPU X",
        "before": before,
        "seeds": seeds,
        "pass_k": 8,
        "temperature": 0.7,
    }
    table = results_table(summary)
    assert "| 0 | 20% -> 36% | 50% -> 70% | +16 (met) | 15.0 min (15 steps) | 42.0 |" in table
    assert "| 1 | 20% -> 34% | 50% -> 60% | +14 (missed) | 21.0 min (15 steps) | - |" in table
    assert "| seed | pass@1 greedy | pass@8 (t=0.7) |" in table


def test_curves_are_summarised_first_and_last_three():
    history = [{"diag/pass_rate": v, "step": i} for i, v in enumerate([0.1, 0.2, 0.6, 0.7, 0.8])]
    history.append({"train_runtime": 1.0})
    summary = curve_summary(history)
    assert summary["diag/pass_rate"] == {"first": 0.1, "last3": pytest.approx(0.7)}
    assert summary["diag/code/block"] is None  # never logged


def test_the_samples_are_the_first_held_out_problems_before_and_after(tmp_path):
    def write(folder, answers):
        folder.mkdir()
        rows = [
            {"problem_index": i, "question": f"q{i}\nWrite a program.", "completion": f"```python\nprint({a})\n```",
             "correct": a == i, "truncated": a == 9}
            for i, a in enumerate(answers)
        ]  # fmt: skip
        rows.reverse()  # written in the engine's order, not the problems'
        (folder / "samples.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))

    write(tmp_path / "before", [0, 9, 9, 9, 9, 9, 9])
    write(tmp_path / "after", [0, 1, 2, 9, 4, 5, 6])
    text = before_after_samples(tmp_path / "before", tmp_path / "after")
    assert text.count("**q") == 5 and "**q5**" not in text  # the first five, whatever their outcome
    before = "before (fails, cut at the token budget):\n\n````text\n```python\nprint(9)\n```\n````"
    after = "after (passes every test):\n\n````text\n```python\nprint(1)\n```\n````"
    assert f"**q1**\n{before}\n\n{after}" in text


def test_make_code_rl_without_a_task_stops_in_one_line(run_script, monkeypatch):
    """Without a task (the probe chose none, docs/code-rl.md) `make code-rl` says so and how to name one, before any
    work; the default is set to none here, so the test runs whatever the probe's choice becomes."""
    monkeypatch.setattr(code_rl.CodeRLSettings, "task", None)
    result = run_script("scripts/code_rl.py", "--seeds", "0")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr
    assert "no task: the probe found no family in its window" in lines[0] and 'ARGS="--task ' in lines[0]


@pytest.mark.slow
def test_make_code_rl_end_to_end_on_smollm2_in_miniature(tmp_path):
    """`make code-rl`'s stages on the real model, shrunk to one step of one seed on 2 held-out problems: the
    evaluations before and after (greedy and sampled), the training with the code reward and its diag/code/ logs,
    the table, the plot, the samples and the summary."""
    from test_tool_smollm2 import _smollm2

    from drgrpo.experiments.code_rl import CodeRLSettings, run_code_rl

    _smollm2()
    settings = CodeRLSettings(
        output_dir=str(tmp_path / "code-rl"), task=TASK or "list_max_plus", seeds=(0,), num_train=8, num_test=2,
        max_new_tokens=32, greedy_batch_size=2, sampled_batch_size=4, pass_k=2,
        overrides=("--max_steps", "1", "--num_generations", "2", "--per_device_train_batch_size", "2",
                   "--gradient_accumulation_steps", "1", "--max_completion_length", "32"),
    )  # fmt: skip
    summary = run_code_rl(settings, report=lambda line: None)
    out = tmp_path / "code-rl"
    assert json.loads((out / "summary.json").read_text()) == summary
    row = summary["seeds"]["0"]
    assert row["steps"] == 1 and set(row["after"]) == set(summary["before"]) == {"greedy", "sampled"}
    assert "pass@2" in row["after"]["sampled"] and row["after"]["sampled"]["samples"] == 4
    history = json.loads((out / "seed0" / "log_history.json").read_text())
    step = next(entry for entry in history if "diag/code/block" in entry)
    assert step["diag/code/test_runs"] >= 0 and 0.0 <= step["diag/code/block"] <= 1.0
    assert (out / "seed0" / "curves.png").stat().st_size > 0
    assert (out / "seed0" / "samples.md").read_text().count("\nafter (") == 2
    assert "| 0 | " in (out / "results.md").read_text()
    training = read_recipe(out / "seed0" / "recipe.yaml")
    assert training["dataset_path"] == str(out / "data" / "train.jsonl") and training["reward_funcs"][0] == "code"
