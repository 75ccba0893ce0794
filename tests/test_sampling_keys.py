"""Every sampling value is checked with the recipe, before any model loads (issue 51): one table of ranges
(drgrpo/algorithm/sampling_keys.py) for training, `--explain` and evaluation, each refusal one line naming the key, the
value and the range; the generation budget against the model's max_position_embeddings, read without its weights."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from drgrpo.algorithm.sampling_keys import (
    EVALUATION,
    MIN_TRAINING_TEMPERATURE,
    check_sampling_values,
    context_length_problem,
    model_context_length,
    sampling_value_problem,
)
from drgrpo.core.errors import RecipeError


@pytest.mark.parametrize(
    "key, value",
    [("temperature", 1.0), ("temperature", MIN_TRAINING_TEMPERATURE), ("top_p", 1.0), ("top_p", 0.05),
     ("top_k", 0), ("top_k", 50), ("min_p", None), ("min_p", 0.0), ("min_p", 1.0), ("repetition_penalty", 1.0),
     ("repetition_penalty", 0.5), ("learning_rate", float("nan"))],
)  # fmt: skip
def test_values_in_range_pass(key, value):
    assert sampling_value_problem(key, value) is None


@pytest.mark.parametrize(
    "key, value, range_text",
    [
        ("temperature", 0, "a finite number of at least 0.01 for training (0 is greedy"),
        ("temperature", -1.0, "a finite number of at least 0.01"),
        ("temperature", 1e-40, "a finite number of at least 0.01"),
        ("temperature", float("nan"), "a finite number of at least 0.01"),
        ("temperature", float("inf"), "a finite number of at least 0.01"),
        ("top_p", 0.0, "a number in (0, 1]"),
        ("top_p", 1.5, "a number in (0, 1]"),
        ("top_k", -1, "a whole number >= 0, not 1 for training"),
        ("top_k", 1, "1 is greedy: no learning signal"),
        ("top_k", 2.5, "a whole number"),
        ("min_p", 1.5, "a number in [0, 1], or null"),
        ("min_p", -0.1, "a number in [0, 1], or null"),
        ("repetition_penalty", 0.0, "a finite number above 0"),
        ("repetition_penalty", -1.0, "a finite number above 0"),
        ("repetition_penalty", float("nan"), "a finite number above 0"),
        ("temperature", True, "a finite number"),
        ("top_p", "high", "a number in (0, 1]"),
    ],
)
def test_values_out_of_range_name_the_range(key, value, range_text):
    problem = sampling_value_problem(key, value)
    assert problem.startswith(f"{value!r} is not allowed: it ") and range_text in problem


def test_evaluation_allows_greedy_and_nothing_between():
    assert sampling_value_problem("temperature", 0, EVALUATION) is None
    assert sampling_value_problem("temperature", 0.0, EVALUATION) is None
    assert sampling_value_problem("top_k", 1, EVALUATION) is None
    assert "0 (greedy) or a finite number of at least 0.01" in sampling_value_problem("temperature", 1e-40, EVALUATION)
    assert sampling_value_problem("temperature", float("nan"), EVALUATION) is not None


def test_generation_kwargs_are_checked_with_the_same_table():
    with pytest.raises(RecipeError, match=r"^recipe r.yaml: generation_kwargs.min_p: 1.5 is not allowed"):
        check_sampling_values({"generation_kwargs": {"min_p": 1.5, "num_beams": 1}}, "recipe r.yaml")
    check_sampling_values({"generation_kwargs": {"suppress_tokens": [1]}}, "recipe r.yaml")


def test_context_length_by_hand():
    """A prompt takes at least one position: 511 new tokens fit 512 positions, 512 do not; max_prompt_tokens counts."""
    assert context_length_problem(512, 511, None, "max_completion_length") is None
    assert context_length_problem(512, 512, None, "max_completion_length") == (
        "max_completion_length 512 plus a prompt is more than the 512 positions the model attends to "
        "(max_position_embeddings in its config.json); set max_completion_length to at most 511"
    )
    assert context_length_problem(512, 400, 100, "max_completion_length") is None
    assert "plus max_prompt_tokens 100 is more than the 512 positions" in context_length_problem(512, 420, 100, "m")
    assert context_length_problem(512, 420, 100, "m").endswith("set m to at most 412")
    assert context_length_problem(None, 10**9, None, "max_completion_length") is None  # the config does not say
    assert context_length_problem(512, 8, 1024, "m").startswith("max_prompt_tokens 1024 leaves no room for a ")
    gpt2 = SimpleNamespace(n_positions=1024)
    assert model_context_length(gpt2) == 1024


# -- from the user's side: scripts/train.py, --explain, scripts/evaluate.py -----------------------------------------

# The red-team's sampling values (issue 51), each refused at the recipe, before the model loads (the model path
# given does not even exist: nothing gets that far).
RED_TEAM_VALUES = [
    ("temperature", "0", "0.0 is not allowed"),
    ("temperature", "-1", "-1.0 is not allowed"),
    ("temperature", "1e-40", "1e-40 is not allowed"),
    ("temperature", "nan", "nan is not allowed"),
    ("top_p", "0", "0.0 is not allowed"),
    ("top_k", "1", "1 is not allowed"),
    ("min_p", "1.5", "1.5 is not allowed"),
    ("repetition_penalty", "0", "0.0 is not allowed"),
    ("repetition_penalty", "-1", "-1.0 is not allowed"),
    ("max_completion_length", "0", "0 is not allowed"),
    ("num_generations", "1", "1 is not allowed"),
]


@pytest.mark.parametrize("key, value, said", RED_TEAM_VALUES, ids=[f"{k}={v}" for k, v, _ in RED_TEAM_VALUES])
def test_train_refuses_each_value_in_one_line_before_loading(run_script, tmp_path, key, value, said):
    result = run_script(
        "scripts/train.py", "recipes/tiny_drgrpo.yaml", "--model_name_or_path", str(tmp_path / "no-model"),
        "--output_dir", str(tmp_path / "run"), f"--{key}", value,
    )  # fmt: skip
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0].startswith(f"error: command line: {key}: {said}: it "), lines
    assert len(lines) == 1 or lines[1].startswith("(the full traceback: rerun with --traceback"), lines
    assert not (tmp_path / "run").exists()


def test_explain_and_a_recipe_file_refuse_the_same_values(run_script, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model_name_or_path: x\ndataset_path: y.jsonl\nmin_p: 1.5\n")
    result = run_script("scripts/train.py", str(recipe), "--explain")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: recipe {recipe}: min_p: 1.5 is not allowed: it drops tokens less likely than this share of the most "
        "likely one, so it takes a number in [0, 1], or null (off). Fix it in the recipe, or override it with --min_p "
        "VALUE."
    ]


def test_values_that_held_still_run(run_script, tiny_model_path, addition_data, tmp_path):
    """`top_k: 0` (off) and `min_p: 1` are valid: one step trains."""
    result = run_script(
        "scripts/train.py", "recipes/tiny_drgrpo.yaml", "--model_name_or_path", str(tiny_model_path),
        "--dataset_path", str(addition_data["train"]), "--output_dir", str(tmp_path / "run"), "--max_steps", "1",
        "--per_device_train_batch_size", "8", "--num_generations", "4", "--top_k", "0", "--min_p", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]


def test_a_budget_beyond_the_models_context_stops_before_the_model_loads(
    run_script, tiny_model_path, addition_data, tmp_path, monkeypatch
):
    """max_completion_length 1000000000 ran 78 s, then asked for 512 GB; now one line from the model's config.json
    (the tiny model attends to 512 positions), before its weights load."""
    import transformers

    loaded = []
    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(lambda *a, **k: loaded.append(1)))
    result = run_script(
        "scripts/train.py", "recipes/tiny_drgrpo.yaml", "--model_name_or_path", str(tiny_model_path),
        "--dataset_path", str(addition_data["train"]), "--output_dir", str(tmp_path / "run"),
        "--max_completion_length", "1000000000",
    )  # fmt: skip
    assert result.returncode == 2 and not loaded
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        f"error: model {str(tiny_model_path)!r}: max_completion_length 1000000000 plus a prompt is more than the 512 "
        "positions the model attends to (max_position_embeddings in its config.json); set max_completion_length to at "
        "most 511."
    ]


def test_evaluation_uses_the_table_with_greedy_allowed(run_script, tiny_model_path, tmp_path):
    problems = tmp_path / "sums.jsonl"
    problems.write_text(json.dumps({"question": "1+1=", "answer": "2"}) + "\n")
    base = ["--model_name_or_path", str(tiny_model_path), "--benchmark", str(problems)]
    refused = run_script("scripts/evaluate.py", *base, "--temperature", "1e-40")
    assert refused.returncode == 2
    first = refused.stderr.strip().splitlines()[0]
    assert first.startswith("error: evaluation: temperature: 1e-40 is not allowed: it divides the logits before ")
    assert "so it takes 0 (greedy) or a finite number of at least 0.01" in first
    too_long = run_script("scripts/evaluate.py", *base, "--max_new_tokens", "100000")
    assert too_long.returncode == 2
    assert re.search(
        r"max_new_tokens 100000 plus the longest prompt \d+ is more than the 512 positions", too_long.stderr
    )
    greedy = run_script(
        "scripts/evaluate.py", *base, "--temperature", "0", "--max_new_tokens", "3", "--output_dir", str(tmp_path / "e")
    )
    assert greedy.returncode == 0, greedy.stderr[-3000:]
