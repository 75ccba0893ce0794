"""`make demo-tools`: SmolLM2-135M-Instruct trained with Dr.GRPO and the Python tool on products it cannot work out in
its head, evaluated on held-out problems before and after, with the tool (call budget B=4) and without it (B=0).

Stages, all seeded by `--seed` (the task split and the training seed):
1. the task (`drgrpo.experiments.product_task`): `What is 4821 * 317? ...`, held-out operands disjoint from training;
2. greedy held-out accuracy of the prepared model at B=0 and B=4, by the project's evaluator, with the recipe's
   one-shot demonstration (`chat_examples`) and tool settings, graded on the model's own text (an answer cut by the
   budget, or ended by the call budget, counts wrong, as `zero_reward_for_truncated` scores it in training);
3. Dr.GRPO with `recipes/smollm2_135m_drgrpo_tools.yaml` (`python_tool: true`) through `parse_recipe` + `train`;
4. the same two evaluations after training; `summary.json`, the curves and every sample's turns in `output_dir`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from drgrpo.experiments.product_task import write_product_task
from drgrpo.experiments.smollm2_demo import cpu_seconds, peak_rss_gb, strict_accuracy

BUDGETS = (0, 4)  # the call budgets evaluated: no tool, and the recipe's


@dataclass
class ToolDemoSettings:
    """What `make demo-tools` trains and evaluates, and where it writes."""

    output_dir: str = "outputs/demo-tools"
    recipe: str = "recipes/smollm2_135m_drgrpo_tools.yaml"
    seed: int = 0
    num_train: int = 2000
    num_test: int = 100
    eval_batch_size: int = 50
    rl_overrides: tuple[str, ...] = ()


def held_out(
    model: str, recipe: str, test_file: Path, output_dir: Path, budget: int, calls: int, batch: int, bf16: bool
) -> dict:
    """Greedy held-out evaluation at call budget `calls` (0: no tool), with the recipe's prompt and tool settings, in
    training's precision (`bf16`: float32 weights under bf16 autocast; else float32)."""
    from drgrpo.evaluation import evaluate
    from drgrpo.evaluation.backends import training_precision_dtype

    summary = evaluate(
        model_path=model,
        data_file=str(test_file),
        question_column="question",
        answer_column="answer",
        recipe=recipe,
        n=1,
        temperature=0.0,
        max_new_tokens=budget,
        output_dir=str(output_dir),
        batch_size=batch,
        dtype=training_precision_dtype(bf16),
        overwrite=True,  # the demo retrains each run: never resume from an earlier run's samples
        progress=False,
        tool_max_calls=calls,
        truncated_as_wrong=True,  # the paper's rule, as the recipe's zero_reward_for_truncated in training
    )
    summary["strict_pass@1"] = strict_accuracy(output_dir / "samples.jsonl", truncated_as_wrong=True)
    return summary


def _percent(value: float) -> float:
    return round(100 * value, 1)


