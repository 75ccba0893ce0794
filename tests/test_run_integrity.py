"""A run never loses its work and never saves garbage (issue 51), each case from the user's side on the tiny model:
a cut-short file in the newest checkpoint falls back to the one before; a full disk during a save or a log write is
one line and leaves no checkpoint that looks complete; two runs into one output_dir: the second stops naming the
first, and a SIGKILLed run never blocks the next; changed data stops a resume; a non-finite step stops the run before
it is saved. (Sampling values: tests/test_sampling_keys.py.)"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PYTHON, ROOT, skip_unless_required

from drgrpo.core.durable import STAGING_FOLDER
from drgrpo.run.output_guard import RUN_RECORD
from drgrpo.run.run_lock import LOCK_FILE

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def tiny_args(model: Path, data: Path, output_dir: Path, *extra: str) -> list[str]:
    """scripts/train.py's arguments for a short tiny run that saves a checkpoint after every step."""
    return [
        "recipes/tiny_drgrpo.yaml", "--model_name_or_path", str(model), "--dataset_path", str(data),
        "--output_dir", str(output_dir), "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1",
        "--logging_steps", "1", "--per_device_train_batch_size", "8", "--num_generations", "4", *extra,
    ]  # fmt: skip


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:") or "Traceback" in line]


@pytest.fixture(scope="module")
def two_step_run(tiny_model_path, addition_data, tmp_path_factory) -> Path:
    """A finished two-step run (checkpoint-1, checkpoint-2, the final model), trained once for the module."""
    output_dir = tmp_path_factory.mktemp("two-step") / "run"
    args = tiny_args(tiny_model_path, addition_data["train"], output_dir)
    result = subprocess.run([PYTHON, "scripts/train.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return output_dir


def copy_run(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return copy


def cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


# -- checkpoints whole or skipped ---------------------------------------------------------------------------------


def test_a_run_leaves_whole_checkpoints_and_no_staging_folder(two_step_run):
    from drgrpo.core.checkpoints import incomplete_reason

    assert sorted(p.name for p in two_step_run.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert all(incomplete_reason(p) is None for p in two_step_run.glob("checkpoint-*"))
    assert not (two_step_run / STAGING_FOLDER).exists()


@pytest.mark.parametrize(
    "name, reason",
    [
        ("optimizer.pt", "optimizer.pt is not a whole torch archive"),
        ("model.safetensors", "model.safetensors is cut short"),
    ],
)
def test_a_cut_short_file_in_the_newest_checkpoint_resumes_from_the_one_before(
    two_step_run, tiny_model_path, addition_data, tmp_path, run_script, name, reason
):
    """Power loss or a full disk after the save: the rerun skips checkpoint-2 in one line and resumes from
    checkpoint-1 (it used to die in `PytorchStreamReader failed reading zip archive` / `SafetensorError`)."""
    run = copy_run(two_step_run, tmp_path)
    cut_in_half(run / "checkpoint-2" / name)
    result = run_script("scripts/train.py", *tiny_args(tiny_model_path, addition_data["train"], run))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Skipping incomplete checkpoint {run / 'checkpoint-2'}: {reason}" in result.stderr
    assert f"Resuming from checkpoint {run / 'checkpoint-1'} (step 1)" in result.stderr
    assert "Traceback" not in result.stderr
    rows = [json.loads(line) for line in (run / "log_history.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "loss" in row] == [1, 2]  # step 2 trained again, logged once

    from drgrpo.core.checkpoints import incomplete_reason

    assert incomplete_reason(run / "checkpoint-2") is None  # saved again, whole


def test_evaluation_and_plot_use_the_same_rule(two_step_run, tmp_path, run_script):
    """A run's folder without its final model names its newest complete checkpoint; a cut-short weight file is named
    before anything loads; `make plot` reads the newest complete checkpoint's state."""
    from drgrpo.core.errors import RecipeError
    from drgrpo.core.models import resolve_model
    from drgrpo.observe.plotting import find_trainer_state

    run = copy_run(two_step_run, tmp_path)
    for name in ("model.safetensors", "config.json", "trainer_state.json"):
        (run / name).unlink()
    cut_in_half(run / "checkpoint-2" / "optimizer.pt")
    with pytest.raises(RecipeError, match="without a final model: evaluate or start from its newest complete "):
        resolve_model(str(run))
    with pytest.raises(RecipeError) as info:
        resolve_model(str(run))
    assert str(info.value).endswith(f"checkpoint, {run / 'checkpoint-1'}.")
    assert find_trainer_state(run) == run / "checkpoint-1" / "trainer_state.json"

    cut_in_half(run / "checkpoint-1" / "model.safetensors")
    with pytest.raises(RecipeError, match="model.safetensors is cut short.*so the model cannot load"):
        resolve_model(str(run / "checkpoint-1"))


# -- a full disk --------------------------------------------------------------------------------------------------


def test_a_full_disk_during_a_save_is_one_line_and_leaves_no_checkpoint_behind(
    tiny_model_path, addition_data, tmp_path
):
    """output_dir on a 6 MB tmpfs (its own mount namespace): checkpoint-1 (3.7 MB) fits, checkpoint-2 does not."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"]).returncode != 0:
        skip_unless_required("namespaces", "no user and mount namespaces here (unshare -rm) for a tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    args = " ".join(tiny_args(tiny_model_path, addition_data["train"], disk / "run", "--max_steps", "3"))
    script = (
        f"mount -t tmpfs -o size=6m tmpfs {disk} && {PYTHON} scripts/train.py {args}; echo status=$?; "
        f"ls -a {disk / 'run'}"
    )
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert "status=2" in result.stdout, result.stderr[-3000:]
    [line] = error_lines(result.stderr)
    assert line.startswith(f"error: output_dir {str(disk / 'run')!r}: the disk is full (")
    assert "free) while saving checkpoint-2; it takes about 3." in line
    assert "checkpoint-1 stays the newest complete checkpoint" in line and "rerun the same command" in line
    listed = result.stdout.split()
    assert "checkpoint-1" in listed and "checkpoint-2" not in listed and STAGING_FOLDER not in listed


def test_a_simulated_full_disk_during_a_save(tiny_model_path, addition_data, tmp_path, run_script, monkeypatch):
    """Where no tmpfs can be mounted: ENOSPC from the optimizer's file at the second save (monkeypatched)."""
    from transformers import Trainer

    original = Trainer._save_optimizer_and_scheduler
    saves = []

    def full_at_the_second_save(self, output_dir):
        saves.append(output_dir)
        if len(saves) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(Path(output_dir) / "optimizer.pt"))
        return original(self, output_dir)

    monkeypatch.setattr(Trainer, "_save_optimizer_and_scheduler", full_at_the_second_save)
    run = tmp_path / "run"
    result = run_script("scripts/train.py", *tiny_args(tiny_model_path, addition_data["train"], run))
    assert result.returncode == 2
    [line] = error_lines(result.stderr)
    assert line.startswith(f"error: output_dir {str(run)!r}: the disk is full (")
    assert "while saving checkpoint-2" in line and "checkpoint-1 stays the newest complete checkpoint" in line
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-1"]
    assert not (run / STAGING_FOLDER).exists() and not (run / "model.safetensors").exists()


# -- one run per output_dir ---------------------------------------------------------------------------------------


def test_a_second_run_into_the_same_output_dir_stops_naming_the_first(
    tiny_model_path, addition_data, tmp_path, run_script
):
    run = tmp_path / "run"
    args = tiny_args(tiny_model_path, addition_data["train"], run, "--max_steps", "10000", "--save_steps", "1000")
    first = subprocess.Popen([PYTHON, "scripts/train.py", *args], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (run / "log_history.jsonl").is_file():  # the first run holds the lock and is training
            assert first.poll() is None, first.stderr.read()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.1)
        logged = (run / "log_history.jsonl").read_text()
        second = run_script("scripts/train.py", *args)
        assert second.returncode == 2
        [line] = error_lines(second.stderr)
        assert line.startswith(f"error: output_dir {str(run)!r} is in use by another run (pid {first.pid} on host ")
        assert "--output_dir DIR" in line
        assert (run / "log_history.jsonl").read_text().startswith(logged)  # the second run wrote nothing there
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    finally:
        first.kill()
        first.wait()
    # The kernel released the killed run's lock: the next run starts at once (nothing to delete by hand).
    third = run_script("scripts/train.py", *tiny_args(tiny_model_path, addition_data["train"], run, "--max_steps", "1"))
    assert third.returncode == 0, third.stderr[-3000:]
    assert (run / LOCK_FILE).read_text().startswith(f"pid {os.getpid()} on host ")


# -- the data a run resumes on ------------------------------------------------------------------------------------


def test_a_resume_on_changed_data_stops_naming_the_file(tiny_model_path, addition_data, tmp_path, run_script):
    data = tmp_path / "train.jsonl"
    shutil.copy(addition_data["train"], data)
    run = tmp_path / "run"
    first = run_script("scripts/train.py", *tiny_args(tiny_model_path, data, run, "--max_steps", "1"))
    assert first.returncode == 0, first.stderr[-3000:]
    recorded = json.loads((run / RUN_RECORD).read_text())["data"]
    assert recorded["sources"] == [f"dataset_path {data}"] and len(recorded["fingerprint"]) == 16

    rows = data.read_text().splitlines()
    data.write_text("\n".join([rows[1], rows[0], *rows[2:]]) + "\n")  # the same rows, two swapped: other data
    resumed = run_script("scripts/train.py", *tiny_args(tiny_model_path, data, run))
    assert resumed.returncode == 2
    [line] = error_lines(resumed.stderr)
    assert line.startswith(
        f"error: output_dir {str(run)!r} holds a run that started on other training data: dataset_path {data} now "
        "gives "
    )
    assert "--allow_data_change true" in line and "--output_dir DIR" in line
    assert not (run / "checkpoint-2").exists()

    allowed = run_script("scripts/train.py", *tiny_args(tiny_model_path, data, run, "--allow_data_change", "true"))
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert "allow_data_change: the run in" in allowed.stderr and "resumes on changed training data" in allowed.stderr
    assert f"Resuming from checkpoint {run / 'checkpoint-1'} (step 1)" in allowed.stderr
    assert json.loads((run / RUN_RECORD).read_text())["data"]["fingerprint"] != recorded["fingerprint"]


# -- no run saves a non-finite model ------------------------------------------------------------------------------

HUGE_REWARD = "tests/fixtures/huge_reward.py:huge_reward"


def test_a_non_finite_step_stops_before_it_is_saved(tiny_model_path, addition_data, tmp_path, run_script):
    """Step 1 is finite and saved; at step 2 the reward turns huge (an environment switch, so the settings are the
    run's own), grad_norm goes infinite: the run stops in one line, checkpoint-1 stays the newest, nothing of step 2
    is saved, and step 2's metrics are in log_history.jsonl."""
    run = tmp_path / "run"
    args = tiny_args(tiny_model_path, addition_data["train"], run, "--reward_funcs", HUGE_REWARD)
    first = run_script("scripts/train.py", *args, "--max_steps", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_script("scripts/train.py", *args, env={"HUGE_REWARD": "1"})
    assert second.returncode == 2
    [line] = error_lines(second.stderr)
    assert line.startswith("error: step 2: grad_norm inf (TRL's metrics): its update puts NaN or infinite values")
    assert f"checkpoint-1 stays the newest complete checkpoint in {run}" in line
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-1"]
    assert not (run / STAGING_FOLDER).exists()
    rows = [json.loads(line) for line in (run / "log_history.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 2 and rows[-1]["grad_norm"] == float("inf")
