"""`make demo`: a real pretrained language model, SmolLM2-135M-Instruct, trained with Dr.GRPO on CPU and evaluated on
held-out problems before and after.

Stages, all seeded by `--seed` (the task split and the training seed):
1. the task (`drgrpo.experiments.arithmetic_task`): `What is 17 + 21? Put your final answer in \\boxed{}.`, sums of
   one- or two-digit numbers, 200 held-out problems disjoint from training by operand pair;
2. greedy held-out accuracy of the model as prepared (`make smollm2`), by the project's evaluator, graded like the
   `accuracy` reward, and a sample cut at the generation budget counts wrong (the Dr.GRPO paper's rule, which the
   recipe's `zero_reward_for_truncated` applies in training; `--truncated_as_wrong false` credits what the grader
   reads);
3. Dr.GRPO with `recipes/smollm2_135m_drgrpo.yaml` through the same `parse_recipe` + `train` path as
   `scripts/train.py`;
4. greedy held-out accuracy after training; `summary.json`, the training curves and the samples in `output_dir`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import resource
import time
from dataclasses import dataclass
from pathlib import Path

from drgrpo.core.heap import release_free_memory
from drgrpo.experiments.arithmetic_task import write_chat_addition_task
from drgrpo.observe.metric_names import ENGINE_SAMPLER_RATIO_TRUNCATED, SAMPLING_LOGP_DIFFERENCE_MEAN

logger = logging.getLogger(__name__)

MODEL = "smollm2-135m-instruct"
_INTEGER = re.compile(r"-?\d+")


@dataclass
class SmolDemoSettings:
    """What `make demo` trains and evaluates, and where it writes."""

    output_dir: str = "outputs/demo"
    recipe: str = "recipes/smollm2_135m_drgrpo.yaml"
    seed: int = 0
    num_test: int = 200
    # Samples per engine call: the whole held-out set at once. Greedy samples do not depend on their batch, and a
    # decode step of 200 rows costs little more than one of 50 (17.6-20.7 s against 24.5-32.5 s for the 200
    # problems before training, AMD EPYC Zen 4, 2 threads).
    eval_batch_size: int = 200
    rl_overrides: tuple[str, ...] = ()
    # Score a held-out sample cut at the generation budget as wrong, as the paper does and as training scores it.
    truncated_as_wrong: bool = True


def strict_correct(extracted: str | None, gold: str) -> bool:
    """A stricter check than the grader, to cross-check it: the answer the grader extracted is a bare integer equal to
    the gold. An unevaluated expression of the question's own numbers (`66 + 62` for 128), which math-verify
    evaluates and credits, never passes it."""
    if extracted is None:
        return False
    text = str(extracted).strip().strip("$").strip().removesuffix(".").replace(",", "")
    return _INTEGER.fullmatch(text) is not None and int(text) == int(gold)


def strict_accuracy(samples_file: Path, truncated_as_wrong: bool = False) -> float:
    """Share of the samples that pass `strict_correct` (a truncated one never, with `truncated_as_wrong`)."""
    rows = [json.loads(line) for line in Path(samples_file).read_text().splitlines() if line.strip()]
    passed = (
        strict_correct(r.get("extracted"), str(r["gold"])) and not (truncated_as_wrong and r.get("truncated"))
        for r in rows
    )
    return sum(passed) / max(1, len(rows))


def release_trainer(trainer) -> None:
    """Free the trained model's weights, gradients and AdamW states once the model is saved: the after-evaluation
    loads the saved model anew, and would otherwise run beside 2.2 GB of training state. accelerate keeps references
    to the model and optimizer (hence `free_memory`), and so does transformers' callback handler: left there, they
    kept all of it alive through the demo's after-evaluation (2.3 GB RSS before it instead of 0.5; peak 4.0 GB)."""
    trainer.accelerator.free_memory()
    trainer.model = trainer.model_wrapped = trainer.optimizer = trainer.lr_scheduler = None
    handler = trainer.callback_handler
    handler.model = handler.optimizer = handler.lr_scheduler = None
    trainer._engine = None  # the generation copy
    release_free_memory()