def run_tools_demo(settings: ToolDemoSettings) -> dict:
    """Every stage; writes `summary.json` and `curves.png` under `settings.output_dir` and returns the summary."""
    from drgrpo.core.models import resolve_model
    from drgrpo.observe.plotting import plot_runs
    from drgrpo.recipe.cli import parse_recipe
    from drgrpo.run.training import train

    start = time.perf_counter()
    load_start = os.getloadavg()
    out = Path(settings.output_dir)
    data = write_product_task(
        out / "data", num_train=settings.num_train, num_test=settings.num_test, seed=settings.seed
    )
    overrides = [
        "--dataset_path", str(data["train"]),
        "--output_dir", str(out / "model"),
        "--seed", str(settings.seed),
        "--overwrite_output_dir", "true",  # the demo retrains each run; only the demo writes here
        *settings.rl_overrides,
    ]  # fmt: skip
    script_args, training_args, model_args = parse_recipe([settings.recipe, *overrides])
    resolve_model(model_args.model_name_or_path)  # not prepared: one line naming `make smollm2`, before any work
    budget = training_args.max_completion_length

    def evaluate_all(model: str, stage: str) -> dict[int, dict]:
        return {
            calls: held_out(
                model,
                settings.recipe,
                data["test"],
                out / "eval" / f"{stage}-B{calls}",
                budget,
                calls,
                settings.eval_batch_size,
                bool(training_args.bf16),
            )  # fmt: skip
            for calls in BUDGETS
        }

    before = evaluate_all(model_args.model_name_or_path, "before")
    train_start = time.perf_counter()
    trainer = train(script_args, training_args, model_args)
    train_seconds = time.perf_counter() - train_start
    after = evaluate_all(str(out / "model"), "after")
    plot_runs({"Dr.GRPO + tool": trainer.state.log_history}, out / "curves.png", title="SmolLM2-135M, Python tool")

    summary = {
        "model": model_args.model_name_or_path,
        "recipe": settings.recipe,
        "seed": settings.seed,
        "held_out_problems": before[0]["num_problems"],
        "train_steps": trainer.state.global_step,
        "train_seconds": round(train_seconds, 1),
        "seconds": round(time.perf_counter() - start, 1),
        "cpu_seconds": round(cpu_seconds(), 1),
        "peak_rss_gb": round(peak_rss_gb(), 2),
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "algorithm": training_args.algorithm_summary,
        "overrides": list(settings.rl_overrides),
    }
    for calls in BUDGETS:
        for stage, result in (("before", before[calls]), ("after", after[calls])):
            summary[f"accuracy_{stage}_B{calls}"] = _percent(result["pass@1"])
            summary[f"strict_accuracy_{stage}_B{calls}"] = _percent(result["strict_pass@1"])
            summary[f"truncated_{stage}_B{calls}"] = _percent(result["truncation_rate"])
            summary[f"calls_per_answer_{stage}_B{calls}"] = round(result.get("tool_calls_per_sample", 0.0), 2)
        gain = summary[f"accuracy_after_B{calls}"] - summary[f"accuracy_before_B{calls}"]
        summary[f"gain_points_B{calls}"] = round(gain, 1)
    summary["tool_advantage_after_points"] = round(summary["accuracy_after_B4"] - summary["accuracy_after_B0"], 1)
    summary |= train_pass_rates(trainer.state.log_history)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def train_pass_rates(log_history: list[dict], last: int = 3) -> dict:
    """The policy's own accuracy while it trains (sampled at the recipe's temperature, B=4), from the logs: the first
    step's and the mean of the last `last` steps, or of as many as the run logged (a 2-step run: its last 2)."""
    rates = [e["diag/pass_rate"] for e in log_history if e.get("diag/pass_rate") is not None]
    if not rates:
        return {}
    tail = rates[-last:]
    return {
        "train_pass_rate_first": _percent(rates[0]),
        "train_pass_rate_last": _percent(sum(tail) / len(tail)),
        "train_pass_rate_last_steps": len(tail),
        "train_pass_rate_steps": len(rates),
    }


def format_summary(summary: dict, output_dir: str) -> str:
    """The lines printed at the end of the demo."""
    lines = [
        f"{summary['model']}, seed {summary['seed']}: held-out accuracy ({summary['held_out_problems']} products, "
        f"greedy) after {summary['train_steps']} Dr.GRPO steps with the Python tool:"
    ]
    for calls in BUDGETS:
        label = "no tool (B=0)" if calls == 0 else f"tool, B={calls}"
        before, after = summary[f"accuracy_before_B{calls}"], summary[f"accuracy_after_B{calls}"]
        lines.append(
            f"  {label:<13} {before:5.1f}% -> {after:5.1f}% "
            f"({summary[f'gain_points_B{calls}']:+.1f} points); programs per answer "
            f"{summary[f'calls_per_answer_before_B{calls}']:.2f} -> {summary[f'calls_per_answer_after_B{calls}']:.2f}; "
            f"truncated {summary[f'truncated_before_B{calls}']:.1f}% -> {summary[f'truncated_after_B{calls}']:.1f}%"
        )
    lines.append(f"  with the tool vs without, after training: {summary['tool_advantage_after_points']:+.1f} points")
    if "train_pass_rate_first" in summary:
        first, steps = f"{summary['train_pass_rate_first']:.1f}% at step 1", summary["train_pass_rate_steps"]
        last = summary["train_pass_rate_last_steps"]
        later = f" -> {summary['train_pass_rate_last']:.1f}% over the last {last} steps" if steps > 1 else " (one step)"
        if steps > 1 and last == steps:
            later = f" -> {summary['train_pass_rate_last']:.1f}% over all {steps} steps"
        lines.append(f"  training pass rate (sampled, B=4): {first}{later}")
    lines += [
        f"{summary['seconds']:.0f} s in all ({summary['train_seconds']:.0f} s training), peak RSS "
        f"{summary['peak_rss_gb']:.1f} GB, load average {summary['load_average_start'][0]:.1f} at the start",
        f"summary: {output_dir}/summary.json; curves: {output_dir}/curves.png; samples (every turn): "
        f"{output_dir}/eval/{{before,after}}-B{{0,4}}/samples.jsonl; model: {output_dir}/model",
    ]
    return "\n".join(lines)
