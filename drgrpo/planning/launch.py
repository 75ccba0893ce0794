"""Launch setup: processes, nodes and ZeRO stage from the accelerate config or the recipe header; the recipe parsed
for any target world size."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from drgrpo.cli import BATCH_KEYS, PREFLIGHT_BATCH
from drgrpo.planning.reference import read_reproduced_run

DEFAULT_GPUS_PER_NODE = 8
WORLD_SIZE_PATTERN = re.compile(r"world size:\s*(\d+)", re.IGNORECASE)
# Case-sensitive on purpose: "ZeRO-3" is DeepSpeed's stage, "Oat-Zero-1.5B" a model name.
ZERO_STAGE_PATTERN = re.compile(r"\bZeRO-?([0-3])\b")


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


def read_header(path: str | Path) -> dict[str, Any]:
    """World size, ZeRO stage, CPU-ness and the reproduced run ("Paper reproduction: NAME") stated in the recipe's
    leading comment block."""
    lines = []
    for line in Path(path).read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    header = "\n".join(lines)
    world = WORLD_SIZE_PATTERN.search(header)
    stage = ZERO_STAGE_PATTERN.search(header)
    world_line = header[world.start() : header.find("\n", world.start())] if world else ""
    return {
        "world_size": int(world.group(1)) if world else None,
        "zero_stage": int(stage.group(1)) if stage else None,
        "cpu": "cpu" in world_line.lower(),
        "reproduces": read_reproduced_run(header),
    }


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


def _nodes_for(world_size: int) -> int:
    return max(1, math.ceil(world_size / DEFAULT_GPUS_PER_NODE))


def recipe_values(path: str | Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The values the recipe file sets, updated by `--key value` / `--key=value` command-line overrides."""
    values = dict(yaml.safe_load(Path(path).read_text()) or {})
    tokens = list(overrides)
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if not token.startswith("--"):
            continue
        key, has_value, raw = token[2:].partition("=")
        if not has_value:
            has_next = index < len(tokens) and not tokens[index].startswith("--")
            raw = tokens[index] if has_next else "true"
            index += has_next
        values[key.replace("-", "_")] = yaml.safe_load(raw)
    return values


# The pre-flight stand-ins live in `drgrpo.cli` (one set for --show_prompts, --explain and the planner); the old
# name stays for callers of `drgrpo.planning`.
NEUTRAL_BATCH = PREFLIGHT_BATCH


def parse_for_planning(recipe: str | Path, overrides: Sequence[str] = ()) -> tuple[Any, Any, Any, dict[str, Any]]:
    """`parse_recipe(..., preflight=True)` for any target world size: (script args, trainer args, model args,
    batch values).

    While parsing, TRL checks the batch keys against the *current* world size (one CPU process here), which says
    nothing about the target one, so the trainer args hold the pre-flight stand-ins (`drgrpo.cli.PREFLIGHT_BATCH`);
    the batch values returned are the recipe's own (None where it sets none and TRL derives the value), which
    `batch_plan` checks for the target world size.
    """
    from drgrpo.cli import parse_recipe
    from drgrpo.config import DrGRPOConfig

    values = recipe_values(recipe, overrides)
    script_args, args, model_args = parse_recipe([str(recipe), *overrides], preflight=True)
    defaults = {f.name: f.default for f in dataclasses.fields(DrGRPOConfig)}
    batch = {key: values.get(key, defaults[key]) for key in BATCH_KEYS}
    return script_args, args, model_args, batch