def held_out(
    model: str,
    test_file: Path,
    output_dir: Path,
    max_new_tokens: int,
    batch_size: int,
    truncated_as_wrong: bool,
    bf16: bool = False,
) -> dict:
    """Greedy evaluation on the held-out problems with the chat template, by the project's evaluator, in training's
    precision (`bf16`: the CPU engine's bf16 copy, as training generates; else float32)."""
    from drgrpo.evaluation import evaluate
    from drgrpo.evaluation.backends import training_precision_dtype

    summary = evaluate(
        model_path=model,
        data_file=str(test_file),
        question_column="question",
        answer_column="answer",
        prompt_template="chat",
        n=1,
        temperature=0.0,
        max_new_tokens=max_new_tokens,
        output_dir=str(output_dir),
        batch_size=batch_size,
        dtype=training_precision_dtype(bf16),
        overwrite=True,  # the demo retrains each run: never resume from an earlier run's samples
        truncated_as_wrong=truncated_as_wrong,
    )
    summary["strict_pass@1"] = strict_accuracy(output_dir / "samples.jsonl", truncated_as_wrong)
    return summary


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far, in GB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (user + system): with the wall time and the load, it says
    how much of a run's duration was its own work on a shared machine."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def logged_mean(history: list[dict], name: str) -> float | None:
    """The mean of a metric over the logged steps of a training history (None where it was never logged)."""
    values = [entry[name] for entry in history if entry.get(name) is not None]
    return round(sum(values) / len(values), 5) if values else None


def _percent(value: float) -> float:
    return round(100 * value, 1)


