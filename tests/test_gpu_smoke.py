"""scripts/gpu_smoke.sh: its throughput arithmetic, its device check, and (slow) its whole CPU run.

The GPU run itself has not run here (no GPU); its CPU mode goes through the same steps: train.py, a 1-process
ZeRO-3 `accelerate launch`, `make eval` with the transformers backend, and the throughput report.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import torch
from conftest import PYTHON, ROOT

from drgrpo.setup.smoke import eval_throughput, training_throughput

SCRIPT = ROOT / "scripts" / "gpu_smoke.sh"


def test_training_throughput_hand_computed():
    history = [
        {"step": 1, "completions/mean_length": 3.0, "loss": 0.1},
        {"step": 2, "completions/mean_length": 4.0, "loss": 0.2},
        {"train_runtime": 2.0, "train_steps_per_second": 1.0, "step": 2},
    ]
    numbers = training_throughput(history, completions_per_step=64)
    # (3 + 4) tokens on average x 64 completions = 448 tokens over 2 s; 2 steps over 2 s.
    assert numbers == {
        "steps": 2.0,
        "seconds": 2.0,
        "steps_per_second": 1.0,
        "generated_tokens": 448.0,
        "generated_tokens_per_second": 224.0,
    }
    with pytest.raises(ValueError, match="did not finish"):
        training_throughput(history[:2], 64)


def test_eval_throughput_hand_computed():
    numbers = eval_throughput([{"num_tokens": 4}, {"num_tokens": 2}], seconds=0.5)
    assert numbers == {"samples": 2.0, "seconds": 0.5, "generated_tokens": 6.0, "generated_tokens_per_second": 12.0}


def test_script_is_valid_bash_and_refuses_without_a_gpu(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    env = {**os.environ, "PY": PYTHON, "SMOKE_OUT": str(tmp_path / "smoke")}
    result = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "no CUDA GPU with bf16 visible" in result.stderr
    assert not (tmp_path / "smoke").exists()  # refused before writing anything
    bad = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env={**env, "SMOKE_DEVICE": "tpu"}, capture_output=True)
    assert bad.returncode == 1 and b"SMOKE_DEVICE must be gpu or cpu" in bad.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_cpu_mode_runs_every_step_and_reports_throughput(tmp_path):
    env = {
        **os.environ,
        "SMOKE_DEVICE": "cpu",
        "SMOKE_STEPS": "1",
        "SMOKE_OUT": str(tmp_path / "smoke"),
        "PY": PYTHON,
        "SMOKE_MAKE": "make -o .venv/.installed-dev",  # never reinstall the venv from a test
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert any(line.startswith("train: ") and "steps/s (1 steps)" in line for line in lines), result.stdout
    assert any(line.startswith("zero3: ") and "steps/s (1 steps)" in line for line in lines)
    assert any(line.startswith("make eval (transformers backend") and "64 samples" in line for line in lines)
    assert "gpu_smoke (cpu): OK in" in result.stdout
    assert (tmp_path / "smoke" / "zero3" / "model.safetensors").is_file()  # the ZeRO-3 run saved a whole model
