"""The plan of one recipe at one world size: batch, context, memory and vLLM/ZeRO-3 checks, as one `PlanReport`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from drgrpo.planning.activations import LLAMA_LAYOUT_TYPES, training_activations
from drgrpo.planning.batch import BatchPlan, batch_plan
from drgrpo.planning.context import context_findings
from drgrpo.planning.family_cost import DynamicSamplingPlan, dynamic_sampling_plan, family_findings
from drgrpo.planning.findings import Finding
from drgrpo.planning.gpu_budget import GpuBudget, budget_findings, vllm_findings
from drgrpo.planning.kv_cache import vllm_memory
from drgrpo.planning.launch_setup import LaunchSetup, nodes_for, read_accelerate_config
from drgrpo.planning.memory import DEFAULT_GPU_MEMORY_GIB, GIB, MemoryEstimate, model_states_memory
from drgrpo.planning.model_size import (
    ModelSize,
    load_model_config,
    meta_model,
    model_size,
    trainable_parameters,
    with_defaults,
)
from drgrpo.planning.reference import REFERENCE_SCHEDULES, ReferenceSchedule, reference_findings
from drgrpo.recipe.batch_rules import eval_batch_problem, keep_schedule_fix
from drgrpo.recipe.file import read_header
from drgrpo.recipe.preflight import parse_for_planning, recipe_values
from drgrpo.run.precision import needs_master_weights


@dataclass
class PlanReport:
    recipe: str
    setup: LaunchSetup
    batch: BatchPlan | None = None
    reference: ReferenceSchedule | None = None  # the published run the recipe reproduces, if its header names one
    size: ModelSize | None = None
    trainable_params: int | None = None
    memory: dict[int, MemoryEstimate] = field(default_factory=dict)
    budget: GpuBudget | None = None  # one GPU's memory in generation and training, term by term
    master_weights: str | None = None  # the half-precision dtype train() keeps float32 copies of (no DeepSpeed)
    gpu_memory_bytes: int = int(DEFAULT_GPU_MEMORY_GIB * GIB)
    findings: list[Finding] = field(default_factory=list)
    dynamic_sampling: DynamicSamplingPlan | None = None  # the extra generation `dynamic_sampling: true` implies

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
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"--num_processes must be 1 or more (training processes), got {num_processes}.")
    if accelerate_config is not None:
        setup = read_accelerate_config(accelerate_config)
        if setup.world_size < 1:
            raise ValueError(f"{accelerate_config}: num_processes must be 1 or more, got {setup.world_size}.")
        world = num_processes if num_processes is not None else setup.world_size
        nodes = num_nodes or (setup.num_nodes if world == setup.world_size else nodes_for(world))
        source = f"accelerate config {accelerate_config}"
        if num_processes is not None:
            source = f"world size from --num_processes, the rest from {source}"
        setup = replace(setup, world_size=world, num_nodes=nodes, gpus_per_node=max(1, world // nodes), source=source)
    else:
        world = num_processes if num_processes is not None else header["world_size"]
        if not world:
            stated = "states no world size" if world is None else "states world size 0"
            raise ValueError(
                f"{recipe} {stated}: add '# World size: N GPUs' to its header comment, or pass "
                "--num_processes N (or --accelerate_config FILE)."
            )
        nodes = 1 if header["cpu"] else num_nodes or nodes_for(world)
        setup = LaunchSetup(
            world_size=world,
            num_nodes=nodes,
            gpus_per_node=max(1, world // nodes),
            zero_stage=header["zero_stage"],
            on_gpu=not header["cpu"],
            source="recipe header"
            if num_processes is None
            else "world size from --num_processes, the rest from the recipe header",
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
    if args.dynamic_sampling and report.batch is not None:
        report.dynamic_sampling = dynamic_sampling_plan(
            report.batch, args.dynamic_sampling_max_rounds, getattr(args, "dynamic_sampling_exhausted", None)
        )
    findings.extend(family_findings(args))
    findings.extend(_world_size_findings(recipe, header["world_size"], report.batch, batch))
    findings.extend(_reference_findings(report, header["reproduces"]))
    if args.eval_strategy != "no":
        eval_generations = batch["num_generations_eval"] or batch["num_generations"]
        problem = eval_batch_problem(batch["per_device_eval_batch_size"], setup.world_size, eval_generations)
        if problem is not None:
            findings.append(Finding("error", "per_device_eval_batch_size", *problem))

    config, source = load_model_config(model_args.model_name_or_path)
    model, unbuilt = None, "no local config.json, none in the Hugging Face cache, and not in the planner's table"
    if config is not None:
        try:
            model = meta_model(config)  # parameters on the meta device: shapes only, no weights
        except Exception as error:  # an unknown model_type, none, no causal LM for it, or fields it refuses
            detail = "" if isinstance(error, (ValueError, TypeError)) else f" ({type(error).__name__}: {error})"
            unbuilt = f"transformers builds no causal LM for model_type {config.get('model_type')!r}{detail}"
    if model is not None:
        report.size = model_size(model, source)
    elif config is not None:  # a config transformers cannot build: training could not load it either (on GPUs)
        findings.append(
            Finding(
                "error" if setup.on_gpu else "warning",
                "model_name_or_path",
                f"Cannot size {model_args.model_name_or_path!r}: {unbuilt}.",
                "point model_name_or_path at a local folder holding the model's config.json, or add the model's "
                "config fields to drgrpo.planning.model_size.BUILTIN_MODEL_CONFIGS.",
            )
        )
    elif setup.on_gpu:  # on CPU, a model not built yet only leaves the context unchecked (below)
        # A warning, not an error: the recipe may be right, the planner only has no config.json of the model here (a
        # hub model offline); the batch, family and generation checks above and below still run.
        name = model_args.model_name_or_path
        findings.append(
            Finding(
                "warning",
                "model_name_or_path",
                f"Cannot size {name!r} here ({unbuilt}): its context and the memory per GPU are not checked.",
                f"`hf download {name} config.json` (one small file, into the cache the planner reads), or point "
                "model_name_or_path at a local folder holding the model's config.json.",
            )
        )
    else:
        findings.append(
            Finding(
                "warning",
                "model_name_or_path",
                f"{model_args.model_name_or_path!r} has no config.json yet (`make demo-tiny`, `make smollm2` build the "
                "CPU demos' models): context unchecked.",
                "build the model first to check the context as well.",
            )
        )

    context = report.size.context_length if report.size else None
    findings.extend(
        context_findings(script_args.max_prompt_tokens, args.max_completion_length, context, args.vllm_max_model_length)
    )
    findings.extend(_generation_findings(args, setup, explicit))

    if model is not None:
        if model_args.use_peft:
            from trl import get_peft_config

            try:  # the LoRA config training builds (drgrpo/run/training.py)
                report.trainable_params = trainable_parameters(model, get_peft_config(model_args))
            except ValueError as error:
                fix = "fix lora_target_modules (one name alone is a regex over the full module name: '.*q_proj')."
                findings.append(Finding("error", "lora_target_modules", str(error), fix))
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
            dtype = model_args.dtype if model_args.dtype not in (None, "auto") else config.get("dtype")
            if report.trainable_params is None and needs_master_weights(dtype, deepspeed=bool(setup.zero_stage)):
                report.master_weights = dtype
            if config.get("model_type") in LLAMA_LAYOUT_TYPES:
                report.budget = _gpu_budget(report, args, script_args.max_prompt_tokens, config, dtype)
            else:  # activations and vLLM's KV cache follow the Llama layout's modules (activations.py)
                why = f"model_type {config['model_type']!r}: activations and KV cache are counted for the Llama layout"
                fix = "measure one training step's peak memory on a GPU (torch.cuda.max_memory_allocated)."
                findings.append(Finding("warning", "memory", f"{why} only; above: model states alone.", fix))
            findings.extend(_memory_findings(report, model_args.model_name_or_path, args))
    return report


def _reference_findings(report: PlanReport, reproduces: str | None) -> list[Finding]:
    """Set `report.reference` from the header's "Paper reproduction: NAME" and compare the schedules."""
    if reproduces is None:
        return []
    report.reference = REFERENCE_SCHEDULES.get(reproduces)
    if report.reference is None:
        return [
            Finding(
                "warning",
                "schedule",
                f"The header says the recipe reproduces {reproduces!r}, a run the planner has no schedule for "
                f"(known: {', '.join(sorted(REFERENCE_SCHEDULES))}).",
                "add its schedule to drgrpo.planning.reference.REFERENCE_SCHEDULES.",
            )
        ]
    return reference_findings(report.batch, report.reference) if report.batch is not None else []


