"""The README's GPU launch on a machine without GPUs: one line from the first rank, no torchrun report, a failed
status; `make train` checks the accelerate config before it launches (drgrpo/setup/gpu_launch.py)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from drgrpo.setup.gpu_launch import (
    check_accelerate_config,
    check_launched_worker,
    no_gpu_reason,
    recipe_trains_on_cpu,
)

ACCELERATE = Path(sys.executable).with_name("accelerate")
README_LAUNCH = (
    "accelerate launch --config_file accelerate_configs/zero3.yaml scripts/train.py recipes/qwen3_8b_drgrpo.yaml"
)
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # no GPU for torch, whatever the machine has


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_readme_gpu_launch_without_gpus_is_one_line_and_fails():
    """The command as the README types it (plus a free port: test sessions may share a machine); before the fix, 8
    copies of one error, then torchrun's ChildFailedError traceback and report (~110 lines)."""
    assert README_LAUNCH in (ROOT / "README.md").read_text()
    words = README_LAUNCH.split()
    command = [str(ACCELERATE), words[1], "--main_process_port", str(free_port()), *words[2:]]
    env = {**os.environ, **NO_GPU, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    lines = [line for line in output.splitlines() if line.strip()]
    assert result.returncode != 0, output
    assert "Traceback" not in output and "ChildFailedError" not in output and "closing signal" not in output, output
    assert len(lines) <= 3, output  # DeepSpeed's import warning (accelerate's), the error, torchrun's "Received"
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, output  # rank 0 only
    assert "recipes/qwen3_8b_drgrpo.yaml on 8 GPUs" in errors[0] and "CUDA_VISIBLE_DEVICES=''" in errors[0]
    assert "--config_file accelerate_configs/zero3_cpu.yaml scripts/train.py recipes/tiny_drgrpo.yaml" in errors[0]


def test_make_train_checks_a_gpu_config_before_it_launches():
    train = re.search(r"^train: .*?\n\n", (ROOT / "Makefile").read_text(), re.S | re.M).group(0)
    check, launch = train.index("-m drgrpo.setup.gpu_launch $(ACCELERATE_CONFIG)"), train.index("accelerate launch")
    assert check < launch
    result = subprocess.run(
        [sys.executable, "-m", "drgrpo.setup.gpu_launch", "accelerate_configs/zero3.yaml"],
        cwd=ROOT,
        env={**os.environ, **NO_GPU},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stdout == "", result
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: accelerate_configs/zero3.yaml runs 8")
    assert "make train ACCELERATE_CONFIG=accelerate_configs/zero3_cpu.yaml RECIPE=recipes/tiny_drgrpo.yaml" in (
        result.stderr
    )


def test_the_cpu_config_passes_the_check(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert check_accelerate_config("accelerate_configs/zero3_cpu.yaml") is None
    assert "runs 4 processes on GPUs" in check_accelerate_config("accelerate_configs/zero3_offload.yaml")
    assert "no such file" in check_accelerate_config("accelerate_configs/zero9.yaml")


@pytest.mark.parametrize("visible", ["", "-1", " "])
def test_hidden_gpus_need_no_torch(visible):
    assert no_gpu_reason({"CUDA_VISIBLE_DEVICES": visible}) == f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"


@pytest.mark.parametrize(
    "argv, on_cpu",
    [
        (["recipes/tiny_drgrpo.yaml"], True),
        (["recipes/qwen3_8b_drgrpo.yaml"], False),
        (["recipes/qwen3_8b_drgrpo.yaml", "--use_cpu", "true"], True),
        (["recipes/qwen3_8b_drgrpo.yaml", "--use_cpu"], True),
        (["--config", "recipes/tiny_drgrpo.yaml", "--use_cpu=False"], False),
        (["recipes/no_such_recipe.yaml"], None),
        (["--help"], None),
    ],
)
def test_recipe_trains_on_cpu(argv, on_cpu, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert recipe_trains_on_cpu(argv) is on_cpu


class Ended(Exception):
    """Raised in place of `end_worker`, which would end the test process."""


@pytest.fixture
def ended(monkeypatch):
    monkeypatch.chdir(ROOT)

    def end_worker(environ):
        raise Ended(environ["RANK"])

    monkeypatch.setattr("drgrpo.setup.gpu_launch.end_worker", end_worker)


def worker(rank: int) -> dict[str, str]:
    return {**NO_GPU, "TORCHELASTIC_RUN_ID": "1", "LOCAL_RANK": str(rank), "RANK": str(rank), "WORLD_SIZE": "8"}


@pytest.mark.parametrize(
    "argv, environ",
    [
        (["recipes/qwen3_8b_drgrpo.yaml"], NO_GPU),  # no launcher: scripts/train.py's own checks speak
        (["recipes/qwen3_8b_drgrpo.yaml"], {**worker(0), "ACCELERATE_USE_CPU": "True"}),
        (["recipes/tiny_drgrpo.yaml"], worker(0)),  # a CPU recipe under torchrun: accelerate_configs/zero3_cpu.yaml
        (["recipes/qwen3_8b_drgrpo.yaml", "--use_cpu", "true"], worker(0)),
    ],
)
def test_the_check_passes_outside_a_gpu_launch(argv, environ, ended, capsys):
    check_launched_worker(argv, environ)
    assert capsys.readouterr() == ("", "")


def test_rank_0_alone_prints_the_error(ended, capsys):
    with pytest.raises(Ended):
        check_launched_worker(["recipes/qwen3_8b_drgrpo.yaml"], worker(1))
    assert capsys.readouterr() == ("", "")
    with pytest.raises(Ended):
        check_launched_worker(["recipes/qwen3_8b_drgrpo.yaml"], worker(0))
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("error: this launch trains recipes/qwen3_8b_drgrpo.yaml on 8 GPUs")


def test_the_bare_mission_line_without_gpus_ends_in_one_line(tmp_path):
    """Issue 54, item 6: `accelerate launch scripts/train.py recipes/qwen3_8b_drgrpo.yaml`, no --config_file and no
    accelerate config on the machine (HF_HOME is empty here): accelerate's simple launcher, one process. It printed
    the error, the same error again inside a RuntimeError, then accelerate's 27-line CalledProcessError traceback;
    now the line that names the CPU setup is the last thing printed (after accelerate's own note on its defaults)."""
    command = [str(ACCELERATE), "launch", "scripts/train.py", "recipes/qwen3_8b_drgrpo.yaml"]
    env = {**os.environ, **NO_GPU, "OMP_NUM_THREADS": "1", "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    for noise in ("Traceback", "RuntimeError", "CalledProcessError"):
        assert noise not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert errors == [lines[-1]], output  # one error line, and nothing after it
    assert errors[0].startswith(
        "error: accelerate launch without --config_file runs recipes/qwen3_8b_drgrpo.yaml as one process on a GPU, and "
        "this machine has none (CUDA_VISIBLE_DEVICES='' hides every GPU)."
    )
    assert "--config_file accelerate_configs/zero3_cpu.yaml scripts/train.py recipes/tiny_drgrpo.yaml" in errors[0]


def test_use_vllm_without_a_gpu_is_one_line_naming_generation_engine(
    tiny_model_path, addition_data, tmp_path, run_script
):
    """Issue 54, item 6: `use_vllm: true` on a CPU run was not refused: with a CPU build of vLLM the run died at TRL's
    first weight sync (`'Parameter' object has no attribute 'weight_loader'`), without one at TRL's import check."""
    result = run_script(
        "scripts/train.py", "recipes/tiny_drgrpo.yaml", "--model_name_or_path", str(tiny_model_path),
        "--dataset_path", str(addition_data["train"]), "--output_dir", str(tmp_path / "run"), "--use_vllm", "true",
        "--max_steps", "1", "--per_device_train_batch_size", "8", "--num_generations", "4",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: use_vllm: true needs a GPU (vLLM generates on it and TRL syncs the trained weights into it), and "
        "use_cpu is set. On a CPU: --use_vllm false, and generation_engine: auto generates with the project's CPU "
        "engine (or generation_engine: trl, TRL's transformers generate)."
    ], result.stderr[-3000:]
    assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()
