"""scripts/gpu_smoke.sh: its checks (loss, engaged bf16/ZeRO-3, GPU pins, driver), its GPU mode on a CPU machine with
two fake GPUs (it pins one, then names why torch cannot use them), and (slow) its whole CPU mode.

The GPU run itself has not run here (no GPU). What only a GPU shows is listed in docs/install.md.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, skip_unless_required

from drgrpo.setup.gpu_probe import driver_problem, gpu_pins
from drgrpo.setup.smoke import engaged_check, eval_throughput, loss_check, training_throughput

SCRIPT = ROOT / "scripts" / "gpu_smoke.sh"
VENV_BIN = str(Path(sys.executable).parent)


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


def test_loss_must_be_finite_and_change():
    final = {"train_runtime": 1.0, "train_loss": 0.0}
    assert loss_check([{"loss": 0.5}, {"loss": 0.25}, final]) == (True, "2 steps, loss 0.5 -> 0.25 (finite, changing)")
    ok, reason = loss_check([{"loss": 0.0}, {"loss": 0.0}, final])
    assert not ok and "loss 0.0 at all 2 steps" in reason
    ok, reason = loss_check([{"loss": 0.5}, {"loss": float("nan")}])
    assert not ok and "not finite at step(s) [2]" in reason
    assert not loss_check([{"loss": 0.5}, final])[0]  # one step cannot show a change


ENGAGED_ZERO3 = (
    "INFO drgrpo.run.training: engaged: mixed precision bf16, DeepSpeed ZeRO stage 3 (parameters partitioned), "
    "2 process(es), trained parameters bfloat16\n"
    "INFO drgrpo.run.training: engine: DeepSpeed ZeRO stage 3, bf16 True, optimizer DeepSpeedZeroOptimizer_Stage3\n"
)


def test_engaged_bf16_and_zero3_are_read_from_the_log():
    ok, reason = engaged_check(ENGAGED_ZERO3, bf16=True, zero3=True, processes=2)
    assert ok and "engine: DeepSpeed ZeRO stage 3, bf16 True" in reason
    ok, reason = engaged_check(ENGAGED_ZERO3, bf16=True, zero3=True, processes=1)
    assert not ok and reason.startswith("not 1 process(es)")
    unsharded = ENGAGED_ZERO3.replace(" (parameters partitioned)", "").replace("bf16 True", "bf16 False")
    ok, reason = engaged_check(unsharded, bf16=True, zero3=True, processes=2)
    assert not ok and "ZeRO-3 did not partition" in reason and "engine ran without bf16" in reason
    single = (
        "engaged: mixed precision no, no DeepSpeed, 1 process(es), trained parameters float32\n"
        "engine: Qwen3ForCausalLM (no DeepSpeed), mixed precision no\n"
    )
    assert engaged_check(single, bf16=False, zero3=False)[0]
    assert engaged_check(single, bf16=True, zero3=False) == (
        False,
        "bf16 did not engage (engaged: mixed precision no, no DeepSpeed, 1 process(es), trained parameters float32; "
        "engine: Qwen3ForCausalLM (no DeepSpeed), mixed precision no)",
    )
    assert not engaged_check("no such lines", bf16=False, zero3=False)[0]


def test_gpu_pins_one_gpu_per_one_process_step():
    pins = gpu_pins(None, 8)
    assert (pins.single, pins.pair) == ("0", "0,1")
    assert pins.reason == (
        "8 GPU(s) listed by nvidia-smi: one-process steps on CUDA_VISIBLE_DEVICES=0, the 2-process ZeRO-3 step on 0,1"
    )
    assert (gpu_pins("3,5,6", 8).single, gpu_pins("3,5,6", 8).pair) == ("3", "3,5")  # the user's choice, narrowed
    assert gpu_pins(None, 1).pair is None and "needs 2 GPUs" in gpu_pins(None, 1).reason
    assert gpu_pins("", 4).single == "0"  # an empty CUDA_VISIBLE_DEVICES is no choice
    assert gpu_pins(None, None).single == "" and "nvidia-smi not found" in gpu_pins(None, None).reason


def test_driver_too_old_for_cuda_13_is_named():
    assert driver_problem("13.0", "570.124.06") == (
        "torch is built for CUDA 13.0, which needs an NVIDIA driver of branch R580 or newer; this machine's driver is "
        "570.124.06: upgrade the driver (docs/install.md)"
    )
    assert driver_problem("13.0", "580.65.06") is None and driver_problem("12.8", "570.124.06") is None
    assert driver_problem(None, "570.1") is None and driver_problem("13.0", None) is None


FAKE_NVIDIA_SMI = """#!/bin/bash
# Two GPUs and an R575 driver, as nvidia-smi prints them.
case "$*" in
  -L) printf 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\\n' ;;
  *driver_version*) printf '575.51.03\\n575.51.03\\n' ;;
  *) exit 1 ;;
