"""Recipe planner: what a recipe does at a given world size, and what would break, before any GPU is involved.

`plan_recipe(path, num_processes=...)` parses the recipe exactly as `scripts/train.py` does and reports, for that
number of training processes:
- prompts and completions per optimizer step and per generation round, and optimizer steps per generation round
  (TRL 1.16's batch arithmetic, `GRPOConfig.__post_init__`, redone for the target world size);
- whether every generation round and every optimizer step holds whole groups of `num_generations` completions;
- whether `max_prompt_tokens + max_completion_length` fits the model's context (and vLLM's `max_model_len`);
- per-GPU memory for the model states under ZeRO-2 and ZeRO-3, from DeepSpeed's own estimators and a parameter
  count computed from the model's `config.json` (a local folder, or `BUILTIN_MODEL_CONFIGS` for the hub models the
  recipes name): no weights are downloaded and no GPU is needed;
- the vLLM and ZeRO-3 settings that must hold together (tensor-parallel size, `ds3_gather_for_generation`, an
  explicit importance-sampling choice).
Every problem is a `Finding` with the fix spelled out. Errors make `scripts/plan.py` exit non-zero.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

GIB = 1024**3
DEFAULT_GPU_MEMORY_GIB = 80.0  # A100/H100 80GB, the GPUs the 8B recipes are written for
DEFAULT_GPUS_PER_NODE = 8

# The config.json fields the parameter count reads, for the hub models our recipes name, so that the planner needs no
# download. Values are those of the models' published config.json files.
BUILTIN_MODEL_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen3-8B": {
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
    },
    "Qwen/Qwen2.5-Math-1.5B": {
        "model_type": "qwen2",
        "vocab_size": 151936,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
    },
}
# Decoder-only architectures with the Llama layout (q/k/v/o attention, gated MLP, RMSNorm) whose size
# `count_parameters` computes exactly.
LLAMA_LAYOUT_TYPES = ("llama", "mistral", "qwen2", "qwen3")
# peft's default LoRA targets for these architectures (peft TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
DEFAULT_LORA_TARGETS = ("q_proj", "v_proj")
WORLD_SIZE_PATTERN = re.compile(r"world size:\s*(\d+)", re.IGNORECASE)
# Case-sensitive on purpose: "ZeRO-3" is DeepSpeed's stage, "Oat-Zero-1.5B" a model name.
ZERO_STAGE_PATTERN = re.compile(r"\bZeRO-?([0-3])\b")


@dataclass(frozen=True)
class Finding:
    """One problem (`level="error"`) or caution (`level="warning"`) with the recipe key it concerns and its fix."""

    level: str
    key: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.level.upper()} [{self.key}] {self.message} Fix: {self.fix}"


# ----------------------------------------------------------------------------------------------------------------------
# Batch arithmetic (pure)
# ----------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchPlan:
    """TRL's batch sizes at one world size. A micro-step is one `training_step` call on every process."""

    world_size: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    steps_per_generation: int
    num_generations: int
    num_iterations: int

    @property
    def completions_per_step(self) -> int:
        """Completions in one optimizer step: per_device x world x gradient_accumulation_steps."""
        return self.per_device_train_batch_size * self.world_size * self.gradient_accumulation_steps

    @property
    def completions_per_round(self) -> int:
        """Completions generated at once (TRL's generation_batch_size): per_device x world x steps_per_generation."""
        return self.per_device_train_batch_size * self.world_size * self.steps_per_generation

    @property
    def prompts_per_step(self) -> Fraction:
        return Fraction(self.completions_per_step, self.num_generations)

    @property
    def prompts_per_round(self) -> Fraction:
        return Fraction(self.completions_per_round, self.num_generations)

    @property
    def optimizer_steps_per_round(self) -> Fraction:
        """TRL generates every steps_per_generation x num_iterations micro-steps and steps the optimizer every
        gradient_accumulation_steps micro-steps (`GRPOTrainer._prepare_inputs`)."""
        return Fraction(self.steps_per_generation * self.num_iterations, self.gradient_accumulation_steps)


