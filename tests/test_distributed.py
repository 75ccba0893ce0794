"""DeepSpeed ZeRO-3 across 2 real processes (CPU, gloo): sharding, per-rank loss, group statistics, consolidated save.

One `accelerate launch --config_file accelerate_configs/zero3_cpu.yaml` run of `scripts/train.py` (through
`tests/rank_probe.py`, which records what each rank saw) is shared by the tests of this module.

The batch is chosen so that a group straddles the two ranks: 2 processes x 6 completions = 12 per generation round
= 3 prompts x 4 completions, so completions 4-7 (one prompt) sit half on rank 0 and half on rank 1. Its advantage is
only right if the rewards of both halves were gathered before the group mean was taken.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
ACCELERATE = Path(sys.executable).with_name("accelerate")
WORLD_SIZE = 2
PER_DEVICE_BATCH = 6
NUM_GENERATIONS = 4
MAX_STEPS = 3

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def zero3_run(tmp_path_factory, tiny_model_path, addition_data) -> dict:
    """Run 3 optimizer steps under ZeRO-3 with 2 processes; return the output dir and each rank's probe record."""
    work = tmp_path_factory.mktemp("zero3")
    env = {
        **os.environ,
        "RANK_PROBE_DIR": str(work / "probe"),
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(ROOT),
    }
    command = [
        str(ACCELERATE),
        "launch",
        "--config_file",
        "accelerate_configs/zero3_cpu.yaml",
        "--main_process_port",
        str(free_port()),  # test sessions may run side by side on one machine
        "tests/rank_probe.py",
        "recipes/tiny_drgrpo.yaml",
        "--model_name_or_path",
        str(tiny_model_path),
        "--dataset_path",
        str(addition_data["train"]),
        "--output_dir",
        str(work / "model"),
        "--max_steps",
        str(MAX_STEPS),
        "--per_device_train_batch_size",
        str(PER_DEVICE_BATCH),
        "--num_generations",
        str(NUM_GENERATIONS),
        "--gradient_accumulation_steps",
        "1",  # one micro-batch (one recorded loss) per optimizer step
        "--reward_funcs",
        "probe_digits",
        "--logging_steps",
        "1",
        # One checkpoint mid-run: every rank writes its ZeRO shards into the staging folder, the main one renames it.
        "--save_strategy",
        "steps",
        "--save_steps",
        "2",
    ]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"ZeRO-3 run failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    ranks = [json.loads((work / "probe" / f"rank{i}.json").read_text()) for i in range(WORLD_SIZE)]
    return {"output_dir": work / "model", "ranks": ranks, "output": result.stdout + result.stderr}


def test_config_is_zero3_with_two_cpu_processes():
    config = yaml.safe_load((ROOT / "accelerate_configs/zero3_cpu.yaml").read_text())
    assert config["distributed_type"] == "DEEPSPEED" and config["num_processes"] == WORLD_SIZE and config["use_cpu"]
    ds = json.loads((ROOT / config["deepspeed_config"]["deepspeed_config_file"]).read_text())
    assert ds["zero_optimization"]["stage"] == 3
    assert ds["zero_optimization"]["stage3_param_persistence_threshold"] == 0
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True


def test_both_ranks_ran_zero3(zero3_run):
    ranks = zero3_run["ranks"]
    assert [r["process_index"] for r in ranks] == [0, 1]
    assert all(r["num_processes"] == WORLD_SIZE and r["zero_stage"] == 3 for r in ranks)


def test_no_rank_builds_deepspeeds_shared_memory_operator(zero3_run):
    """DeepSpeed without a GPU JIT-compiles `deepspeed_shm_comm` (g++, ~100 s on 2 cores, per virtual environment),
    which only its inference all-reduce uses (drgrpo/core/deepspeed_cpu.py): it prints "... built successfully"."""
    assert "deepspeed_shm_comm" not in zero3_run["output"]


def test_every_parameter_is_split_in_half(zero3_run):
    """Each rank holds ceil(n / 2) elements of every tensor (DeepSpeed pads the last partition), never the whole."""
    for rank in zero3_run["ranks"]:
        for when in ("partition", "partition_after_step"):
            facts = rank[when]
            assert len(facts) > 10, "the tiny model has more than 10 parameter tensors"
            for name, fact in facts.items():
                assert fact["partitioned"], f"{name} is not a ZeRO-3 parameter on rank {rank['process_index']}"
                assert fact["local_partition"] == math.ceil(fact["ds_numel"] / WORLD_SIZE), (name, fact)
                assert fact["ds_numel"] == math.prod(fact["ds_shape"])
                # Released: outside a forward/backward pass no rank keeps the gathered tensor.
                assert fact["data_numel"] == 0, (when, name, fact)
                assert not fact["persistent"]
    total = sum(f["ds_numel"] for f in zero3_run["ranks"][0]["partition"].values())
    local = sum(f["local_partition"] for f in zero3_run["ranks"][0]["partition"].values())
    assert total > 100_000 and abs(local / total - 0.5) < 0.01


