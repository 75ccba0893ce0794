"""Recipe planner: what a recipe does at a given world size, and what would break, before any GPU is involved.

`plan_recipe(path, num_processes=...)` parses the recipe exactly as `scripts/train.py` does and reports, for that
number of training processes:
- prompts and completions per optimizer step and per rollout (generation round), and optimizer steps per rollout
  (TRL 1.16's batch arithmetic, `GRPOConfig.__post_init__`, redone for the target world size), next to the
  published run's for a recipe whose header names one ("Paper reproduction: Oat-Zero-1.5B");
- whether every rollout holds whole groups of `num_generations` completions (TRL's rule; optimizer steps need not);
- whether `max_prompt_tokens + max_completion_length` fits the model's context (and vLLM's `max_model_len`);
- per-GPU memory for the model states under ZeRO-2 and ZeRO-3, from DeepSpeed's own estimators and the parameter
  count of the model transformers builds on the meta device from its `config.json` (a local folder, or
  `BUILTIN_MODEL_CONFIGS` for the hub models the recipes name): no weights are downloaded and no GPU is needed;
- one GPU's memory in generation (model states + colocated vLLM's weights, overhead and KV cache, and how many
  full-length sequences that holds against the requests per rollout) and in training (model states + the
  micro-batch's activations, with and without gradient checkpointing, + vLLM unless sleep mode frees it);
- the vLLM and ZeRO-3 settings that must hold together (tensor-parallel size, `ds3_gather_for_generation`, an
  explicit importance-sampling choice).
Every problem is a `Finding` with the fix spelled out. Errors make `scripts/plan.py` exit non-zero.

Modules, each importing only the ones listed before it (and `drgrpo.recipe` below them, which parses recipes):
- `findings`: `Finding`, one problem or caution with its key and fix;
- `batch`: TRL's batch arithmetic at a target world size;
- `family_cost`: what the GRPO-family keys cost: the extra generation of dynamic sampling and the reference model of a
  KL in the reward (the keys themselves: `drgrpo.algorithm.family`);
- `reference`: the published runs a recipe reproduces, with their schedule per rollout;
- `model_size`: parameter counts of the meta-device model, LoRA's through peft (`BUILTIN_MODEL_CONFIGS` for the
  recipes' hub models);
- `memory`: DeepSpeed's ZeRO model-state estimators;
- `activations`: the bytes a training micro-batch saves for backward (transformers' modules, TRL's fused LM head);
- `kv_cache`: colocated vLLM's share: weights, overhead, KV cache per token and the sequences it holds at once;
- `gpu_budget`: the generation and training phases of one GPU, their findings and report lines;
- `context`: prompt + completion against the model's context and vLLM's `max_model_len`;
- `launch_setup`: processes, nodes and ZeRO stage from the accelerate config;
- `plan`: `plan_recipe`, every check of one recipe at one world size, as a `PlanReport`;
- `report`: `format_report`, the lines `scripts/plan.py` prints;
- `slurm`: a Slurm job's environment turned into the `accelerate launch` and `trl vllm-serve` commands.
"""

from drgrpo.planning.activations import LLAMA_LAYOUT_TYPES, ActivationEstimate, training_activations
from drgrpo.planning.batch import BatchPlan, batch_plan, per_device_multiple
from drgrpo.planning.context import context_findings
from drgrpo.planning.findings import Finding
from drgrpo.planning.gpu_budget import GpuBudget
from drgrpo.planning.kv_cache import VllmMemory, kv_bytes_per_token, vllm_memory
from drgrpo.planning.launch_setup import DEFAULT_GPUS_PER_NODE, LaunchSetup, read_accelerate_config
from drgrpo.planning.memory import DEFAULT_GPU_MEMORY_GIB, GIB, MemoryEstimate, model_states_memory
from drgrpo.planning.model_size import (
    BUILTIN_MODEL_CONFIGS,
    ModelSize,
    count_parameters,
    load_model_config,
    lora_parameters,
    model_size,
    with_defaults,
)
from drgrpo.planning.plan import PlanReport, plan_recipe
from drgrpo.planning.reference import REFERENCE_SCHEDULES, ReferenceSchedule, reference_findings
from drgrpo.planning.report import format_report

__all__ = [
    "ActivationEstimate",
    "BUILTIN_MODEL_CONFIGS",
    "BatchPlan",
    "DEFAULT_GPUS_PER_NODE",
    "DEFAULT_GPU_MEMORY_GIB",
    "Finding",
    "GIB",
    "GpuBudget",
    "LLAMA_LAYOUT_TYPES",
    "LaunchSetup",
    "MemoryEstimate",
    "ModelSize",
    "PlanReport",
    "REFERENCE_SCHEDULES",
    "ReferenceSchedule",
    "VllmMemory",
    "batch_plan",
    "context_findings",
    "count_parameters",
    "format_report",
    "kv_bytes_per_token",
    "load_model_config",
    "lora_parameters",
    "model_size",
    "model_states_memory",
    "per_device_multiple",
    "plan_recipe",
    "read_accelerate_config",
    "reference_findings",
    "training_activations",
    "vllm_memory",
    "with_defaults",
]
