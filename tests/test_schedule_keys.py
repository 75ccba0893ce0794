"""One range check of the schedule and batch keys, used by training, `--explain`, `plan.py` and the planner's library:
zero, negative and fractional values are one line naming the key and the fix, never a ZeroDivisionError (issue 25)."""

from __future__ import annotations

import subprocess

import pytest
from conftest import ROOT

from drgrpo.algorithm.schedule_keys import SCHEDULE_KEYS, check_schedule_values, schedule_value_problem
from drgrpo.core.errors import RecipeError
from drgrpo.planning.batch import BatchPlan, batch_plan

TINY = "recipes/tiny_drgrpo.yaml"


def one_line_error(result: subprocess.CompletedProcess) -> str:
    """The `error:` line of a refusal (a script's run: the `run_script` fixture): status 2, at most 3 lines in all, no
    traceback."""
    stderr = result.stderr
    assert result.returncode == 2, stderr[-3000:]
    assert "Traceback" not in stderr and "ZeroDivisionError" not in stderr, stderr[-3000:]
    assert len(stderr.strip().splitlines()) <= 3, stderr
    return stderr.splitlines()[0]


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("steps_per_generation", 0, True),
        ("gradient_accumulation_steps", -1, False),
        ("per_device_train_batch_size", 2.5, False),
        ("num_generations", 1, False),
        ("max_steps", 0, False),
        ("num_train_epochs", 0, False),
    ],
)
def test_range_check_by_hand(key, value, allowed):
    problem = schedule_value_problem(key, value)
    assert problem is not None and problem.startswith(
        f"{value!r} is not allowed: it counts {SCHEDULE_KEYS[key].counts}"
    )
    assert ("null:" in problem) is allowed  # the keys that may be left unset say what unset means
    for fine in ({"steps_per_generation": None}, {"max_steps": -1}, {"num_train_epochs": 0.5}, {"num_generations": 2}):
        check_schedule_values(fine, "recipe r.yaml")
    with pytest.raises(
        RecipeError, match=rf"^recipe r.yaml: {key}: .* Fix it in the recipe, or override it with --{key}"
    ):
        check_schedule_values({key: value}, "recipe r.yaml")


def test_the_planner_library_refuses_instead_of_dividing_by_zero():
    with pytest.raises(RecipeError, match="steps_per_generation: 0 is not allowed"):
        batch_plan(8, 16, 1, 8, steps_per_generation=0)
    with pytest.raises(RecipeError, match="gradient_accumulation_steps: 0 is not allowed"):
        BatchPlan(8, 16, 0, 1, 8, 1)
    with pytest.raises(RecipeError, match="world size 0"):
        batch_plan(0, 16, 1, 8)


@pytest.mark.parametrize(
    "script_and_flags",
    [
        ("scripts/train.py", TINY, "--explain", "--steps_per_generation", "0"),
        ("scripts/train.py", TINY, "--explain", "--gradient_accumulation_steps", "0"),
        ("scripts/train.py", TINY, "--gradient_accumulation_steps", "0"),  # training itself
        ("scripts/plan.py", TINY, "--", "--steps_per_generation", "0"),
    ],
)
def test_zero_schedule_keys_typed_by_hand_are_one_line(run_script, script_and_flags):
    script, *argv = script_and_flags
    line = one_line_error(run_script(script, *argv))
    key = argv[argv.index("0") - 1][2:]
    assert line.startswith(f"error: command line: {key}: 0 is not allowed") and f"Fix the --{key} value." in line


def test_a_recipe_with_steps_per_generation_0_is_refused_by_plan_explain_and_training(tmp_path, run_script):
    """What the old verl converter wrote for ppo_mini_batch_size > train_batch_size."""
    recipe = tmp_path / "converted.yaml"
    recipe.write_text((ROOT / TINY).read_text() + "steps_per_generation: 0\n")
    for script, *flags in (("scripts/plan.py",), ("scripts/train.py", "--explain"), ("scripts/train.py",)):
        line = one_line_error(run_script(script, str(recipe), *flags))
        assert line.startswith(f"error: recipe {recipe}: steps_per_generation: 0 is not allowed"), line
        assert "Fix it in the recipe, or override it with --steps_per_generation VALUE." in line


def test_explain_runs_the_checks_training_runs(run_script):
    """`--explain --num_generations 1` printed a card that training then rejected; now both refuse it."""
    for flags in (("--explain",), ()):
        line = one_line_error(run_script("scripts/train.py", TINY, *flags, "--num_generations", "1"))
        assert "num_generations: 1 is not allowed" in line and "a group of one has no baseline" in line
    # The batch rules too, at the recipe's world size (its header says 1): 64 completions per round, groups of 3.
    line = one_line_error(run_script("scripts/train.py", TINY, "--explain", "--num_generations", "3"))
    assert "at world size 1: A generation round holds" in line and "not a multiple of num_generations (3)" in line
