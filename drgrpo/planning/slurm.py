"""Launch commands rendered from a recipe and the Slurm environment: multi-node `accelerate launch`, `trl vllm-serve`.

`scripts/slurm/train.slurm` runs `scripts/slurm/launch.py` once per node; that script calls these functions with the
node's environment and runs the command they return. Keeping the logic here lets the tests check the exact command
for a fake Slurm environment.

The job's nodes come from `SLURM_JOB_NODELIST` (Slurm's compressed hostlist, e.g. `gpu[001-002,007]`). With a
dedicated vLLM server node (`VLLM_SERVER_NODE=1`) the last node serves generations and the others train; the main
process is the first training node, and each node's machine rank is its position among the training nodes.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PORT_BASE = 20000  # main process port = base + job id mod PORT_SPAN: jobs sharing a node do not collide
PORT_SPAN = 20000
_HOSTLIST_PART = re.compile(r"([^,\[]+)(?:\[([^\]]+)\])?(?:,|$)")


def expand_nodelist(nodelist: str) -> list[str]:
    """Expand a Slurm hostlist ("gpu[001-003,007],login1") into host names, in order (as `scontrol show hostnames`).

    A bracket holds comma-separated numbers or ranges; ranges keep their zero padding ("001-003" -> 001, 002, 003).
    """
    hosts: list[str] = []
    position = 0
    nodelist = nodelist.strip()
    while position < len(nodelist):
        match = _HOSTLIST_PART.match(nodelist, position)
        if match is None or match.end() == position:
            raise ValueError(f"Cannot parse the Slurm node list {nodelist!r} at position {position}.")
        prefix, ranges = match.group(1), match.group(2)
        if ranges is None:
            hosts.append(prefix)
        else:
            for part in ranges.split(","):
                low, _, high = part.partition("-")
                width = len(low)
                for number in range(int(low), int(high or low) + 1):
                    hosts.append(f"{prefix}{number:0{width}d}")
        position = match.end()
    return hosts


@dataclass(frozen=True)
class SlurmJob:
    """The parts of a Slurm job the launch needs."""

    nodes: list[str]
    job_id: int
    gpus_per_node: int
    this_node: str
    vllm_server_node: bool = False

    @property
    def training_nodes(self) -> list[str]:
        return self.nodes[:-1] if self.vllm_server_node else self.nodes

    @property
    def server_node(self) -> str | None:
        return self.nodes[-1] if self.vllm_server_node else None

    @property
    def world_size(self) -> int:
        return len(self.training_nodes) * self.gpus_per_node


def _gpu_count(value: str) -> int:
    """GPUs from SLURM_GPUS_ON_NODE ("8") or SLURM_GPUS_PER_NODE ("8" or "h100:8")."""
    return int(value.rsplit(":", 1)[-1])


def slurm_job(env: Mapping[str, str]) -> SlurmJob:
    """Read the job from Slurm's environment variables (`GPUS_PER_NODE` and `VLLM_SERVER_NODE` are ours)."""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise ValueError(
            "SLURM_JOB_NODELIST is not set: run this inside a Slurm job (sbatch scripts/slurm/train.slurm)."
        )
    gpus = env.get("GPUS_PER_NODE") or env.get("SLURM_GPUS_ON_NODE") or env.get("SLURM_GPUS_PER_NODE")
    if not gpus:
        raise ValueError(
            "No GPU count in the environment: request GPUs (#SBATCH --gpus-per-node=8) or set GPUS_PER_NODE."
        )
    job = SlurmJob(
        nodes=expand_nodelist(nodelist),
        job_id=int(env.get("SLURM_JOB_ID", "0")),
        gpus_per_node=_gpu_count(gpus),
        this_node=env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0],
        vllm_server_node=env.get("VLLM_SERVER_NODE", "0") not in ("", "0", "false", "False"),
    )
    if job.vllm_server_node and len(job.nodes) < 2:
        raise ValueError(
            "VLLM_SERVER_NODE=1 needs at least 2 nodes (one serves vLLM, the others train): sbatch --nodes 2."
        )
    return job


