"""`make tool-rl` (issue 45): the two arms differ only by the tool and its description, train on problems never held
out, and are judged by the issue's two goals. No model: the experiment itself runs on SmolLM2."""

from __future__ import annotations

import pytest
from conftest import ROOT

from drgrpo.experiments.tool_probe import TOOL_DESCRIPTION, held_out_set, probe_recipe
from drgrpo.experiments.tool_rl import (
    TASK,
    arm_recipe,
    before_after_samples,
    results_table,
    seed_verdict,
    training_set,
)
from drgrpo.recipe.file import read_recipe

RECIPE = ROOT / "recipes/smollm2_135m_drgrpo_tool_rl.yaml"


def test_the_arms_differ_only_by_the_tool_and_its_description():
    base = read_recipe(RECIPE)
    tool, text = arm_recipe("tool", base), arm_recipe("text", base)
    differing = {key for key in tool.keys() | text.keys() if tool.get(key) != text.get(key)}
    assert differing == {"python_tool", "system_prompt", "chat_examples"}
    assert tool["python_tool"] is True and text["python_tool"] is False
    assert TOOL_DESCRIPTION in tool["system_prompt"] and TOOL_DESCRIPTION not in text["system_prompt"]
    # The probe's prompts exactly: the "before" of the experiment is the probe's measurement.
    for arm, with_tool in (("tool", True), ("text", False)):
        probed = probe_recipe(with_tool, base)
        assert {key: arm_recipe(arm, base)[key] for key in probed} == probed
    # Same budget: steps, group, lengths, learning rate, precision, seed are the recipe's, in both.
    for key in ("max_steps", "num_generations", "max_completion_length", "learning_rate", "bf16", "seed"):
        assert tool[key] == text[key] == base[key]
    assert base["bf16"] == "auto" and base["dr_grpo"] is True
    with pytest.raises(ValueError, match="arm must be one of"):
        arm_recipe("both", base)


def test_training_problems_are_never_held_out():
    held_out = held_out_set(TASK, 50)
    train = training_set(TASK, 500, held_out)
    assert len(train) == 500 and len({p.question for p in train}) == 500
    assert not {p.question for p in train} & {p.question for p in held_out}
    assert training_set(TASK, 500, held_out) == train  # fixed seed


def _evaluation(b4: float, b0: float) -> dict:
    blank = {"calls_per_answer": None, "programs_without_error": None, "box_equals_output": None, "truncated": 0.0}
    return {"B4": {**blank, "accuracy": b4}, "B0": {**blank, "accuracy": b0}}


def test_the_goals_by_hand():
    before = _evaluation(0.12, 0.0)
    row = {
        "tool": {"after": _evaluation(0.34, 0.0), "train_seconds": 600.0, "steps": 30},
        "text": {"after": _evaluation(0.10, 0.20), "train_seconds": 540.0, "steps": 30},
    }
    # Tool arm: 12% -> 34% at B=4 is +22 points (goal 20: met); text arm after, at B=0: 20%; 34 - 20 = 14 (goal 15).
    verdict = seed_verdict(before, row)
    assert verdict == {"tool_rise_points": 22.0, "tool_over_text_points": 14.0, "rise_met": True, "lead_met": False}
    table = results_table({"task": TASK, "machine": "CPU X", "before": before, "seeds": {"0": row}})
    assert (
        "| 0 | 12% -> 34% | 0% -> 0% | 0% -> 20% | 12% -> 10% | +22 (met) | +14 (missed) | 10.0 / 9.0 min (30 steps) |"
        in (table)
    )


