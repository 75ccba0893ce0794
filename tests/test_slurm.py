"""Multi-node launch: the commands rendered from a fake Slurm environment, and scripts/slurm/train.slurm end to end
with a fake `srun` (no Slurm, no GPUs: the launch commands are printed, not run)."""

from __future__ import annotations

import os
import shlex
import shutil
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
# node's output goes to $SRUN_OUTPUT/<node>.out (the server step runs in the background, so outputs would interleave),
# and the step's options to $SRUN_OUTPUT/<node>.srun (one per line).
nodelist=""
options=()
while [[ $1 == --* ]]; do
    options+=("$1")
    case $1 in --nodelist=*) nodelist=${1#--nodelist=} ;; esac
    shift
done
IFS=',' read -ra nodes <<<"$nodelist"
for node in "${nodes[@]}"; do
    printf '%s\n' "${options[@]}" >"$SRUN_OUTPUT/$node.srun"
    SLURMD_NODENAME=$node "$@" >"$SRUN_OUTPUT/$node.out" || exit $?
done
"""

# Fake sbatch: what Slurm does before the job script runs. The options (command line over #SBATCH lines) give the
# job's CPUs and GPUs, exported as Slurm does (SLURM_CPUS_PER_TASK, SLURM_GPUS_PER_NODE); the --output file is
# opened first, in the submit folder, so a folder that does not exist fails the job before the script starts.
FAKE_SBATCH = """#!{python}
import os, re, subprocess, sys
args = sys.argv[1:]
options = {{}}
def take(pairs):
    i = 0
    while i < len(pairs) and pairs[i].startswith("-"):
        key, eq, value = pairs[i].lstrip("-").partition("=")
        if not eq and i + 1 < len(pairs) and not pairs[i + 1].startswith("-"):
            value, i = pairs[i + 1], i + 1
        options[key] = value
        i += 1
    return i
script_at = take(args)
script, script_args = args[script_at], args[script_at + 1:]
directives = [token for line in open(script) if line.startswith("#SBATCH ") for token in line.split()[1:]]
command_line = dict(options)
take(directives)
options.update(command_line)
job_id = os.environ["SLURM_JOB_ID"]
output = options["output"].replace("%x", options.get("job-name", "sbatch")).replace("%j", job_id)
if not os.path.isdir(os.path.dirname(output) or "."):
    sys.exit(f"fake sbatch: job {{job_id}} failed: cannot open {{output}} (its folder does not exist)")
env = dict(os.environ, SLURM_CPUS_PER_TASK=options["cpus-per-task"], SLURM_GPUS_PER_NODE=options["gpus-per-node"],
           SLURM_SUBMIT_DIR=os.getcwd())
with open(output, "w") as log:
    sys.exit(subprocess.run(["bash", script, *script_args], env=env, stdout=log, stderr=subprocess.STDOUT).returncode)
"""


def fake_slurm(tmp_path: Path) -> Path:
    """A bin folder with the fake srun and sbatch."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("sbatch", FAKE_SBATCH.format(python=sys.executable))):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def fresh_clone(tmp_path: Path) -> Path:
    """The repository's files as a fresh clone has them (tracked and not ignored): no logs/, no outputs/, no .venv."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split("\0")  # fmt: skip
    clone = tmp_path / "clone"
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    assert not (clone / "logs").exists()
    return clone


def run_sbatch_script(tmp_path: Path, env_extra: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    bin_dir = fake_slurm(tmp_path)
    env = {
        **os.environ,
        **fake_env("gpu[01-03]", node="gpu01"),
        "SLURM_CPUS_PER_TASK": "32",
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


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["submit.sh", "sbatch"])
def test_a_fresh_clone_job_logs_where_a_folder_exists_and_every_srun_states_cpus_and_gpus(tmp_path, launcher):
    """On a fresh clone (no logs/): scripts/slurm/submit.sh creates logs/ before sbatch opens the log there, and plain
    sbatch logs in the submit folder; either way the job runs, and every srun passes --cpus-per-task and
    --gpus-per-node (recent Slurm no longer hands a step the job's CPUs)."""
    clone = fresh_clone(tmp_path)
    bin_dir = fake_slurm(tmp_path)
    env = {
        **os.environ,
        **fake_env("gpu[01-03]", node="gpu01", VLLM_SERVER_NODE="1"),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "PYTHONPATH": str(clone),
        "DRY_RUN": "1",
        "SRUN_OUTPUT": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
    }
    for key in ("SLURM_GPUS_ON_NODE", "SLURM_CPUS_PER_TASK", "SLURM_GPUS_PER_NODE"):
        env.pop(key, None)  # only what the fake sbatch exports from the job's options
    keep_schedule = ["--per_device_train_batch_size", "8"]
    tail = [SERVER_RECIPE, CONFIG, "--", *keep_schedule]
    command = ["scripts/slurm/submit.sh", "--nodes", "3", *tail] if launcher == "submit.sh" else [
        "sbatch", "--nodes=3", "scripts/slurm/train.slurm", *tail
    ]  # fmt: skip
    result = subprocess.run(command, cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    log = clone / ("logs/drgrpo-123456.out" if launcher == "submit.sh" else "drgrpo-123456.out")
    assert log.is_file(), sorted(p.name for p in clone.iterdir())
    assert "16 training process(es), 2 node(s) x 8 GPU(s), ZeRO-3" in log.read_text()
    steps = {path.stem: path.read_text().split() for path in tmp_path.glob("*.srun")}
    assert set(steps) == {"gpu01", "gpu02", "gpu03"}  # two training nodes, one vLLM server node
    for options in steps.values():
        assert "--cpus-per-task=32" in options and "--gpus-per-node=8" in options and "--ntasks-per-node=1" in options


def test_sbatch_with_the_old_log_folder_fails_on_a_fresh_clone(tmp_path):
    """What the fake sbatch guards against: an --output in a folder the clone does not have fails before the job."""
    clone = fresh_clone(tmp_path)
    bin_dir = fake_slurm(tmp_path)
    env = {**os.environ, **fake_env(), "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": sys.executable}
    result = subprocess.run(
        ["sbatch", "--output=logs/%x-%j.out", "scripts/slurm/train.slurm", RECIPE],
        cwd=clone, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0 and "cannot open logs/drgrpo-123456.out" in result.stderr


def test_a_job_without_cpu_or_gpu_counts_is_refused(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    result = subprocess.run(
        ["bash", str(ROOT / "scripts/slurm/train.slurm"), RECIPE],
        cwd=tmp_path, env={**env, "PYTHON": sys.executable}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2 and "--gpus-per-node and --cpus-per-task" in result.stderr
