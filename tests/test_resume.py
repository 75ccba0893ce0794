"""Resume after a kill: the newest complete checkpoint is found, a half-written one is skipped, and a SIGKILLed tiny
run finishes on rerun with its step count, LR schedule and optimizer state continuing."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from conftest import PYTHON, ROOT, write_complete_checkpoint

from drgrpo.core.checkpoints import checkpoint_step, find_resumable_checkpoint, incomplete_reason

write_checkpoint = write_complete_checkpoint


def cut_in_half(path: Path) -> None:
    """What a power loss or a full disk leaves: the file's first half."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_checkpoint_step_parses_only_checkpoint_folders():
    assert checkpoint_step("out/checkpoint-120") == 120
    assert checkpoint_step("checkpoint-best") is None and checkpoint_step("runs") is None


def test_newest_by_step_number_not_by_name(tmp_path):
    for step in (9, 10, 2):
        write_checkpoint(tmp_path, step)
    (tmp_path / "runs").mkdir()
    assert find_resumable_checkpoint(tmp_path) == tmp_path / "checkpoint-10"  # "checkpoint-9" sorts after as text
    assert find_resumable_checkpoint(tmp_path / "missing") is None
    assert find_resumable_checkpoint(tmp_path / "runs") is None


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        ({"skip": ("trainer_state.json",)}, "trainer_state.json is missing"),
        ({"state": '{"global_step": 6, "log_hist'}, "not valid JSON"),
        ({"state": '{"global_step": 4}'}, "global_step=4, not the folder's step 6"),
        ({"skip": ("model.safetensors",)}, "no model weights"),
        ({"skip": ("optimizer.pt",)}, "optimizer.pt is missing"),
        ({"skip": ("scheduler.pt",)}, "scheduler.pt is missing"),
        ({"cut": "optimizer.pt"}, "optimizer.pt is not a whole torch archive"),
        ({"cut": "model.safetensors"}, "model.safetensors is cut short"),
        ({"cut": "rng_state.pth"}, "rng_state.pth is not a whole torch archive"),
        ({"cut": "scheduler.pt"}, "scheduler.pt is not a whole torch archive"),
    ],
)
def test_half_written_checkpoint_is_skipped_with_a_warning(tmp_path, caplog, kwargs, reason):
    write_checkpoint(tmp_path, 3)
    cut = kwargs.pop("cut", None)
    broken = write_checkpoint(tmp_path, 6, **kwargs)
    if cut is not None:
        cut_in_half(broken / cut)
    assert reason in incomplete_reason(broken)
    with caplog.at_level(logging.WARNING, logger="drgrpo.core.checkpoints"):
        assert find_resumable_checkpoint(tmp_path) == tmp_path / "checkpoint-3"
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "checkpoint-6" in message and reason in message


def test_sharded_weights_need_every_shard_and_deepspeed_state_counts_as_weights(tmp_path):
    sharded = write_checkpoint(tmp_path, 2, skip=("model.safetensors",))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    write_checkpoint(tmp_path / "shard", 1)
    shutil.copy(tmp_path / "shard" / "checkpoint-1" / "model.safetensors", sharded / "model-00001-of-00002.safetensors")
    assert "model-00002-of-00002.safetensors" in incomplete_reason(sharded)
    shutil.copy(sharded / "model-00001-of-00002.safetensors", sharded / "model-00002-of-00002.safetensors")
    assert incomplete_reason(sharded) is None
    cut_in_half(sharded / "model-00002-of-00002.safetensors")
    assert "model-00002-of-00002.safetensors is cut short" in incomplete_reason(sharded)
    shutil.copy(sharded / "model-00001-of-00002.safetensors", sharded / "model-00002-of-00002.safetensors")

    # ZeRO-3 without gathered 16-bit weights: no model file, the state lives in global_stepN (named by `latest`).
    zero = write_checkpoint(tmp_path, 4, skip=("model.safetensors", "optimizer.pt", "scheduler.pt"))
    (zero / "latest").write_text("global_step4")
    (zero / "global_step4").mkdir()
    assert "DeepSpeed state folder global_step4 is empty" in incomplete_reason(zero)
    shard = zero / "global_step4" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    torch.save({"optimizer_state_dict": {}}, shard)
    assert incomplete_reason(zero) is None
    cut_in_half(shard)
    assert "global_step4/zero_pp_rank_0_mp_rank_00_optim_states.pt is not a whole torch archive" in (
        incomplete_reason(zero)
    )
    torch.save({"optimizer_state_dict": {}}, shard)
    assert find_resumable_checkpoint(tmp_path) == zero


# --- the real thing: SIGKILL a training run, rerun the same command ------------------------------------------------
MAX_STEPS, SAVE_STEPS, LEARNING_RATE = 8, 2, 1e-3


