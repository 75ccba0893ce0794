"""A new user's first two hours (issue 43), each as the user typed it: rerunning a finished run, an unwritable
output_dir, a key written twice in a recipe, `--key null` on the command line, the `--traceback` hint after a plain
usage error, and what a short run says about its checkpoints; and (issue 54) what the same run says about its speed:
torch's thread count, each step's wall seconds, the precision line at INFO."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from safetensors.torch import load_file
from test_first_hour import TINY, tiny_run

from drgrpo.core.errors import RecipeError, UsageError, format_user_error
from drgrpo.observe.step_log import step_line

HINT = "(the full traceback: rerun with --traceback, or set DRGRPO_DEBUG=1)"


@pytest.fixture
def train(run_script):
    """`python SCRIPT ARGS...` as typed, run in this process (the `run_script` fixture)."""
    return lambda script, *args: run_script(script, *args)


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    """The stderr lines of a refused command (status 2, no traceback), timestamps of log lines left out."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return [line for line in result.stderr.strip().splitlines() if not line[:4].isdigit()]


STEP = re.compile(r"step (\d)/2 \| .* \| (\d+\.\d) s/step, (\d+(?:-\d+)?) threads$")


def speed_and_precision_said(result: subprocess.CompletedProcess, output_dir: Path) -> dict[str, bool]:
    """What a 2-step tiny run (logging every step) says about its speed (issue 54, items 2, 3 and 10): the start-up
    lines say torch's thread count and why; each step line ends with its wall seconds and threads (TRL's step_time,
    its `training_step` alone, only in log_history.jsonl, under its own name); the `precision:` line is INFO."""
    output = result.stdout + result.stderr
    threads = re.search(r"INFO drgrpo\.run\.training: torch threads: (\d+) \((OMP_NUM_THREADS=1|of \d cores)", output)
    lines = [match for line in output.splitlines() if (match := STEP.search(line.strip()))]
    rows = [json.loads(line) for line in (output_dir / "log_history.jsonl").read_text().splitlines()]
    step_time = {row["step"]: row["step_time"] for row in rows if "step_time" in row}  # TRL's, in the file
    total = re.search(r"trained 2 steps in (\d+\.\d) s", output)
    return {
        "threads at start-up": threads is not None,
        "step lines": [m.group(1) for m in lines] == ["1", "2"]
        and threads is not None
        and {m.group(3) for m in lines} == {threads.group(1)},
        # Wall time holds TRL's step time (training_step only) and the rest of the step; the lines add up to no more
        # than the run took.
        "wall seconds": bool(lines)
        and total is not None
        and all(float(m.group(2)) >= round(step_time[int(m.group(1))], 1) for m in lines)
        and sum(float(m.group(2)) for m in lines) <= float(total.group(1)) + 0.1,
        "precision at INFO": bool(re.search(r"INFO drgrpo\.run\.training: precision: training float32", output))
        and not re.search(r"WARNING \S+: precision:", output),
    }