def test_loss_is_finite_on_both_ranks(zero3_run):
    for rank in zero3_run["ranks"]:
        # One loss per micro-batch, one micro-batch per optimizer step.
        assert len(rank["losses"]) == MAX_STEPS
        assert all(math.isfinite(loss) for loss in rank["losses"]), rank["losses"]
    # The reward varies, so at least one step had a non-zero loss somewhere: the run really trained.
    assert any(abs(loss) > 0 for rank in zero3_run["ranks"] for loss in rank["losses"])


def test_ranks_share_group_statistics(zero3_run):
    """Same all-process rewards on both ranks; groups are contiguous by prompt; advantages are R - mean(group)."""
    rank0, rank1 = zero3_run["ranks"]
    assert len(rank0["rounds"]) == len(rank1["rounds"]) == MAX_STEPS
    straddling_groups = 0
    informative_groups = 0
    for round0, round1 in zip(rank0["rounds"], rank1["rounds"], strict=True):
        assert round0["rewards"] == round1["rewards"], "the ranks saw different gathered rewards"
        prompts = round0["prompts"] + round1["prompts"]
        advantages = round0["advantages"] + round1["advantages"]
        rewards = round0["rewards"]
        assert len(prompts) == len(rewards) == WORLD_SIZE * PER_DEVICE_BATCH
        for start in range(0, len(rewards), NUM_GENERATIONS):
            group = slice(start, start + NUM_GENERATIONS)
            assert len(set(prompts[group])) == 1, f"group at {start} mixes prompts: {prompts[group]}"
            mean = sum(rewards[group]) / NUM_GENERATIONS
            # Dr.GRPO: advantage = reward - group mean, no std division (background note, section 1).
            expected = [reward - mean for reward in rewards[group]]
            assert advantages[group] == pytest.approx(expected, abs=1e-6)
            straddling_groups += start < PER_DEVICE_BATCH < start + NUM_GENERATIONS
            informative_groups += len(set(rewards[group])) > 1
    assert straddling_groups == MAX_STEPS  # one group per round is split across the ranks
    assert informative_groups > 0  # the check above compared non-zero advantages, not only zeros


def test_the_cpu_engine_generates_from_a_copy_of_the_gathered_weights_per_call(zero3_run):
    """ZeRO-3 keeps no persistent full copy for generation (issue 40): each generation call casts the gathered
    weights into a fresh copy, which equals them, and drops it; the sampler's log-probs reach TRL's correction."""
    for rank in zero3_run["ranks"]:
        calls = rank["engine_calls"]
        assert len(calls) == MAX_STEPS and all(call["copy"] and call["equals_trained"] for call in calls), calls
        assert rank["engine"] == {"persistent": False, "syncs": MAX_STEPS, "copy_kept": False}
        ratios = [
            e["sampling/importance_sampling_ratio/mean"]
            for e in rank["log_history"]
            if "sampling/importance_sampling_ratio/mean" in e
        ]
        assert len(ratios) == MAX_STEPS and all(r == pytest.approx(1.0, abs=1e-3) for r in ratios), ratios


def test_consolidated_model_reloads_in_one_process(zero3_run, tiny_model_path):
    """The 16-bit save gathers the shards: one loadable checkpoint, equal to the ranks' final partitions joined."""
    from transformers import AutoModelForCausalLM

    output_dir = zero3_run["output_dir"]
    assert (output_dir / "model.safetensors").exists()
    trained = AutoModelForCausalLM.from_pretrained(output_dir)
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    trained_state, initial_state = trained.state_dict(), initial.state_dict()
    assert trained_state.keys() == initial_state.keys()
    moved = 0
    for name, tensor in trained_state.items():
        assert tensor.shape == initial_state[name].shape, name
        assert torch.isfinite(tensor).all(), name
        moved += not torch.equal(tensor, initial_state[name])
    assert moved > 0, "no weight changed: the checkpoint is the initial model, not the trained one"

    for name, values0 in zero3_run["ranks"][0]["local_values"].items():
        values1 = zero3_run["ranks"][1]["local_values"][name]
        full = trained_state[name].flatten()
        joined = torch.tensor(values0 + values1)[: full.numel()]
        assert torch.equal(joined, full.float()), f"{name}: saved tensor is not the two ranks' partitions joined"

    # And it runs: one forward pass in this single process.
    with torch.no_grad():
        logits = trained(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, trained.config.vocab_size) and torch.isfinite(logits).all()


def test_a_zero3_checkpoint_is_saved_whole_by_both_ranks(zero3_run):
    """Both ranks' optimizer shards are in the checkpoint the main process renamed into place (the staging folder is
    gone), every file reads back whole, and only the main process took the output_dir's lock."""
    from drgrpo.core.checkpoints import incomplete_reason
    from drgrpo.core.durable import STAGING_FOLDER
    from drgrpo.run.run_lock import LOCK_FILE

    output_dir = zero3_run["output_dir"]
    checkpoint = output_dir / "checkpoint-2"
    assert incomplete_reason(checkpoint) is None
    shards = sorted(p.name for p in (checkpoint / "global_step2").glob("*optim_states.pt"))
    assert len(shards) == WORLD_SIZE, shards
    assert not (output_dir / STAGING_FOLDER).exists()
    assert (output_dir / LOCK_FILE).read_text().count("pid ") == 1
