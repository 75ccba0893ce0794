"""Memory: per-GPU model-state memory under ZeRO-0/2/3, from DeepSpeed's own estimators."""

from __future__ import annotations

import math
from dataclasses import dataclass

from drgrpo.planning.model_size import ModelSize

GIB = 1024**3
DEFAULT_GPU_MEMORY_GIB = 80.0  # A100/H100 80GB, the GPUs the 8B recipes are written for


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU and per-node CPU bytes for the model states (weights, gradients, Adam states), not activations."""

    stage: int
    gpu_bytes: int
    cpu_bytes: int


def model_states_memory(
    stage: int,
    size: ModelSize,
    num_gpus_per_node: int,
    num_nodes: int,
    *,
    adapter_params: int | None = None,
    offload_optimizer: bool = False,
    offload_params: bool = False,
) -> MemoryEstimate:
    """Model-state memory under ZeRO-`stage` (0: DDP), from DeepSpeed's `estimate_zero{2,3}_model_states_mem_needs`.

    DeepSpeed's estimators assume every parameter is trained (18 bytes per parameter of fp32 master weights, Adam
    moments and 16-bit gradients on top of the 2-byte weights). With LoRA (`adapter_params` set) only the adapters
    are trained: the estimator is applied to them, and the frozen 16-bit base weights add 2 bytes per parameter,
    sharded across all GPUs under ZeRO-3 and replicated under ZeRO-2 and DDP.
    """
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    trained = size.total_params if adapter_params is None else adapter_params
    frozen = 0 if adapter_params is None else size.total_params
    total_gpus = num_gpus_per_node * num_nodes
    if stage == 3:
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            trained,
            size.largest_layer_params,
            num_gpus_per_node=num_gpus_per_node,
            num_nodes=num_nodes,
            cpu_offload=offload_optimizer or offload_params,
            cpu_offload_params=offload_params,
            zero_init=True,
        )
        frozen_gpu = 0 if offload_params else math.ceil(2 * frozen / total_gpus)
    elif stage in (0, 2):
        # Stage 0 (DDP: nothing sharded) is the ZeRO-2 estimate with nobody to share the states with.
        gpus, nodes = (num_gpus_per_node, num_nodes) if stage == 2 else (1, 1)
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            trained, num_gpus_per_node=gpus, num_nodes=nodes, cpu_offload=offload_optimizer
        )
        frozen_gpu = 2 * frozen
    else:
        raise ValueError(f"ZeRO stage {stage}: the planner estimates stages 0 (DDP), 2 and 3.")
    return MemoryEstimate(stage, int(gpu + frozen_gpu), int(cpu))
