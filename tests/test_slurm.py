"""Multi-node launch: the commands rendered from a fake Slurm environment, and scripts/slurm/train.slurm end to end
with a fake `srun` (no Slurm, no GPUs: the launch commands are printed, not run)."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from drgrpo.planning.slurm import (
    DEFAULT_PORT_BASE,
    expand_nodelist,
    main_process_port,
    slurm_job,
    train_command,
    vllm_server_command,
)

ROOT = Path(__file__).resolve().parents[1]
RECIPE = "recipes/qwen3_8b_drgrpo.yaml"
SERVER_RECIPE = "recipes/qwen3_8b_drgrpo_vllm_server.yaml"
CONFIG = "accelerate_configs/zero3_multinode.yaml"


def fake_env(nodelist: str = "gpu[07-08]", node: str = "gpu07", **extra: str) -> dict[str, str]:
    return {
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_JOB_ID": "123456",
        "SLURM_GPUS_ON_NODE": "8",
        "SLURMD_NODENAME": node,
        **extra,
    }


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("gpu01", ["gpu01"]),
        ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[008-010,012],login1", ["gpu008", "gpu009", "gpu010", "gpu012", "login1"]),
        ("a[1-2],b[9-10]", ["a1", "a2", "b9", "b10"]),
        ("node-a,node-b", ["node-a", "node-b"]),
    ],
)
def test_expand_nodelist(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


def test_main_process_port_from_job_id_or_master_port():
    assert main_process_port({}, 123456) == DEFAULT_PORT_BASE + 123456 % 20000 == 23456
    assert main_process_port({"MASTER_PORT": "29555"}, 123456) == 29555


def test_train_command_for_each_node():
    expected_tail = ["scripts/train.py", RECIPE, "--gradient_accumulation_steps", "4"]
    for rank, node in enumerate(["gpu07", "gpu08"]):
        command = train_command(fake_env(node=node), RECIPE, CONFIG, ["--gradient_accumulation_steps", "4"])
        assert command == [
            "accelerate", "launch", "--config_file", CONFIG,
            "--num_machines", "2", "--num_processes", "16", "--machine_rank", str(rank),
            "--main_process_ip", "gpu07", "--main_process_port", "23456",
            *expected_tail,
        ]  # fmt: skip


def test_vllm_server_node_takes_the_last_node():
    env = fake_env("gpu[01-03]", node="gpu02", VLLM_SERVER_NODE="1")
    job = slurm_job(env)
    assert job.training_nodes == ["gpu01", "gpu02"] and job.server_node == "gpu03" and job.world_size == 16
    command = train_command(env, SERVER_RECIPE, CONFIG)
    assert command[command.index("--machine_rank") + 1] == "1"
    assert command[command.index("--num_processes") + 1] == "16"
    assert command[-2:] == ["--vllm_server_host", "gpu03"]
    with pytest.raises(ValueError, match="gpu03 serves vLLM"):
        train_command({**env, "SLURMD_NODENAME": "gpu03"}, SERVER_RECIPE, CONFIG)


def test_vllm_server_command_matches_the_recipe():
    env = fake_env("gpu[01-03]", node="gpu03", VLLM_SERVER_NODE="1", VLLM_TENSOR_PARALLEL_SIZE="2")
    command = vllm_server_command(env, SERVER_RECIPE)
    assert command == [
        "trl", "vllm-serve", "--model", "Qwen/Qwen3-8B", "--port", "8000", "--dtype", "bfloat16",
        "--max_model_len", "4024", "--tensor_parallel_size", "2", "--data_parallel_size", "4",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="vllm_mode"):
        vllm_server_command(env, RECIPE)  # a colocate recipe has no server to start
    with pytest.raises(ValueError, match="divide"):
        vllm_server_command({**env, "VLLM_TENSOR_PARALLEL_SIZE": "3"}, SERVER_RECIPE)


def test_missing_slurm_environment_is_explained():
    with pytest.raises(ValueError, match="SLURM_JOB_NODELIST"):
        slurm_job({})
    with pytest.raises(ValueError, match="GPUS_PER_NODE"):
        slurm_job({"SLURM_JOB_NODELIST": "gpu01"})
    with pytest.raises(ValueError, match="at least 2 nodes"):
        slurm_job(fake_env("gpu01", node="gpu01", VLLM_SERVER_NODE="1"))
    assert slurm_job(fake_env(SLURM_GPUS_ON_NODE="", SLURM_GPUS_PER_NODE="h100:4")).gpus_per_node == 4


FAKE_SRUN = """#!/bin/bash
# Fake srun: run the command once per node of --nodelist, as Slurm would on each node (SLURMD_NODENAME set); each
# node's output goes to $SRUN_OUTPUT/<node>.out (the server step runs in the background, so outputs would interleave).
nodelist=""
while [[ $1 == --* ]]; do
    case $1 in --nodelist=*) nodelist=${1#--nodelist=} ;; esac
    shift
done
IFS=',' read -ra nodes <<<"$nodelist"
for node in "${nodes[@]}"; do
    SLURMD_NODENAME=$node "$@" >"$SRUN_OUTPUT/$node.out" || exit $?
done
"""


def run_sbatch_script(tmp_path: Path, env_extra: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(FAKE_SRUN)
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    env = {
        **os.environ,
        **fake_env("gpu[01-03]", node="gpu01"),
        **env_extra,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_SUBMIT_DIR": str(ROOT),
        "PYTHON": sys.executable,
        "DRY_RUN": "1",
        "SRUN_OUTPUT": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.run(
        ["bash", str(ROOT / "scripts/slurm/train.slurm"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_sbatch_script_plans_then_launches_every_node(tmp_path):
    """3 nodes, the last one serving vLLM: the planner passes at world size 16, the server node gets `trl vllm-serve`
    and each training node its own `accelerate launch`, all carrying the overrides."""
    keep_schedule = ["--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
                     "--steps_per_generation", "8"]  # fmt: skip
    result = run_sbatch_script(tmp_path, {"VLLM_SERVER_NODE": "1"}, SERVER_RECIPE, CONFIG, "--", *keep_schedule)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "16 training process(es), 2 node(s) x 8 GPU(s), ZeRO-3" in out and "\nOK\n" in out
    # 16 GPUs x 8 x 1 per optimizer step, x 8 per rollout: the recipe's schedule, kept
    assert "16 prompts x 8 = 128 completions" in out and "128 prompts x 8 = 1024 completions" in out
    assert "optimizer steps per rollout: 8 " in out and "[world size]" not in out
    # The command is each node's last line (libraries may log above it).
    commands = {path.stem: shlex.split(path.read_text().strip().splitlines()[-1]) for path in tmp_path.glob("*.out")}
    assert set(commands) == {"gpu01", "gpu02", "gpu03"}
    server = commands["gpu03"]
    assert Path(server[0]).name == "trl" and server[1] == "vllm-serve"
    assert server[server.index("--data_parallel_size") + 1] == "8"
    for rank, node in enumerate(["gpu01", "gpu02"]):
        train = commands[node]
        assert Path(train[0]).name == "accelerate" and train[1] == "launch"
        assert train[train.index("--machine_rank") + 1] == str(rank)
        assert train[train.index("--main_process_ip") + 1] == "gpu01"
        assert train[train.index("--num_processes") + 1] == "16"
        assert train[train.index("scripts/train.py") :] == [
            "scripts/train.py", SERVER_RECIPE, *keep_schedule, "--vllm_server_host", "gpu03",
        ]  # fmt: skip


def test_sbatch_script_stops_when_the_plan_fails(tmp_path):
    """The planner's exit status gates the launch (here it fails at once: the recipe does not exist; a recipe error
    exits 1 the same way, see tests/test_plan.py::test_plan_script_exit_codes)."""
    result = run_sbatch_script(tmp_path, {}, "recipes/no_such_recipe.yaml")
    assert result.returncode != 0
    assert "no_such_recipe.yaml" in result.stderr
    assert not list(tmp_path.glob("*.out"))  # no node was launched