def run_smol_demo(settings: SmolDemoSettings) -> dict:
    """Every stage; writes `summary.json` and `curves.png` under `settings.output_dir` and returns the summary."""
    from drgrpo.core.models import resolve_model
    from drgrpo.core.threads import threads_used
    from drgrpo.observe.plotting import plot_runs
    from drgrpo.recipe.cli import parse_recipe
    from drgrpo.run.training import train

    start = time.perf_counter()
    load_start = os.getloadavg()
    out = Path(settings.output_dir)
    data = write_chat_addition_task(out / "data", num_test=settings.num_test, seed=settings.seed)
    overrides = [
        "--dataset_path", str(data["train"]),
        "--output_dir", str(out / "model"),
        "--seed", str(settings.seed),
        "--overwrite_output_dir", "true",  # the demo retrains each run; only the demo writes here
        "--save_strategy", "no",  # so a checkpoint would never be resumed: none is written (the recipe writes them)
        *settings.rl_overrides,
    ]  # fmt: skip
    script_args, training_args, model_args = parse_recipe([settings.recipe, *overrides])
    resolve_model(model_args.model_name_or_path)  # not prepared: one line naming `make smollm2`, before any work
    budget, cut_wrong = training_args.max_completion_length, settings.truncated_as_wrong
    bf16 = bool(training_args.bf16)
    weights = "bf16" if bf16 else "float32"
    generation = (
        f"the CPU engine, {weights} weights"
        if training_args.engine == "cpu"
        else f"TRL's generate, float32 weights{' under bf16 autocast' if bf16 else ''}"
    )
    training = "bf16 autocast over float32 weights" if bf16 else "float32"
    precision = (
        f"training {training}; generation {generation}; evaluation the CPU engine, {weights} weights "
        f"({training_args.bf16_reason})"
    )
    logger.warning("demo precision: %s", precision)

    before = held_out(
        model_args.model_name_or_path,
        data["test"],
        out / "eval" / "before",
        budget,
        settings.eval_batch_size,
        cut_wrong,
        bf16,
    )
    release_free_memory()  # the evaluation's freed heap, returned before training allocates on top of it
    train_start = time.perf_counter()
    trainer = train(script_args, training_args, model_args)
    train_seconds = time.perf_counter() - train_start
    history, train_steps = trainer.state.log_history, trainer.state.global_step
    release_trainer(trainer)
    del trainer
    after = held_out(
        str(out / "model"), data["test"], out / "eval" / "after", budget, settings.eval_batch_size, cut_wrong, bf16
    )
    plot_runs({"Dr.GRPO": history}, out / "curves.png", title="SmolLM2-135M-Instruct, Dr.GRPO")

    summary = {
        "model": model_args.model_name_or_path,
        "recipe": settings.recipe,
        "seed": settings.seed,
        "held_out_problems": before["num_problems"],
        "accuracy_before": _percent(before["pass@1"]),
        "accuracy_after": _percent(after["pass@1"]),
        "gain_points": round(_percent(after["pass@1"]) - _percent(before["pass@1"]), 1),
        "strict_accuracy_before": _percent(before["strict_pass@1"]),
        "strict_accuracy_after": _percent(after["strict_pass@1"]),
        "truncated_before": _percent(before.get("truncation_rate", float("nan"))),
        "truncated_after": _percent(after.get("truncation_rate", float("nan"))),
        "truncated_as_wrong": cut_wrong,  # truncated samples counted wrong (else credited as graded)
        "truncated_graded_correct_before": before.get("truncated_graded_correct"),
        "truncated_graded_correct_after": after.get("truncated_graded_correct"),
        "mean_length_before": before.get("mean_length"),
        "mean_length_after": after.get("mean_length"),
        "train_steps": train_steps,
        "train_seconds": round(train_seconds, 1),
        "seconds": round(time.perf_counter() - start, 1),
        "cpu_seconds": round(cpu_seconds(), 1),
        "peak_rss_gb": round(peak_rss_gb(), 2),
        "torch_threads_used": {str(k): v for k, v in sorted(threads_used().items())},  # count -> steps and batches
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "algorithm": training_args.algorithm_summary,
        "precision": precision,
        "generation_engine": training_args.engine,
        "generation_dtype": "bfloat16" if bf16 else "float32",
        "importance_sampling_correction": (
            f"{training_args.vllm_importance_sampling_mode}, cap {training_args.vllm_importance_sampling_clip_max:g}"
            if training_args.vllm_importance_sampling_correction
            else "off"
        ),
        "sampler_logp_difference_mean": logged_mean(history, SAMPLING_LOGP_DIFFERENCE_MEAN),
        "importance_ratio_truncated_share": logged_mean(history, ENGINE_SAMPLER_RATIO_TRUNCATED),
        "overrides": list(settings.rl_overrides),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def format_summary(summary: dict, output_dir: str) -> str:
    """The lines printed at the end of the demo."""
    return "\n".join(
        [
            f"{summary['model']}, seed {summary['seed']}: held-out accuracy ({summary['held_out_problems']} problems, "
            f"greedy) {summary['accuracy_before']:.1f}% -> {summary['accuracy_after']:.1f}% "
            f"({summary['gain_points']:+.1f} points) after {summary['train_steps']} Dr.GRPO steps",
            "strict check (the extracted answer is a bare number equal to the gold): "
            f"{summary['strict_accuracy_before']:.1f}% -> "
            f"{summary['strict_accuracy_after']:.1f}%; truncated {summary['truncated_before']:.1f}% -> "
            f"{summary['truncated_after']:.1f}% ({'counted wrong' if summary['truncated_as_wrong'] else 'graded'})",
            f"precision: {summary['precision']}",
            f"sampler vs learner: mean |log-prob difference| {summary.get('sampler_logp_difference_mean')}, "
            f"importance-sampling correction {summary.get('importance_sampling_correction')}",
            f"{summary['seconds']:.0f} s in all ({summary['train_seconds']:.0f} s training), peak RSS "
            f"{summary['peak_rss_gb']:.1f} GB, torch threads {summary['torch_threads_used']} (count: times chosen)",
            f"summary: {output_dir}/summary.json; curves: {output_dir}/curves.png; samples: "
            f"{output_dir}/eval/{{before,after}}/samples.jsonl; model: {output_dir}/model",
        ]
    )