esac
"""


INSTALLERS = ("make", "pip", "pip3", "uv")


def smoke_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The smoke's environment: a bare PY (`python` found on PATH, the venv's, as `PY=python3 bash
    scripts/gpu_smoke.sh` would be), and first on PATH a `make`, `pip`, `pip3` and `uv` that record their call in
    tmp_path/installer_calls and fail (the smoke must never install; see installer_calls)."""
    env = {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}
    trap = tmp_path / "installers"
    trap.mkdir(exist_ok=True)
    for name in INSTALLERS:
        (trap / name).write_text(f'#!/bin/sh\necho "{name} $*" >>"{tmp_path}/installer_calls"\nexit 1\n')
        (trap / name).chmod(0o755)
    path = f"{trap}:{VENV_BIN}:{env['PATH']}"
    return {**env, "PATH": path, "PY": "python", "SMOKE_OUT": str(tmp_path / "smoke"), **extra}


def installer_calls(tmp_path: Path) -> str:
    calls = tmp_path / "installer_calls"
    return calls.read_text() if calls.exists() else ""


def test_gpu_mode_with_two_fake_gpus_pins_one_and_names_why_it_stops(tmp_path):
    """GPU mode here: nvidia-smi (fake) lists 2 GPUs, so one-process steps get CUDA_VISIBLE_DEVICES=0, and the probe
    (run with that pin) says torch is a CPU build; every later step is skipped with the reason; exit 1."""
    if torch.version.cuda is not None:
        skip_unless_required("cpu_torch", "this torch is a CUDA build: the probe would not stop at the CPU build")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = smoke_env(tmp_path)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    result = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert f"[PASS] python    {VENV_BIN}/python (Python" in out  # the bare name, made absolute
    assert (
        "[PASS] pin       2 GPU(s) listed by nvidia-smi: one-process steps on CUDA_VISIBLE_DEVICES=0, the 2-process "
        "ZeRO-3 step on 0,1"
    ) in out
    assert "[FAIL] probe     torch 2.13.0+cpu is a CPU build" in out and "[CUDA_VISIBLE_DEVICES=0]" in out
    for step in ("build", "train", "zero3", "reload", "zero3_x2", "vllm", "eval"):
        assert f"[SKIP] {step:<9} needs a usable GPU (see probe)" in out
    assert "gpu_smoke (gpu): 2 passed, 1 failed, 7 skipped in" in out
    assert not (tmp_path / "smoke").exists()  # stopped before writing anything
    assert installer_calls(tmp_path) == ""