def main_process_port(env: Mapping[str, str], job_id: int) -> int:
    """MASTER_PORT if set, else a port derived from the job id."""
    if env.get("MASTER_PORT"):
        return int(env["MASTER_PORT"])
    return DEFAULT_PORT_BASE + job_id % PORT_SPAN


def train_command(
    env: Mapping[str, str],
    recipe: str,
    accelerate_config: str,
    overrides: Sequence[str] = (),
    *,
    accelerate: str = "accelerate",
) -> list[str]:
    """The `accelerate launch` command for this node of the job (its machine rank, the main node, the port)."""
    job = slurm_job(env)
    if job.this_node not in job.training_nodes:
        raise ValueError(
            f"Node {job.this_node!r} is not a training node of this job ({', '.join(job.training_nodes)})"
            + (f"; {job.server_node} serves vLLM." if job.server_node else ".")
        )
    command = [
        accelerate,
        "launch",
        "--config_file",
        accelerate_config,
        "--num_machines",
        str(len(job.training_nodes)),
        "--num_processes",
        str(job.world_size),
        "--machine_rank",
        str(job.training_nodes.index(job.this_node)),
        "--main_process_ip",
        job.training_nodes[0],
        "--main_process_port",
        str(main_process_port(env, job.job_id)),
        "scripts/train.py",
        recipe,
        *overrides,
    ]
    if job.server_node:
        command += ["--vllm_server_host", job.server_node]
    return command


def vllm_serve_args(recipe: str | Path, overrides: Sequence[str] = ()) -> list[str]:
    """`trl vllm-serve` arguments that match the recipe: its model, revision, dtype, port and context length.

    The context is `vllm_max_model_length`, else `max_prompt_tokens + max_completion_length` (the longest sequence the
    trainer can ask for), else vLLM's default (the model's own).
    """
    from drgrpo.recipe.preflight import parse_for_planning

    script_args, args, model_args, _ = parse_for_planning(recipe, overrides)
    if not args.use_vllm or args.vllm_mode != "server":
        raise ValueError(
            f"{recipe} does not generate with a vLLM server (use_vllm={args.use_vllm}, vllm_mode={args.vllm_mode!r}). "
            "Use a server-mode recipe such as recipes/qwen3_8b_drgrpo_vllm_server.yaml."
        )
    serve = ["--model", model_args.model_name_or_path, "--port", str(args.vllm_server_port)]
    if model_args.model_revision not in (None, "main"):
        serve += ["--revision", model_args.model_revision]
    if model_args.dtype not in (None, "auto"):
        serve += ["--dtype", model_args.dtype]
    max_len = args.vllm_max_model_length
    if max_len is None and script_args.max_prompt_tokens is not None:
        max_len = script_args.max_prompt_tokens + args.max_completion_length
    if max_len is not None:
        serve += ["--max_model_len", str(max_len)]
    return serve


def vllm_server_command(
    env: Mapping[str, str], recipe: str, overrides: Sequence[str] = (), *, trl: str = "trl"
) -> list[str]:
    """`trl vllm-serve` on the job's server node: one model replica per `VLLM_TENSOR_PARALLEL_SIZE` GPUs."""
    job = slurm_job(env)
    tensor_parallel = int(env.get("VLLM_TENSOR_PARALLEL_SIZE", "1"))
    if job.gpus_per_node % tensor_parallel:
        raise ValueError(
            f"VLLM_TENSOR_PARALLEL_SIZE={tensor_parallel} does not divide the {job.gpus_per_node} GPUs of the server "
            "node; choose a divisor."
        )
    return [
        trl,
        "vllm-serve",
        *vllm_serve_args(recipe, overrides),
        "--tensor_parallel_size",
        str(tensor_parallel),
        "--data_parallel_size",
        str(job.gpus_per_node // tensor_parallel),
    ]
