"""No silent overwrites: a run refuses an output_dir that holds another configuration's model, resumes its own, and
`make train` after the demo leaves the demo's model byte-identical."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import PYTHON, ROOT

from drgrpo.core.errors import RecipeError
from drgrpo.run.output_guard import RUN_RECORD, check_output_dir, differing_keys, run_settings, start_run

SETTINGS = {"learning_rate": 0.0003, "max_steps": 200, "loss_type": "dr_grpo"}


def finished_model(output_dir: Path, settings: dict | None) -> Path:
    """A folder as `train` leaves it: weights, config and (unless `settings` is None) the run record."""
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "model.safetensors").write_bytes(b"weights")
    (output_dir / "config.json").write_text("{}")
    if settings is not None:
        start_run(output_dir, settings, run_name="tiny-drgrpo", overwrite=False)
    return output_dir


def test_empty_or_missing_or_log_only_dirs_are_free(tmp_path):
    check_output_dir(tmp_path / "missing", SETTINGS)
    check_output_dir(tmp_path, SETTINGS)
    (tmp_path / "runs").mkdir()
    (tmp_path / "trainer_state.json").write_text("{}")
    check_output_dir(tmp_path, SETTINGS)  # logs only: nothing a run could lose


def test_same_settings_may_repeat_a_finished_run(tmp_path):
    check_output_dir(finished_model(tmp_path, SETTINGS), dict(SETTINGS))


def test_other_settings_are_refused_naming_the_keys_and_the_fix(tmp_path):
    finished_model(tmp_path, SETTINGS)
    with pytest.raises(RecipeError) as info:
        check_output_dir(tmp_path, {**SETTINGS, "learning_rate": 0.001, "loss_type": "dapo"})
    message = str(info.value)
    assert "learning_rate 0.0003 -> 0.001" in message and 'loss_type "dr_grpo" -> "dapo"' in message
    assert "run 'tiny-drgrpo'" in message and "--overwrite_output_dir true" in message and "--output_dir" in message
    assert "\n" not in message


def test_a_model_without_a_record_is_refused(tmp_path):
    finished_model(tmp_path, None)
    with pytest.raises(RecipeError, match=f"model .model.safetensors, config.json. that no run .*{RUN_RECORD}"):
        check_output_dir(tmp_path, SETTINGS)
    check_output_dir(tmp_path, SETTINGS, overwrite=True)


def test_run_length_may_grow_only_when_resuming_from_a_checkpoint(tmp_path):
    finished_model(tmp_path, SETTINGS)
    longer = {**SETTINGS, "max_steps": 400}
    with pytest.raises(RecipeError, match="max_steps 200 -> 400"):
        check_output_dir(tmp_path, longer)  # retraining the finished model from scratch with another length
    (tmp_path / "checkpoint-200").mkdir()
    check_output_dir(tmp_path, longer)  # continuing the run from its checkpoint
    with pytest.raises(RecipeError, match="1 checkpoint|model"):
        check_output_dir(tmp_path, {**longer, "learning_rate": 1.0})


def test_overwrite_deletes_the_old_runs_checkpoints_and_rewrites_the_record(tmp_path):
    finished_model(tmp_path, SETTINGS)
    for step in (50, 100):
        (tmp_path / f"checkpoint-{step}").mkdir()
    other = {**SETTINGS, "learning_rate": 1.0}
    start_run(tmp_path, other, run_name="new", overwrite=True)
    assert not list(tmp_path.glob("checkpoint-*"))
    record = json.loads((tmp_path / RUN_RECORD).read_text())
    assert record == {"run_name": "new", "settings": other}
    check_output_dir(tmp_path, other)


@dataclass
class _Args:
    learning_rate: float = 1e-3
    output_dir: str = "a"
    logging_steps: int = 5
    save_steps: int = 10
    vllm_server_host: str = "node7"
    reward_funcs: tuple = ("accuracy",)


def test_run_settings_drop_bookkeeping_keys_and_are_json():
    settings = run_settings(_Args())
    assert settings == {"learning_rate": 1e-3, "reward_funcs": ["accuracy"]}
    assert run_settings(_Args(output_dir="b", logging_steps=1, vllm_server_host="node9")) == settings
    assert differing_keys(settings, {"learning_rate": 1e-3}, frozenset()) == ["reward_funcs"]


# --- end to end: the demo's model survives `make train` -----------------------------------------------------------
def tree_digest(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def make_train(workspace: Path, args: str) -> subprocess.CompletedProcess:
    """`make train ARGS=...` in `workspace` with this interpreter; `-o` keeps make from reinstalling the venv."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = ["make", "-s", "-o", ".venv/.installed-dev", "train", f"PY={PYTHON}", f"ARGS={args}"]
    return subprocess.run(command, cwd=workspace, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_make_train_after_the_demo_leaves_the_demo_model_byte_identical(tmp_path, monkeypatch):
    from drgrpo.experiments.demo import DemoSettings, run_demo

    workspace = tmp_path / "clone"
    workspace.mkdir()
    shutil.copy(ROOT / "Makefile", workspace)
    shutil.copytree(ROOT / "recipes", workspace / "recipes")
    (workspace / "scripts").symlink_to(ROOT / "scripts")
    monkeypatch.chdir(workspace)
    small = ("--max_steps", "1", "--per_device_train_batch_size", "8", "--num_generations", "4")
    # The tiny demo's code path (SFT warm-start, RL with recipes/tiny_drgrpo.yaml into outputs/demo-tiny/model), shrunk.
    run_demo(DemoSettings(sft_steps=2, sft_examples=32, num_test=8, rl_overrides=small))
    demo_model = workspace / "outputs/demo-tiny/model"
    # Its evaluations decode in the precision it trained and generated in (tiny_drgrpo.yaml: bf16 false), as the
    # start-up line says, also on a CPU with native bf16 (where `auto` would be bf16).
    for stage in ("untrained", "before_rl", "after_rl"):
        assert json.loads((workspace / "outputs/demo-tiny/eval" / stage / "eval_config.json").read_text())["dtype"] == (
            "float32"
        )
    before = tree_digest(demo_model)
    assert "model.safetensors" in before and RUN_RECORD in before

    result = make_train(workspace, " ".join(small))
    assert result.returncode == 0, result.stderr[-3000:]
    assert tree_digest(demo_model) == before
    assert (workspace / "outputs/tiny-drgrpo/model.safetensors").is_file()  # the recipe's own output_dir

    # Pointed at the demo's model with other settings (here a longer run), training refuses in one line.
    refused = make_train(workspace, "--max_steps 2 --per_device_train_batch_size 8 --num_generations 4 "
                         "--output_dir outputs/demo-tiny/model")  # fmt: skip
    assert refused.returncode != 0
    error_lines = [line for line in refused.stderr.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1 and "--overwrite_output_dir true" in error_lines[0], refused.stderr[-3000:]
    assert "max_steps 1 -> 2" in error_lines[0] and "Traceback" not in refused.stderr
    assert tree_digest(demo_model) == before