def test_the_samples_are_the_first_held_out_problems_before_and_after(tmp_path):
    import json

    def write(folder, answers):
        folder.mkdir()
        rows = [
            {"question": f"q{i}", "gold": str(i), "completion": f"\\boxed{{{a}}}", "transcript": f"T{i}:{a}",
             "correct": a == i}
            for i, a in enumerate(answers)
        ]  # fmt: skip
        (folder / "samples.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))

    write(tmp_path / "before", [0, 9, 9, 9, 9, 9, 9])
    write(tmp_path / "after", [0, 1, 2, 9, 4, 5, 6])
    text = before_after_samples(tmp_path / "before", tmp_path / "after")
    assert text.count("**q") == 5 and "**q5**" not in text  # the first five, whatever their outcome
    before, after = "before (wrong):\n\n````text\nT1:9\n````", "after (right):\n\n````text\nT1:1\n````"
    assert f"**q1** (gold 1)\n{before}\n\n{after}" in text


@pytest.mark.slow
def test_make_tool_rl_end_to_end_on_smollm2_in_miniature(tmp_path):
    """`make tool-rl`'s stages on the real model, shrunk to one step of one seed on 2 held-out problems: the arms
    trained side by side from their own recipes, four evaluations after the shared one before, the table, the plot,
    the samples and the summary."""
    import json

    from test_tool_smollm2 import _smollm2

    from drgrpo.experiments.tool_rl import ToolRLSettings, run_tool_rl

    _smollm2()
    settings = ToolRLSettings(
        output_dir=str(tmp_path / "tool-rl"), seeds=(0,), num_train=8, num_test=2, max_new_tokens=32,
        eval_batch_size=2,
        overrides=("--max_steps", "1", "--num_generations", "2", "--per_device_train_batch_size", "2",
                   "--gradient_accumulation_steps", "1", "--max_completion_length", "32"),
    )  # fmt: skip
    summary = run_tool_rl(settings, report=lambda line: None)
    out = tmp_path / "tool-rl"
    assert json.loads((out / "summary.json").read_text()) == summary
    row = summary["seeds"]["0"]
    assert row["tool"]["steps"] == row["text"]["steps"] == 1
    assert set(row["tool"]["after"]) == set(summary["before"]) == {"B4", "B0"}
    # Each arm trained from its own recipe: the tool on and its description in one, both off in the other.
    tool, text = (yaml_values(out / "seed0" / f"{arm}.yaml") for arm in ("tool", "text"))
    assert tool["python_tool"] is True and text["python_tool"] is False and tool["seed"] == text["seed"] == 0
    histories = {arm: (out / "seed0" / arm / "model" / "log_history.jsonl").read_text() for arm in ("tool", "text")}
    assert "diag/tool/calls_per_answer" in histories["tool"] and "diag/tool/" not in histories["text"]
    assert (out / "seed0" / "curves.png").stat().st_size > 0
    assert (out / "seed0" / "samples.md").read_text().count("**What is ") == 2
    assert "| 0 | " in (out / "results.md").read_text()


def yaml_values(path):
    import yaml

    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize(
    "argv, said",
    [
        (("--seeds", "0", "--", "--max_steps", "1"), "1 seed(s) of 1 step and 50 held-out problems, about 4 min each"),
        (
            ("--seeds", "0", "1", "--num_test", "10"),
            "2 seed(s) of 15 steps and 10 held-out problems, about 21 min each",
        ),
        ((), "3 seed(s) of 15 steps and 50 held-out problems, about 23 min each"),
    ],
)
def test_make_tool_rl_announces_the_time_of_what_it_will_run(run_script, monkeypatch, argv, said):
    """Issue 54, item 8: `make tool-rl --seeds 0 -- --max_steps 1` announced "about 23 min each", the full run's.
    The run itself is replaced (it trains SmolLM2): only the first line is the command's."""
    import drgrpo.experiments.tool_rl as tool_rl
    import drgrpo.setup.model_prep as model_prep

    def stop(settings):
        raise SystemExit(0)

    monkeypatch.setattr(tool_rl, "run_tool_rl", stop)
    monkeypatch.setattr(model_prep, "prepare_model", lambda name: None)
    result = run_script("scripts/tool_rl.py", *argv)
    assert result.returncode == 0, result.stderr[-3000:]
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"make tool-rl: {said} (evaluation before training: "), first