def batch_plan(
    world_size: int,
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    num_generations: int,
    *,
    steps_per_generation: int | None = None,
    generation_batch_size: int | None = None,
    num_iterations: int = 1,
) -> tuple[BatchPlan | None, list[Finding]]:
    """TRL 1.16's `GRPOConfig.__post_init__` batch rules, for `world_size` processes instead of the current one.

    `steps_per_generation` / `generation_batch_size` are the values the recipe itself set (None: unset). Returns the
    plan (None when TRL would refuse to start) and the batch findings.
    """
    findings: list[Finding] = []
    if num_generations < 2:
        findings.append(
            Finding(
                "error",
                "num_generations",
                f"num_generations={num_generations}: a group of one has no baseline and carries no learning signal.",
                "set num_generations to 8 or more (papers use 8-64).",
            )
        )
        return None, findings
    local = per_device_train_batch_size * world_size
    if generation_batch_size is not None and steps_per_generation is not None:
        findings.append(
            Finding(
                "error",
                "generation_batch_size",
                "generation_batch_size and steps_per_generation are both set; TRL refuses that.",
                "keep one of them (steps_per_generation is the world-size independent one).",
            )
        )
        return None, findings
    if generation_batch_size is not None:
        if generation_batch_size % local:
            findings.append(
                Finding(
                    "error",
                    "generation_batch_size",
                    f"generation_batch_size={generation_batch_size} is not a multiple of per_device_train_batch_size "
                    f"x world size = {local}; TRL refuses to start.",
                    f"set generation_batch_size to a multiple of {local}, or set steps_per_generation instead.",
                )
            )
            return None, findings
        steps = generation_batch_size // local
    else:
        steps = steps_per_generation if steps_per_generation is not None else gradient_accumulation_steps
    plan = BatchPlan(
        world_size=world_size,
        per_device_train_batch_size=per_device_train_batch_size,
        gradient_accumulation_steps=gradient_accumulation_steps,
        steps_per_generation=steps,
        num_generations=num_generations,
        num_iterations=num_iterations,
    )
    if plan.completions_per_round % num_generations:
        multiple = per_device_multiple(num_generations, world_size * steps)
        findings.append(
            Finding(
                "error",
                "per_device_train_batch_size",
                f"A generation round holds {plan.completions_per_round} completions (per_device_train_batch_size "
                f"{per_device_train_batch_size} x {world_size} processes x {steps} steps_per_generation), not a "
                f"multiple of num_generations={num_generations}: the last group would be cut; TRL refuses to start.",
                f"set per_device_train_batch_size to a multiple of {multiple}.",
            )
        )
    if plan.completions_per_step % num_generations:
        multiple = per_device_multiple(num_generations, world_size * gradient_accumulation_steps)
        findings.append(
            Finding(
                "error",
                "per_device_train_batch_size",
                f"An optimizer step holds {plan.completions_per_step} completions (per_device_train_batch_size "
                f"{per_device_train_batch_size} x {world_size} processes x {gradient_accumulation_steps} "
                f"gradient_accumulation_steps), not a multiple of num_generations={num_generations}: a group's "
                "completions would be split over two updates, and its zero-sum advantages no longer cancel in each.",
                f"set per_device_train_batch_size to a multiple of {multiple}.",
            )
        )
    return plan, findings


def per_device_multiple(num_generations: int, other_factors: int) -> int:
    """Smallest k such that k x other_factors is a multiple of num_generations: G / gcd(G, other_factors)."""
    return num_generations // math.gcd(num_generations, other_factors)


# ----------------------------------------------------------------------------------------------------------------------
# Model size (pure)
# ----------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSize:
    """Parameter counts the memory estimators need, and the model's context length."""

    total_params: int
    largest_layer_params: int  # the largest module's own parameters: DeepSpeed's ZeRO-3 gather buffer unit
    context_length: int | None
    source: str


def with_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """The config.json fields completed with transformers' defaults for that model_type (e.g. Qwen3's head_dim 128,
    which is not hidden_size / num_attention_heads), exactly as `from_pretrained` would see them."""
    from transformers import AutoConfig

    fields = {key: value for key, value in config.items() if key != "model_type"}
    return {**AutoConfig.for_model(config["model_type"], **fields).to_dict(), **config}


