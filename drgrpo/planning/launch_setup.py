"""Launch setup: processes, nodes and ZeRO stage from the accelerate config (or, without one, the recipe header)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

DEFAULT_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class LaunchSetup:
    """What the accelerate config (or the recipe header) says about the processes and DeepSpeed."""

    world_size: int
    num_nodes: int
    gpus_per_node: int
    zero_stage: int | None
    offload_optimizer: bool = False
    offload_params: bool = False
    on_gpu: bool = True
    source: str = "recipe header"


def read_accelerate_config(path: str | Path) -> LaunchSetup:
    """Processes, machines, ZeRO stage and offload settings of an accelerate config file."""
    config = yaml.safe_load(Path(path).read_text()) or {}
    deepspeed = config.get("deepspeed_config") or {}
    stage = deepspeed.get("zero_stage")
    offload_optimizer = deepspeed.get("offload_optimizer_device", "none") not in (None, "none")
    offload_params = deepspeed.get("offload_param_device", "none") not in (None, "none")
    if deepspeed.get("deepspeed_config_file"):
        zero = json.loads(Path(deepspeed["deepspeed_config_file"]).read_text()).get("zero_optimization", {})
        stage = zero.get("stage")
        offload_optimizer = zero.get("offload_optimizer", {}).get("device", "none") != "none"
        offload_params = zero.get("offload_param", {}).get("device", "none") != "none"
    if config.get("distributed_type") in ("MULTI_GPU", "NO"):
        stage = 0  # DDP (or one process): every GPU holds all model states
    elif config.get("distributed_type") != "DEEPSPEED":
        stage = None
    world = int(config.get("num_processes", 1))
    nodes = int(config.get("num_machines", 1))
    return LaunchSetup(
        world_size=world,
        num_nodes=nodes,
        gpus_per_node=max(1, world // nodes),
        zero_stage=stage,
        offload_optimizer=offload_optimizer,
        offload_params=offload_params,
        on_gpu=not config.get("use_cpu", False),
        source=str(path),
    )


def nodes_for(world_size: int) -> int:
    """Nodes of DEFAULT_GPUS_PER_NODE GPUs for `world_size` processes, when no accelerate config says."""
    return max(1, math.ceil(world_size / DEFAULT_GPUS_PER_NODE))
