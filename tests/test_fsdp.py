"""FSDP on CPU (gloo, one process) through `train()`: the final model is saved (issue 30, item 4).

`restore_dtype` used to put the float32 master weights back by their recorded names after training, when the model
is the FSDP wrapper: FSDP1 renames its parameters (`KeyError`, no final model), FSDP2 keeps the names but the save
gathers float32 shards anyway, so the log said bf16 for a float32 file. Under FSDP nothing is put back now; the final
model is saved in float32, and the log says so (and that the reference, which TRL wrapped first, stays bf16). The run
goes through `tests/fsdp_cpu_probe.py`, which lets accelerate's FSDP plugin run on a CPU machine (FSDP2: FSDP1
cannot compute on CPU).
"""

from __future__ import annotations

import os
import socket
import subprocess

import pytest
import torch
from conftest import PYTHON, ROOT
from safetensors import safe_open

pytestmark = pytest.mark.slow


def test_fsdp_run_on_cpu_saves_its_final_model(tiny_model_path, addition_data, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ, "HF_HUB_OFFLINE": "1", "WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "ACCELERATE_USE_CPU": "true",
        "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_AUTO_WRAP_POLICY": "NO_WRAP",
        "FSDP_RESHARD_AFTER_FORWARD": "true", "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT", "PYTHONPATH": str(ROOT),
    }  # fmt: skip
    output_dir = tmp_path / "run"
    command = [
        PYTHON, "tests/fsdp_cpu_probe.py", "recipes/tiny_grpo.yaml", "--model_name_or_path", str(tiny_model_path),
        "--dtype", "bfloat16", "--beta", "0.04", "--dataset_path", str(addition_data["train"]),
        "--output_dir", str(output_dir),
        "--max_steps", "1", "--per_device_train_batch_size", "8", "--num_generations", "4", "--save_strategy", "no",
    ]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "engine: FSDP" in result.stderr, "the run did not train under FSDP"
    # bf16 weights, no mixed precision: the float32 masters are ours, and there is no bf16 copy to put back.
    assert "the final model is saved in float32 (FSDP" in result.stderr
    # TRL wrapped the reference (beta > 0) before the cast: it stays bf16, and the run says what that costs.
    assert "the reference model stays bfloat16" in result.stderr
    with safe_open(str(output_dir / "model.safetensors"), "pt") as file:
        dtypes = {file.get_tensor(name).dtype for name in file.keys()}  # noqa: SIM118
    assert dtypes == {torch.float32}, "the final model is not what the log says"
    assert (output_dir / "trainer_state.json").is_file()