def _linear_shapes(config: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each linear layer of one decoder layer of the Llama layout."""
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    intermediate = config["intermediate_size"]
    return {
        "q_proj": (hidden, heads * head_dim),
        "k_proj": (hidden, kv_heads * head_dim),
        "v_proj": (hidden, kv_heads * head_dim),
        "o_proj": (heads * head_dim, hidden),
        "gate_proj": (hidden, intermediate),
        "up_proj": (hidden, intermediate),
        "down_proj": (intermediate, hidden),
    }


def count_parameters(config: dict[str, Any]) -> tuple[int, int]:
    """(total, largest single module) parameter counts of a Llama-layout decoder from its config.json fields.

    Per layer, following transformers' modeling_{llama,mistral,qwen2,qwen3}.py: the seven linear layers of
    `_linear_shapes` (q/k/v biases in Qwen2 always; q/k/v/o biases in Llama and Qwen3 when `attention_bias`; MLP
    biases in Llama when `mlp_bias`; none in Mistral), two RMSNorm vectors of `hidden_size`, and in Qwen3 a q_norm
    and k_norm of `head_dim`.
    Plus the embedding (vocab x hidden), the final norm, and an untied lm_head (vocab x hidden).
    Checked against Qwen3-8B's published size: 8,190,735,360 parameters (16,381,470,720 bytes of bf16 weights).
    """
    model_type = config.get("model_type")
    if model_type not in LLAMA_LAYOUT_TYPES:
        raise ValueError(
            f"count_parameters handles the Llama layout ({', '.join(LLAMA_LAYOUT_TYPES)}), not model_type="
            f"{model_type!r}."
        )
    config = with_defaults(config)
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    shapes = _linear_shapes(config)
    module_sizes = {name: i * o for name, (i, o) in shapes.items()}
    if model_type == "qwen2":
        for name in ("q_proj", "k_proj", "v_proj"):
            module_sizes[name] += shapes[name][1]
    elif model_type in ("llama", "qwen3") and config.get("attention_bias"):
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            module_sizes[name] += shapes[name][1]
    if model_type == "llama" and config.get("mlp_bias"):
        for name in ("gate_proj", "up_proj", "down_proj"):
            module_sizes[name] += shapes[name][1]
    per_layer = sum(module_sizes.values()) + 2 * hidden
    if model_type == "qwen3":
        head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
        per_layer += 2 * head_dim
    embedding = vocab * hidden
    tied = config.get("tie_word_embeddings", False)
    total = embedding + per_layer * config["num_hidden_layers"] + hidden + (0 if tied else embedding)
    return total, max(embedding, *module_sizes.values())


def lora_parameters(config: dict[str, Any], rank: int, target_modules: str | Sequence[str] | None) -> int:
    """Trainable parameters of LoRA adapters (A: r x in, B: out x r) on the targeted linear layers of every layer.

    `target_modules` as peft takes it: None (peft's default for these architectures, q_proj and v_proj),
    "all-linear" (every linear layer except lm_head) or a list of module names (Hu et al. 2021; peft LoraConfig).
    """
    shapes = _linear_shapes(with_defaults(config))
    if target_modules is None:
        names: Sequence[str] = DEFAULT_LORA_TARGETS
    elif target_modules == "all-linear":
        names = tuple(shapes)
    else:
        names = [target_modules] if isinstance(target_modules, str) else list(target_modules)
    unknown = [name for name in names if name not in shapes]
    if unknown:
        raise ValueError(
            f"lora_target_modules {unknown} are not linear layers of a {config.get('model_type')} decoder layer. "
            f"Use names from {list(shapes)} or 'all-linear'."
        )
    per_layer = sum(rank * (shapes[name][0] + shapes[name][1]) for name in names)
    return per_layer * config["num_hidden_layers"]


def load_model_config(model_name_or_path: str) -> tuple[dict[str, Any] | None, str]:
    """The model's config.json fields (local folder first, then `BUILTIN_MODEL_CONFIGS`) and where they came from."""
    local = Path(model_name_or_path) / "config.json"
    if local.is_file():
        return json.loads(local.read_text()), str(local)
    if model_name_or_path in BUILTIN_MODEL_CONFIGS:
        return dict(BUILTIN_MODEL_CONFIGS[model_name_or_path]), "drgrpo.planner.BUILTIN_MODEL_CONFIGS"
    return None, ""


def model_size(config: dict[str, Any], source: str) -> ModelSize:
    total, largest = count_parameters(config)
    return ModelSize(total, largest, config.get("max_position_embeddings"), source)


# ----------------------------------------------------------------------------------------------------------------------
# Memory (DeepSpeed's estimators)
# ----------------------------------------------------------------------------------------------------------------------
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


# ----------------------------------------------------------------------------------------------------------------------
# Recipe-level checks
# ----------------------------------------------------------------------------------------------------------------------
def context_findings(
    max_prompt_tokens: int | None,
    max_completion_length: int,
    context_length: int | None,
    vllm_max_model_length: int | None,
) -> list[Finding]:
    """Does the longest prompt plus the longest completion fit the model (and vLLM's max_model_len)?"""
    findings = []
    if max_prompt_tokens is None:
        findings.append(
            Finding(
                "warning",
                "max_prompt_tokens",
                "Prompt length is not bounded, so prompt + completion cannot be checked against the context.",
                "set max_prompt_tokens (longer prompts are dropped and counted at start-up).",
            )
        )
        return findings
    needed = max_prompt_tokens + max_completion_length
    for limit, name in ((context_length, "the model's context"), (vllm_max_model_length, "vllm_max_model_length")):
        if limit is not None and needed > limit:
            findings.append(
                Finding(
                    "error",
                    "max_completion_length",
                    f"max_prompt_tokens {max_prompt_tokens} + max_completion_length {max_completion_length} = "
                    f"{needed} tokens exceed {name} ({limit}).",
                    f"lower max_completion_length to {limit - max_prompt_tokens} or max_prompt_tokens to "
                    f"{limit - max_completion_length}"
                    + (" (or raise vllm_max_model_length)." if name == "vllm_max_model_length" else "."),
                )
            )
    if vllm_max_model_length is not None and context_length is not None and vllm_max_model_length > context_length:
        findings.append(
            Finding(
                "error",
                "vllm_max_model_length",
                f"vllm_max_model_length {vllm_max_model_length} exceeds the model's context ({context_length}).",
                f"set vllm_max_model_length to at most {context_length}.",
            )
        )
    return findings


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
    """World size, ZeRO stage and CPU-ness stated in the recipe's leading comment block."""
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


# While parsing, TRL checks the batch keys against the *current* world size (one CPU process here), which says nothing
# about the target world size and can reject a recipe that is right for it. They are parsed with these stand-ins,
# which pass at any world size, and the recipe's own values are checked for the target world size by `batch_plan`.
NEUTRAL_BATCH = {
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "num_generations": 2,
    "num_generations_eval": 2,
    "per_device_eval_batch_size": 2,
}
BATCH_KEYS = (*NEUTRAL_BATCH, "generation_batch_size", "steps_per_generation")


def parse_for_planning(recipe: str | Path, overrides: Sequence[str] = ()) -> tuple[Any, Any, Any, dict[str, Any]]:
    """`parse_recipe` on CPU for any target world size: (script args, trainer args, model args, batch values).

    The trainer args hold `NEUTRAL_BATCH` stand-ins; the batch values are the recipe's (None where it sets none and
    TRL derives the value).
    """
    from drgrpo.cli import parse_recipe
    from drgrpo.config import DrGRPOConfig

    values = recipe_values(recipe, overrides)
    neutral = [token for key, value in NEUTRAL_BATCH.items() for token in (f"--{key}", str(value))]
    if "generation_batch_size" in values:
        neutral += ["--generation_batch_size", "2"]
    elif "steps_per_generation" in values:
        neutral += ["--steps_per_generation", "1"]
    script_args, args, model_args = parse_recipe([str(recipe), "--use_cpu", "true", *overrides, *neutral])
    defaults = {f.name: f.default for f in dataclasses.fields(DrGRPOConfig)}
    batch = {key: values.get(key, defaults[key]) for key in BATCH_KEYS}
    return script_args, args, model_args, batch


@dataclass
class PlanReport:
    recipe: str
    setup: LaunchSetup
    batch: BatchPlan | None = None
    size: ModelSize | None = None
    trainable_params: int | None = None
    memory: dict[int, MemoryEstimate] = field(default_factory=dict)
    vllm_bytes: int = 0
    gpu_memory_bytes: int = int(DEFAULT_GPU_MEMORY_GIB * GIB)
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors


def plan_recipe(
    recipe: str | Path,
    *,
    num_processes: int | None = None,
    accelerate_config: str | Path | None = None,
    gpu_memory_gib: float = DEFAULT_GPU_MEMORY_GIB,
    overrides: Sequence[str] = (),
    num_nodes: int | None = None,
) -> PlanReport:
    """Check `recipe` (plus command-line `overrides`) for a run with `num_processes` training processes.

    The world size comes from `num_processes`, else the accelerate config's `num_processes`, else the recipe header's
    "World size: N" (as `accelerate launch` flags override its config file). The ZeRO stage and offload settings come
    from the accelerate config, else the header ("ZeRO-3"). `num_nodes` defaults to the config's, else to nodes of
    8 GPUs. Nothing is downloaded and no GPU is touched.
    """
    recipe = str(recipe)
    header = read_header(recipe)
    findings: list[Finding] = []
    if accelerate_config is not None:
        setup = read_accelerate_config(accelerate_config)
        world = num_processes or setup.world_size
        nodes = num_nodes or (setup.num_nodes if world == setup.world_size else _nodes_for(world))
        setup = replace(setup, world_size=world, num_nodes=nodes, gpus_per_node=max(1, world // nodes))
    else:
        world = num_processes or header["world_size"]
        if world is None:
            raise ValueError(
                f"{recipe} states no world size: add '# World size: N GPUs' to its header comment, or pass "
                "--num_processes N (or --accelerate_config FILE)."
            )
        nodes = 1 if header["cpu"] else num_nodes or _nodes_for(world)
        setup = LaunchSetup(
            world_size=world,
            num_nodes=nodes,
            gpus_per_node=max(1, world // nodes),
            zero_stage=header["zero_stage"],
            on_gpu=not header["cpu"],
        )
    script_args, args, model_args, batch = parse_for_planning(recipe, overrides)
    explicit = set(recipe_values(recipe, overrides))
    report = PlanReport(recipe=recipe, setup=setup, gpu_memory_bytes=int(gpu_memory_gib * GIB), findings=findings)

    report.batch, batch_findings = batch_plan(
        setup.world_size,
        batch["per_device_train_batch_size"],
        batch["gradient_accumulation_steps"],
        batch["num_generations"],
        steps_per_generation=batch["steps_per_generation"],
        generation_batch_size=batch["generation_batch_size"],
        num_iterations=args.num_iterations,
    )
    findings.extend(batch_findings)
    findings.extend(_world_size_findings(recipe, header["world_size"], report.batch))
    if args.eval_strategy != "no":
        eval_generations = batch["num_generations_eval"] or batch["num_generations"]
        eval_batch = batch["per_device_eval_batch_size"] * setup.world_size
        if eval_batch % eval_generations:
            findings.append(
                Finding(
                    "error",
                    "per_device_eval_batch_size",
                    f"The eval batch ({batch['per_device_eval_batch_size']} x {setup.world_size} processes = "
                    f"{eval_batch}) "
                    f"is not a multiple of {eval_generations} generations per prompt; TRL refuses to start.",
                    "set per_device_eval_batch_size to a multiple of "
                    f"{per_device_multiple(eval_generations, setup.world_size)}.",
                )
            )

    config, source = load_model_config(model_args.model_name_or_path)
    if config is not None and config.get("model_type") in LLAMA_LAYOUT_TYPES:
        report.size = model_size(config, source)
    elif setup.on_gpu:
        findings.append(
            Finding(
                "error",
                "model_name_or_path",
                f"Cannot size {model_args.model_name_or_path!r}: "
                + (
                    f"model_type {config.get('model_type')!r} is not one the planner counts."
                    if config is not None
                    else "no local config.json and not in the planner's built-in table."
                ),
                "point model_name_or_path at a local folder holding the model's config.json, or add the model's "
                "config fields to drgrpo.planner.BUILTIN_MODEL_CONFIGS.",
            )
        )
    else:
        findings.append(
            Finding(
                "warning",
                "model_name_or_path",
                f"{model_args.model_name_or_path!r} has no config.json yet (`make demo` builds it): context unchecked.",
                "build the model first to check the context as well.",
            )
        )

    context = report.size.context_length if report.size else None
    findings.extend(
        context_findings(script_args.max_prompt_tokens, args.max_completion_length, context, args.vllm_max_model_length)
    )
    findings.extend(_generation_findings(args, setup, explicit))

    if report.size is not None and config is not None:
        if model_args.use_peft:
            try:
                report.trainable_params = lora_parameters(config, model_args.lora_r, model_args.lora_target_modules)
            except ValueError as error:
                findings.append(Finding("error", "lora_target_modules", str(error), "fix lora_target_modules."))
        if setup.on_gpu:
            for stage in (0, 2, 3) if setup.zero_stage == 0 else (2, 3):
                report.memory[stage] = model_states_memory(
                    stage,
                    report.size,
                    setup.gpus_per_node,
                    setup.num_nodes,
                    adapter_params=report.trainable_params,
                    offload_optimizer=setup.offload_optimizer and stage == setup.zero_stage,
                    offload_params=setup.offload_params and stage == setup.zero_stage == 3,
                )
            if args.use_vllm and args.vllm_mode == "colocate":
                report.vllm_bytes = int(args.vllm_gpu_memory_utilization * report.gpu_memory_bytes)
            findings.extend(_memory_findings(report, args))
    return report


def _world_size_findings(recipe: str, header_world_size: int | None, plan: BatchPlan | None) -> list[Finding]:
    """A warning when this world size changes the optimizer-step batch the recipe was written for (its header's
    world size with the file's own batch keys); none when the overrides keep it."""
    if header_world_size is None or plan is None or header_world_size == plan.world_size:
        return []
    from drgrpo.config import DrGRPOConfig

    values = recipe_values(recipe)
    defaults = {f.name: f.default for f in dataclasses.fields(DrGRPOConfig)}
    per_device = values.get("per_device_train_batch_size", defaults["per_device_train_batch_size"])
    accumulation = values.get("gradient_accumulation_steps", defaults["gradient_accumulation_steps"])
    written = per_device * header_world_size * accumulation
    if plan.completions_per_step == written:
        return []
    return [
        Finding(
            "warning",
            "world size",
            f"The recipe is written for world size {header_world_size} (its header): {written} completions per "
            f"optimizer step; at {plan.world_size} processes it takes {plan.completions_per_step}.",
            f"keep the recipe's batch by scaling gradient_accumulation_steps (or per_device_train_batch_size) by "
            f"{header_world_size}/{plan.world_size} on the command line.",
        )
    ]


def _generation_findings(args, setup: LaunchSetup, explicit: set[str]) -> list[Finding]:
    """vLLM and ZeRO-3 settings that must agree with each other and with the world size."""
    findings = []
    zero3 = setup.zero_stage == 3
    if zero3 and not args.ds3_gather_for_generation:
        if args.use_vllm:
            findings.append(
                Finding(
                    "error",
                    "ds3_gather_for_generation",
                    "ds3_gather_for_generation is off under ZeRO-3 with vLLM: TRL cannot push the sharded weights "
                    "to vLLM without gathering them.",
                    "set ds3_gather_for_generation: true.",
                )
            )
        else:
            findings.append(
                Finding(
                    "warning",
                    "ds3_gather_for_generation",
                    "ds3_gather_for_generation is off under ZeRO-3: every decoding step all-gathers the weights "
                    "(hours per step for an 8B model).",
                    "set ds3_gather_for_generation: true unless the model cannot fit whole on one GPU.",
                )
            )
    if not args.use_vllm:
        return findings
    if not setup.on_gpu:
        findings.append(
            Finding(
                "error",
                "use_vllm",
                "vLLM generation needs GPUs, and this plan is for CPU processes.",
                "set use_vllm: false for a CPU run, or plan with a GPU accelerate config.",
            )
        )
    if "vllm_importance_sampling_correction" not in explicit:
        findings.append(
            Finding(
                "error",
                "vllm_importance_sampling_correction",
                "With vLLM, TRL multiplies each token's loss by a vLLM-vs-trainer importance-sampling weight unless "
                "told otherwise; the recipe leaves that choice to TRL's default, which has changed between releases.",
                "set vllm_importance_sampling_correction: true or false explicitly, with the reason in a comment.",
            )
        )
    if args.vllm_mode == "colocate":
        if setup.world_size % args.vllm_tensor_parallel_size:
            findings.append(
                Finding(
                    "error",
                    "vllm_tensor_parallel_size",
                    f"vllm_tensor_parallel_size {args.vllm_tensor_parallel_size} does not divide the world size "
                    f"{setup.world_size}; TRL refuses to start colocated vLLM.",
                    f"set vllm_tensor_parallel_size to a divisor of {setup.world_size}.",
                )
            )
        if not 0 < args.vllm_gpu_memory_utilization < 1:
            findings.append(
                Finding(
                    "error",
                    "vllm_gpu_memory_utilization",
                    f"vllm_gpu_memory_utilization {args.vllm_gpu_memory_utilization} leaves nothing for training on "
                    "the shared GPUs.",
                    "set it between 0 and 1 (0.3 leaves ~70% of each GPU to ZeRO-3).",
                )
            )
    return findings


def _memory_findings(report: PlanReport, args) -> list[Finding]:
    stage = report.setup.zero_stage
    if stage not in report.memory:
        return []
    states = report.memory[stage].gpu_bytes
    used = states + report.vllm_bytes
    if used < report.gpu_memory_bytes:
        return []
    vllm = f" + {report.vllm_bytes / GIB:.1f} GiB for colocated vLLM" if report.vllm_bytes else ""
    return [
        Finding(
            "error",
            "memory",
            f"{'DDP' if stage == 0 else f'ZeRO-{stage}'} model states need {states / GIB:.1f} GiB per GPU{vllm}, "
            f"more than the {report.gpu_memory_bytes / GIB:.0f} GiB of one GPU, before any activation.",
            ("shard the model states with accelerate_configs/zero3.yaml, or " if stage < 3 else "")
            + "use more GPUs, accelerate_configs/zero3_offload.yaml (optimizer and parameters in CPU memory), LoRA "
            "(use_peft: true)" + (", or a lower vllm_gpu_memory_utilization." if report.vllm_bytes else "."),
        )
    ]


# ----------------------------------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------------------------------
def _fraction(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.3g} ({value})"


def format_report(report: PlanReport) -> str:
    """The plan as the lines `scripts/plan.py` prints."""
    setup = report.setup
    where = "CPU" if not setup.on_gpu else f"{setup.num_nodes} node(s) x {setup.gpus_per_node} GPU(s)"
    stage = {None: "", 0: ", DDP"}.get(setup.zero_stage, f", ZeRO-{setup.zero_stage}")
    lines = [f"Recipe {report.recipe}: {setup.world_size} training process(es), {where}{stage} ({setup.source})"]
    batch = report.batch
    if batch is not None:
        lines += [
            "Batch:",
            f"  per optimizer step:    {_fraction(batch.prompts_per_step)} prompts x {batch.num_generations} = "
            f"{batch.completions_per_step} completions",
            f"  per generation round:  {_fraction(batch.prompts_per_round)} prompts x {batch.num_generations} = "
            f"{batch.completions_per_round} completions",
            f"  optimizer steps per generation round: {_fraction(batch.optimizer_steps_per_round)} "
            f"(steps_per_generation {batch.steps_per_generation}, num_iterations {batch.num_iterations}, "
            f"gradient_accumulation_steps {batch.gradient_accumulation_steps})",
        ]
    if report.size is not None:
        size = report.size
        lines.append(
            f"Model: {size.total_params / 1e9:.3f}B parameters (largest module {size.largest_layer_params / 1e6:.1f}M),"
            " "
            f"context {size.context_length} [{size.source}]"
        )
        if report.trainable_params is not None:
            lines.append(f"  LoRA: {report.trainable_params / 1e6:.1f}M trainable parameters")
    if report.memory:
        lines.append(
            "Model-state memory per GPU (DeepSpeed estimators; weights, gradients, Adam states; no activations):"
        )
        for stage_number, estimate in sorted(report.memory.items()):
            mark = "  <- this run" if stage_number == setup.zero_stage else ""
            name = f"ZeRO-{stage_number}" if stage_number else "DDP   "
            lines.append(
                f"  {name}: {estimate.gpu_bytes / GIB:6.1f} GiB GPU, {estimate.cpu_bytes / GIB:6.1f} GiB "
                f"CPU per node{mark}"
            )
        if report.vllm_bytes:
            lines.append(f"  colocated vLLM: {report.vllm_bytes / GIB:.1f} GiB per GPU (vllm_gpu_memory_utilization)")
        if setup.zero_stage in report.memory:
            left = report.gpu_memory_bytes - report.memory[setup.zero_stage].gpu_bytes - report.vllm_bytes
            lines.append(
                f"  left for activations on a {report.gpu_memory_bytes / GIB:.0f} GiB GPU: {left / GIB:.1f} GiB"
            )
    for finding in report.findings:
        lines.append(str(finding))
    lines.append("OK" if report.ok else f"{len(report.errors)} error(s)")
    return "\n".join(lines)