# --- 1 and 5: a finished run is left alone; a longer one continues; a short run says when it checkpoints -----------
def test_rerunning_a_finished_run_changes_nothing_and_a_longer_one_resumes(
    tiny_model_path, addition_data, tmp_path, train
):
    output_dir = tmp_path / "run"
    command = tiny_run(tiny_model_path, addition_data["train"], output_dir, "--max_steps", "2", "--save_strategy",
                       "steps", "--save_steps", "5")  # fmt: skip
    first = train(*command)
    assert first.returncode == 0, first.stderr[-3000:]
    said = speed_and_precision_said(first, output_dir)  # issue 54, items 2, 3, 10: the same run's start and step lines
    assert all(said.values()), ({key: ok for key, ok in said.items() if not ok}, first.stderr[-3000:])
    # A 2-step run with save_steps 5 saved no checkpoint before its last step, and says so (not "every 5 steps").
    assert (
        "Starting at step 0; no checkpoint before the last step (save_steps 5 >= max_steps 2): a stopped run loses "
        f"the steps it trained (--save_steps N with N < 2 keeps progress); the last step is saved as "
        f"{output_dir / 'checkpoint-2'}."
    ) in first.stderr
    assert "trained 2 steps in " in first.stdout + first.stderr
    model = output_dir / "model.safetensors"
    saved, saved_at = model.read_bytes(), model.stat().st_mtime_ns
    files = sorted(path.name for path in output_dir.iterdir())

    again = train(*command)  # the same command: used to resume, train step 3/2 and replace the model
    assert again.returncode == 0, again.stderr[-3000:]
    assert (
        f"{output_dir} holds a finished run: checkpoint-2 is its last step (max_steps 2) and its model is saved; "
        "nothing trained, nothing changed. To train longer, rerun with a larger --max_steps N (it resumes from "
        "checkpoint-2); to start afresh, --overwrite_output_dir true."
    ) in again.stderr
    assert "step 3" not in again.stdout + again.stderr and "Resuming" not in again.stderr
    assert "Training prompts" not in again.stderr  # nothing loaded
    assert sorted(path.name for path in output_dir.iterdir()) == files  # no checkpoint-3
    assert model.read_bytes() == saved and model.stat().st_mtime_ns == saved_at

    # Killed after its last checkpoint, before its final save: the rerun saves checkpoint-2's model, trains nothing
    # (transformers resumed it and trained step 3/2).
    saved_weights = load_file(output_dir / "checkpoint-2" / "model.safetensors")
    (output_dir / "trainer_state.json").unlink()
    model.unlink()
    killed = train(*command)
    assert killed.returncode == 0, killed.stderr[-3000:]
    assert (
        f"Resuming from checkpoint {output_dir / 'checkpoint-2'} (step 2), the run's last step (max_steps 2): nothing "
        "left to train, saving its model;"
    ) in killed.stderr
    assert "step 3" not in killed.stdout + killed.stderr and not (output_dir / "checkpoint-3").exists()
    assert "trained 0 steps (resumed at step 2: 2 in all)" in killed.stdout + killed.stderr
    weights = load_file(model)
    assert weights.keys() == saved_weights.keys()
    assert all(torch.equal(weights[name], saved_weights[name]) for name in weights)
    assert "holds a finished run" in train(*command).stderr  # and it is finished now

    longer = train(*command, "--max_steps", "3")  # a larger max_steps continues the run
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert f"Resuming from checkpoint {output_dir / 'checkpoint-2'} (step 2)" in longer.stderr
    output = longer.stdout + longer.stderr
    assert "step 3/3 | " in output and "step 4" not in output
    # What this invocation trained, and the total (was "trained 3 steps" for the one step after the resume).
    assert "trained 1 step (resumed at step 2: 3 in all) in " in output
    assert (output_dir / "checkpoint-3").is_dir()


def test_the_end_of_training_line_counts_this_invocations_steps():
    assert step_line({"train_runtime": 30.0}, 5, 5, first_step=2) == (
        "trained 3 steps (resumed at step 2: 5 in all) in 30.0 s (10.0 s/step); every step's metrics: "
        "log_history.jsonl in output_dir"
    )
    assert step_line({"train_runtime": 4.0}, 2, 2).startswith("trained 2 steps in 4.0 s (2.0 s/step)")


# --- 2: an output_dir that cannot be written: one line, before the model and data load ------------------------------
@pytest.mark.parametrize("under", ["", "sub/run"], ids=["is_a_file", "under_a_file"])
def test_an_unwritable_output_dir_is_one_line_before_anything_loads(
    tiny_model_path, addition_data, tmp_path, under, train
):
    blocker = tmp_path / "taken"
    blocker.write_text("not a folder\n")
    output_dir = blocker / under if under else blocker
    result = train(*tiny_run(tiny_model_path, addition_data["train"], output_dir, "--max_steps", "1"))
    reason = (
        "is a file, not a folder (the run saves its model there)"
        if not under
        else f"cannot be created: {str(blocker)!r} is a file, not a folder"
    )
    assert error_lines(result) == [
        f"error: output_dir {str(output_dir)!r} {reason}: set output_dir to a folder you can write (--output_dir DIR)."
    ]
    assert "Training prompts" not in result.stderr and "NotADirectoryError" not in result.stderr


