"""The plan as the lines `scripts/plan.py` prints."""

from __future__ import annotations

from fractions import Fraction

from drgrpo.planning.batch import BatchPlan
from drgrpo.planning.family_cost import dynamic_sampling_lines
from drgrpo.planning.gpu_budget import budget_lines
from drgrpo.planning.memory import GIB
from drgrpo.planning.plan import PlanReport
from drgrpo.planning.reference import ReferenceSchedule


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
            f"  per rollout:           {_fraction(batch.prompts_per_round)} prompts x {batch.num_generations} = "
            f"{batch.completions_per_round} completions (one generation round)",
            f"  optimizer steps per rollout: {_fraction(batch.optimizer_steps_per_round)} "
            f"(steps_per_generation {batch.steps_per_generation} x num_iterations {batch.num_iterations} / "
            f"gradient_accumulation_steps {batch.gradient_accumulation_steps})",
        ]
        if batch.gradient_accumulation_steps % batch.steps_per_generation:
            # Not a whole number of rounds per step: TRL shuffles the round before cutting it (`_prepare_inputs`).
            lines.append(
                "  each optimizer step: a random share of the rollout (TRL shuffles it before cutting it into "
                "micro-batches; advantages are computed over the whole rollout first)"
            )
        if report.reference is not None:
            lines += _reference_lines(batch, report.reference)
        if report.dynamic_sampling is not None:
            lines += dynamic_sampling_lines(report.dynamic_sampling)
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
        if report.master_weights:
            lines.append(
                f"  master weights: dtype {report.master_weights} without DeepSpeed: train() trains float32 copies of "
                "the weights (drgrpo/run/precision.py); DeepSpeed's DDP estimate above counts float32 master weights"
            )
    if report.budget is not None:
        lines += budget_lines(report.budget)
    for finding in report.findings:
        lines.append(str(finding))
    lines.append("OK" if report.ok else f"{len(report.errors)} error(s)")
    return "\n".join(lines)


def _reference_lines(batch: BatchPlan, reference: ReferenceSchedule) -> list[str]:
    """The reproduced run's schedule beside the recipe's, one quantity a line."""
    rows = [
        ("prompts x samples per rollout", f"{_fraction(batch.prompts_per_round)} x {batch.num_generations}",
         f"{reference.prompts_per_rollout} x {reference.num_generations}"),
        ("completions per optimizer step", str(batch.completions_per_step), str(reference.completions_per_step)),
        ("optimizer steps per rollout", _fraction(batch.optimizer_steps_per_round),
         _fraction(reference.optimizer_steps_per_rollout)),
        ("passes over a rollout", str(batch.num_iterations), str(reference.num_iterations)),
    ]  # fmt: skip
    lines = [
        f"Schedule beside the paper's run, {reference.name} ({reference.source}):",
        f"  {'':32}{'ours':>10}{'paper':>10}",
    ]
    for what, ours, paper in rows:
        lines.append(f"  {what:32}{ours:>10}{paper:>10}{'' if ours == paper else '  <- differs'}")
    return lines