def _world_size_findings(
    recipe: str, header_world_size: int | None, plan: BatchPlan | None, batch: dict
) -> list[Finding]:
    """A warning when this world size changes the schedule the recipe was written for (its header's world size with
    the file's own batch keys): completions per optimizer step or per rollout; none when the overrides keep both."""
    if header_world_size is None or plan is None or header_world_size == plan.world_size:
        return []
    from drgrpo.algorithm.config import DrGRPOConfig

    values = recipe_values(recipe)
    defaults = {f.name: f.default for f in dataclasses.fields(DrGRPOConfig)}
    per_device = values.get("per_device_train_batch_size", defaults["per_device_train_batch_size"])
    accumulation = values.get("gradient_accumulation_steps", defaults["gradient_accumulation_steps"])
    written_step = per_device * header_world_size * accumulation
    if values.get("generation_batch_size") is not None:
        written_rollout = values["generation_batch_size"]
    else:
        written_rollout = per_device * header_world_size * values.get("steps_per_generation", accumulation)
    if (plan.completions_per_step, plan.completions_per_round) == (written_step, written_rollout):
        return []
    return [
        Finding(
            "warning",
            "world size",
            f"The recipe is written for world size {header_world_size} (its header): {written_step} completions per "
            f"optimizer step, {written_rollout} per rollout; at {plan.world_size} processes it takes "
            f"{plan.completions_per_step} and {plan.completions_per_round}.",
            keep_schedule_fix(
                per_device,
                written_step,
                written_rollout,
                plan.world_size,
                num_generations=plan.num_generations,
                generation_batch_size=batch["generation_batch_size"],
            ),
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


def _sequence_length(max_prompt_tokens: int | None, args, context: int | None) -> int | None:
    """The longest training sequence: prompt + completion, capped by vLLM's max_model_len and the model's context."""
    longest = max_prompt_tokens + args.max_completion_length if max_prompt_tokens is not None else None
    limits = [x for x in (longest, args.vllm_max_model_length, context) if x]
    return min(limits) if limits else None


def _gpu_budget(report: PlanReport, args, max_prompt_tokens: int | None, config: dict, dtype) -> GpuBudget | None:
    """The run's GPU memory, term by term: model states of its stage, colocated vLLM, the micro-batch's activations."""
    stage = report.setup.zero_stage
    if stage not in report.memory or report.size is None or report.batch is None:
        return None
    full = with_defaults(config)
    length = _sequence_length(max_prompt_tokens, args, report.size.context_length)
    micro_batch = report.batch.per_device_train_batch_size  # the recipe's (args holds the pre-flight stand-ins)
    activations = None
    if length is not None:
        scored = micro_batch * min(args.max_completion_length, length)
        act_bytes = 2 if args.bf16 or args.fp16 else 4
        activations = training_activations(full, micro_batch, length, scored, act_bytes=act_bytes)
    vllm = None
    if args.use_vllm and args.vllm_mode == "colocate" and length is not None:
        tp = args.vllm_tensor_parallel_size
        vllm = vllm_memory(
            full,
            report.size.total_params,
            utilization=args.vllm_gpu_memory_utilization,
            gpu_bytes=report.gpu_memory_bytes,
            max_model_len=args.vllm_max_model_length or report.size.context_length or length,
            max_num_seqs=micro_batch * tp * report.batch.steps_per_generation,  # TRL's max_num_seqs
            tensor_parallel=tp,
            dtype_bytes=4 if str(dtype).removeprefix("torch.") == "float32" else 2,
        )
    return GpuBudget(
        gpu_bytes=report.gpu_memory_bytes,
        states=report.memory[stage].gpu_bytes,
        stage_name="DDP" if stage == 0 else f"ZeRO-{stage}",
        activations=activations,
        gradient_checkpointing=bool(args.gradient_checkpointing),
        vllm=vllm,
        sleep_mode=bool(args.vllm_enable_sleep_mode),
    )


def _memory_findings(report: PlanReport, model: str, args) -> list[Finding]:
    """Model states alone over the GPU; else vLLM that cannot start or is KV-bound, and each phase over the GPU."""
    stage, budget = report.setup.zero_stage, report.budget
    if stage not in report.memory:
        return []
    states = report.memory[stage].gpu_bytes
    if states >= report.gpu_memory_bytes:
        return [
            Finding(
                "error",
                "memory",
                f"{'DDP' if stage == 0 else f'ZeRO-{stage}'} model states need {states / GIB:.1f} GiB per GPU, "
                f"more than the {report.gpu_memory_bytes / GIB:.0f} GiB of one GPU, before any activation.",
                ("shard the model states with accelerate_configs/zero3.yaml, or " if stage < 3 else "")
                + "use more GPUs, accelerate_configs/zero3_offload.yaml (optimizer and parameters in CPU memory), "
                "or LoRA (use_peft: true).",
            )
        ]
    if budget is None:
        return []
    findings = []
    if budget.vllm is not None:
        requests = (
            f"per_device_train_batch_size {report.batch.per_device_train_batch_size} x steps_per_generation "
            f"{report.batch.steps_per_generation} x vllm_tensor_parallel_size {args.vllm_tensor_parallel_size}"
        )
        findings.extend(vllm_findings(budget.vllm, budget.gpu_bytes, model, requests))
    fix = (
        "a smaller per_device_train_batch_size (raise gradient_accumulation_steps to keep the step), more GPUs, or "
        "accelerate_configs/zero3_offload.yaml"
    )
    return findings + budget_findings(budget, fix)