# --- 3: a key written twice in a recipe ------------------------------------------------------------------------------
def test_a_key_written_twice_in_a_recipe_names_the_key_and_both_lines(tmp_path, train):
    recipe = tmp_path / "recipe.yaml"
    text = (ROOT / TINY).read_text()
    recipe.write_text(text + "learning_rate: 1.0e-3   # pasted from another recipe\n")
    first_line = 1 + text.splitlines().index(next(line for line in text.splitlines() if line.startswith("learning_")))
    last_line = len(text.splitlines()) + 1
    expected = (
        f"error: Recipe file {str(recipe)!r} line {last_line}: key 'learning_rate' is set twice (first on line "
        f"{first_line}); YAML would silently keep the last value: delete one of the two lines."
    )
    assert error_lines(train("scripts/train.py", str(recipe), "--show_prompts", "1")) == [expected]
    plan = train("scripts/plan.py", str(recipe))  # every reader of recipes refuses it
    assert expected in plan.stderr and plan.returncode != 0, plan.stderr[-3000:]


# --- 4: `--key null` unsets a recipe's optional key ------------------------------------------------------------------
def test_null_on_the_command_line_unsets_the_recipes_key(tiny_model_path, addition_data, tmp_path, train):
    recipe = tmp_path / "both.yaml"
    recipe.write_text(
        (ROOT / TINY).read_text().replace("dataset_path:", "dataset_name: openai/gsm8k\ndataset_path:", 1)
        .replace("outputs/demo-tiny/sft", str(tiny_model_path))
        .replace("outputs/demo-tiny/data/train.jsonl", str(addition_data["train"]))
    )  # fmt: skip
    shown = train("scripts/train.py", str(recipe), "--dataset_name", "null", "--show_prompts", "1")
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "===== prompt 1 of 1" in shown.stdout and "gold answer: " in shown.stdout

    from drgrpo.recipe.cli import parse_recipe

    for spelling in ("None", "~", "null"):
        script_args, _, _ = parse_recipe([str(recipe), "--dataset_name", spelling, "--dataset_test_path=" + spelling])
        assert script_args.dataset_name is None and script_args.dataset_test_path is None
        assert script_args.dataset_path == str(addition_data["train"])
    with pytest.raises(UsageError, match=r"--learning_rate null: learning_rate cannot be unset, it always has a value"):
        parse_recipe([str(recipe), "--learning_rate", "null"])
    # Both set: the message says how to unset one from the command line.
    both = train("scripts/train.py", str(recipe), "--show_prompts", "1")
    assert "on the command line `--dataset_name null` or `--dataset_path null` unsets the recipe's" in both.stderr


# --- 5: the --traceback hint follows unexpected failures, not a wrong key -------------------------------------------
def test_a_usage_error_is_one_line_without_the_traceback_hint(train):
    result = train("scripts/train.py", TINY, "--learning_rat", "1e-6")
    assert error_lines(result) == [
        "error: Unknown key 'learning_rat' in the command line. Did you mean 'learning_rate'? Run `python "
        "scripts/train.py --help` for all keys."
    ]
    assert format_user_error(RecipeError("the model cannot be loaded.")).splitlines()[1] == HINT
    assert format_user_error(UsageError("bad value.")) == "error: bad value."


def test_the_recipe_file_as_written_still_parses(tmp_path):
    """The duplicate-key loader reads every shipped recipe as PyYAML did."""
    import yaml

    from drgrpo.recipe.file import read_recipe

    for recipe in sorted(Path(ROOT / "recipes").glob("*.yaml")):
        assert read_recipe(recipe) == (yaml.safe_load(recipe.read_text()) or {}), recipe
