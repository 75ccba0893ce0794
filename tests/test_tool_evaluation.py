"""Evaluation with the Python tool at a call budget (drgrpo/evaluation/tool_eval.py): B=0 is the evaluation as it
always was, a sample that writes no code is the same at any budget, rows keep every turn, graded on the model's own
text, resume is exact, and a rerun with other tool settings refuses to mix into the same folder."""

from __future__ import annotations

import json

import pytest
from tool_model import build_tool_model

from drgrpo.evaluation import evaluate
from drgrpo.evaluation.tool_eval import tool_config, tool_settings, turn_seed


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory):
    return build_tool_model(tmp_path_factory.mktemp("tool-model"))


def _rows(folder) -> list[dict]:
    rows = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda r: (r["problem_index"], r["sample_index"]))


def _data(tmp_path, questions) -> str:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"question": q, "answer": "1"}) + "\n" for q in questions))
    return str(path)


def _evaluate(model, data, folder, **kwargs):
    settings = dict(prompt_template="plain", n=2, temperature=1.0, max_new_tokens=24, progress=False, batch_size=3)
    settings.update(kwargs)
    return evaluate(str(model), data_file=data, output_dir=str(folder), **settings)


def test_a_sample_without_code_is_the_same_at_every_budget(tiny_model_path, tmp_path):
    """The random tiny model writes no ```python block: at B=2 every sample equals B=0's, which is the evaluation as
    it was (the same config, no tool key); only the tool's fields are added to the rows."""
    data = _data(tmp_path, [f"{a}+{a}=" for a in range(6)])
    plain = _evaluate(tiny_model_path, data, tmp_path / "b0")
    tool = _evaluate(tiny_model_path, data, tmp_path / "b2", tool_max_calls=2)
    assert "tool_max_calls" not in json.loads((tmp_path / "b0" / "eval_config.json").read_text())
    assert json.loads((tmp_path / "b2" / "eval_config.json").read_text())["tool_max_calls"] == 2
    for a, b in zip(_rows(tmp_path / "b0"), _rows(tmp_path / "b2"), strict=True):
        assert {k: b[k] for k in a} == a
        assert b["tool_calls"] == 0 and len(b["turns"]) == 1 and b["transcript"] == a["completion"]
    assert plain["pass@1"] == tool["pass@1"] and tool["tool_calls_per_sample"] == 0.0


def test_rows_keep_every_turn_and_are_graded_on_the_models_text(tool_model, tmp_path):
    data = _data(tmp_path, ["call 0:", "skip 0!", "call 1:"])
    summary = _evaluate(tool_model, data, tmp_path / "eval", tool_max_calls=1)
    rows = _rows(tmp_path / "eval")
    calls = [r for r in rows if r["question"].startswith("call")]
    assert summary["tool_calls_per_sample"] == pytest.approx(4 / 6)
    for row in calls:
        assert row["transcript"] == "```python\nprint(1)\n```\n```output\n1\n```\nok"
        assert row["completion"] == "```python\nprint(1)\n```ok"  # what was graded: no observation
        assert [t["status"] for t in row["turns"]] == ["ok", None]
        assert row["turns"][0] == {"text": "```python\nprint(1)\n```", "code": "print(1)\n", "observation": "1",
                                   "status": "ok"}  # fmt: skip
        assert not row["correct"]  # the gold is 1, and only the tool printed it
        assert row["ended"] == "eos" and not row["truncated"]


def test_resume_with_the_tool_is_exact_and_other_settings_refuse_to_mix(tool_model, tmp_path):
    data = _data(tmp_path, ["call 0:", "skip 0!", "call 1:", "skip 1!"])
    _evaluate(tool_model, data, tmp_path / "whole", tool_max_calls=1)
    _evaluate(tool_model, data, tmp_path / "killed", tool_max_calls=1)
    samples = tmp_path / "killed" / "samples.jsonl"
    lines = samples.read_text().splitlines(keepends=True)
    samples.write_text("".join(lines[:3]) + lines[3][:20])  # killed mid-write: three rows and a torn one
    _evaluate(tool_model, data, tmp_path / "killed", tool_max_calls=1)
    assert _rows(tmp_path / "killed") == _rows(tmp_path / "whole")
    with pytest.raises(ValueError, match="tool_max_calls: 1 -> 2"):
        _evaluate(tool_model, data, tmp_path / "killed", tool_max_calls=2)


def test_tool_settings_come_from_the_recipe_and_are_checked():
    settings = tool_settings(3, {"tool_output_chars": 50, "tool_timeout": 1.5, "learning_rate": 1e-6})
    assert tool_config(settings) == {
        "tool_max_calls": 3, "tool_output_chars": 50, "tool_output_keep": "head", "tool_timeout": 1.5
    }  # fmt: skip
    with pytest.raises(ValueError, match="tool_output_keep"):
        tool_settings(3, {"tool_output_keep": "middle"})
    with pytest.raises(ValueError, match="tool_max_calls=65"):
        evaluate("unused", data_file="unused.jsonl", tool_max_calls=65)
    assert turn_seed(7, 0) == 7 and turn_seed(7, 1) != turn_seed(7, 2)