def test_bad_settings_are_reported_not_crashed(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    missing = subprocess.run(
        ["bash", str(SCRIPT)], cwd=ROOT, env=smoke_env(tmp_path, PY="no-such-python"), capture_output=True, text=True
    )
    assert (
        missing.returncode == 1 and "[FAIL] python    PY=no-such-python is not an executable Python" in missing.stdout
    )
    device = subprocess.run(
        ["bash", str(SCRIPT)], cwd=ROOT, env=smoke_env(tmp_path, SMOKE_DEVICE="tpu"), capture_output=True, text=True
    )
    assert device.returncode == 1 and "SMOKE_DEVICE must be gpu or cpu, not 'tpu'" in device.stdout


# A command that installs: make (its targets depend on `install`), pip, uv; at a command's start or after `-m`.
INSTALL_CALL = re.compile(r"(^|[;&|({]|\$\(|\b(then|do|else)\b)\s*(make|pip3?|uv)\b|-m\s+pip\b")


def install_calls(script: str) -> list[str]:
    """The lines of a bash script that call an installer, quoted strings and comments left out (the messages that
    tell the user to run `make install` are strings)."""
    found = []
    for number, line in enumerate(script.splitlines(), 1):
        code = re.sub(r"(^|\s)#.*", "", re.sub(r'"[^"]*"', '""', line))
        if INSTALL_CALL.search(code):
            found.append(f"{number}: {line.strip()}")
    return found


def test_the_smoke_never_installs():
    """No make target (its `make eval` step reinstalled when the install stamp differed) and no pip."""
    assert install_calls(SCRIPT.read_text()) == []
    sample = 'x\n  make eval MODEL=m\nreport a "make install"  # make\nif "$PY" -m pip install y; then make; fi\n'
    assert install_calls(sample) == ["2: make eval MODEL=m", '4: if "$PY" -m pip install y; then make; fi']


def network_can_be_cut() -> bool:
    """`unshare -n` (root or user namespaces) with `ip` to bring the new namespace's loopback up: accelerate's
    rendezvous uses 127.0.0.1, which an air-gapped node has, but a fresh network namespace has down."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    return subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_cpu_mode_passes_and_skips_every_gpu_only_step_with_its_reason(tmp_path):
    """Every step that runs on CPU passes (loss finite and changing, ZeRO-3 engaged, the ZeRO-3-saved untied model
    reloads and generates, the evaluation); the GPU-only ones are skipped, each with its reason. PY is a bare name.
    Where the network can be cut (`unshare -n`, loopback only), it runs there: no hub, no PyPI, as on a bare node."""
    env = smoke_env(tmp_path, SMOKE_DEVICE="cpu", SMOKE_STEPS="2", OMP_NUM_THREADS="1")
    command = ["bash", str(SCRIPT)]
    if network_can_be_cut():
        probe = "import socket; socket.create_connection(('pypi.org', 443), timeout=5)"
        cut = (
            "ip link set lo up || exit 3\n"
            f'if "{sys.executable}" -c "{probe}" 2>/dev/null; then echo "the network is not cut" >&2; exit 3; fi\n'
            'exec "$@"\n'
        )
        command = ["unshare", "-n", "sh", "-c", cut, "sh", *command]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    out = result.stdout
    assert result.returncode == 0, out[-4000:] + result.stderr[-2000:]
    assert "[SKIP] pin       GPU-only: CPU mode uses no GPU" in out
    assert "[PASS] train     2 steps, loss" in out and "(finite, changing)" in out
    assert "[PASS] zero3" in out and "DeepSpeed ZeRO stage 3 (parameters partitioned)" in out
    assert "engine: DeepSpeed ZeRO stage 3, bf16 False, optimizer DeepSpeedZeroOptimizer_Stage3" in out
    assert "[PASS] reload" in out and "(an lm_head of its own)" in out and "generated 8 tokens on cpu" in out
    assert "[SKIP] zero3_x2  GPU-only: ZeRO-3 across 2 GPUs over NCCL" in out
    assert "[SKIP] vllm      GPU-only: vLLM generates on CUDA GPUs" in out
    assert "[PASS] eval      64 samples" in out
    assert "gpu_smoke (cpu): 7 passed, 0 failed, 3 skipped in" in out
    assert (tmp_path / "smoke" / "zero3" / "model.safetensors").is_file()
    assert installer_calls(tmp_path) == ""  # no make, pip or uv on PATH was called