def train_command(model: Path, data: Path, output_dir: Path) -> list[str]:
    return [
        PYTHON, "scripts/train.py", "recipes/tiny_drgrpo.yaml",
        "--model_name_or_path", str(model), "--dataset_path", str(data), "--output_dir", str(output_dir),
        "--max_steps", str(MAX_STEPS), "--save_strategy", "steps", "--save_steps", str(SAVE_STEPS),
        "--logging_steps", "1", "--per_device_train_batch_size", "8", "--num_generations", "4",
        # A decaying schedule, so that a restarted scheduler would show as a jump back up in the logged LR.
        "--lr_scheduler_type", "linear", "--learning_rate", str(LEARNING_RATE), "--report_to", "none",
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--dynamic_sampling", "true"]], ids=["plain", "dynamic_sampling"])
def test_killed_run_resumes_where_it_stopped(tiny_model_path, addition_data, tmp_path, extra):
    output_dir = tmp_path / "run"
    command = train_command(tiny_model_path, addition_data["train"], output_dir) + extra
    log_path = tmp_path / "first.log"
    with open(log_path, "w") as log:
        first = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while find_resumable_checkpoint(output_dir) is None:
                assert first.poll() is None, f"run ended before its first checkpoint:\n{log_path.read_text()[-3000:]}"
                assert time.monotonic() < deadline, "no checkpoint within 300 s"
                time.sleep(0.05)
            first.send_signal(signal.SIGKILL)
        finally:
            first.kill()
            first.wait()
    assert first.returncode == -signal.SIGKILL
    resumed_from = find_resumable_checkpoint(output_dir)
    killed_at = checkpoint_step(resumed_from)
    assert killed_at < MAX_STEPS, "the run finished before it was killed; nothing was tested"

    # Simulate a save interrupted by the kill: a newer checkpoint folder without its trainer state and with a
    # truncated optimizer file. Its step is not a save step, so the resumed run leaves it as it is.
    half_written = output_dir / f"checkpoint-{killed_at + 1}"
    shutil.copytree(resumed_from, half_written)
    (half_written / "trainer_state.json").unlink()
    optimizer_bytes = (half_written / "optimizer.pt").read_bytes()
    (half_written / "optimizer.pt").write_bytes(optimizer_bytes[: len(optimizer_bytes) // 2])

    # The first run said at start-up that a stopped run resumes.
    policy = f"checkpoints every {SAVE_STEPS} steps in {output_dir}: a stopped run resumes from the newest complete one"
    assert f"Starting at step 0; {policy}" in log_path.read_text()

    second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"Skipping incomplete checkpoint {half_written}" in second.stderr
    assert f"Resuming from checkpoint {resumed_from} (step {killed_at}); {policy}" in second.stderr
    # The tiny model's lm_head is its input embeddings (tied): not reported missing, said in one line.
    assert "missing keys in the checkpoint" not in second.stderr
    assert "lm_head.weight: tied to model.embed_tokens.weight, which the checkpoint holds (not missing)." in (
        second.stderr
    )
    # log_history.jsonl, every key of every step, continues without repeats across the kill.
    rows = [json.loads(line) for line in (output_dir / "log_history.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "loss" in row] == list(range(1, MAX_STEPS + 1))
    if extra:
        # The refill stream continues from the position saved with the checkpoint (the random tiny model never
        # answers right, so every round drops every group and draws refill prompts).
        saved = json.loads((resumed_from / "dynamic_sampling.json").read_text())["consumed"]
        assert saved > 0
        assert f"dynamic_sampling: refill stream resumes after {saved} prompts" in second.stderr

    state = json.loads((output_dir / f"checkpoint-{MAX_STEPS}" / "trainer_state.json").read_text())
    assert state["global_step"] == MAX_STEPS
    step_logs = [entry for entry in state["log_history"] if "loss" in entry]
    # Logged steps continue without gaps or repeats across the kill.
    assert [entry["step"] for entry in step_logs] == list(range(1, MAX_STEPS + 1))
    # The linear schedule continues: the logged LR falls by the same amount every step, also across the kill (a
    # scheduler restarted at the resume would jump back up to the initial LR).
    rates = [entry["learning_rate"] for entry in step_logs]
    drops = [a - b for a, b in zip(rates, rates[1:], strict=False)]
    assert all(drop == pytest.approx(LEARNING_RATE / MAX_STEPS, rel=1e-6) for drop in drops), rates
    # The optimizer state continues: Adam's step count is the total, not the steps since the resume.
    optimizer = torch.load(output_dir / f"checkpoint-{MAX_STEPS}" / "optimizer.pt", weights_only=False)
    adam_steps = {int(param_state["step"]) for param_state in optimizer["state"].values()}
    assert adam_steps == {MAX_STEPS}
