"""The CPU demo: a tiny model learns integer addition with Dr.GRPO, measured on held-out problems.

Stages, all seeded:
1. write the task: two-digit additions that need a carry (`47+38=`), 200 held-out problems never seen in training;
2. build the tiny random-weight Qwen3 model (`drgrpo.experiments.tiny`);
3. an SFT warm-start (TRL `SFTTrainer`) on demonstrations from a sloppy teacher who forgets the carry 80% of the
   time (`drgrpo.experiments.tasks`): the model learns to add but mostly drops the carry. RL from random weights instead
   gets ~0 reward and collapses onto one answer per prompt (background note, section 5);
4. Dr.GRPO with `recipes/tiny_drgrpo.yaml` through the same `parse_recipe` + `train` path as every recipe;
5. greedy held-out accuracy of the untrained, warm-started and RL-trained models, graded by the accuracy reward.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from drgrpo.experiments.tasks import sloppy_demonstrations, write_addition_task

# datasets, transformers, TRL and torch are imported by the stages that use them: `make demo-tiny ARGS=...` answers a
# mistyped option before ~7 s of imports.

logger = logging.getLogger(__name__)


@dataclass
class DemoSettings:
    """What the demo trains on and for how long. Defaults meet the bar on 2 CPU cores (see README)."""

    output_dir: str = "outputs/demo-tiny"
    recipe: str = "recipes/tiny_drgrpo.yaml"
    seed: int = 0
    min_operand: int = 10
    max_operand: int = 99
    num_test: int = 200
    carry_error_rate: float = 0.8
    sft_examples: int = 2500
    sft_steps: int = 600
    sft_learning_rate: float = 1e-3
    rl_overrides: tuple[str, ...] = ()


def write_task(settings: DemoSettings) -> dict[str, Path]:
    """The demo's train/test files under `output_dir/data`."""
    return write_addition_task(
        Path(settings.output_dir) / "data",
        min_operand=settings.min_operand,
        max_operand=settings.max_operand,
        carry_only=True,
        num_test=settings.num_test,
        seed=settings.seed,
    )


def warm_start(base: Path, train_file: Path, output_dir: Path, settings: DemoSettings) -> Path:
    """Supervised warm-start (completion-only loss) on sloppy demonstrations of the first `sft_examples` problems."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    rows = [json.loads(line) for line in train_file.read_text().splitlines()][: settings.sft_examples]
    dataset = Dataset.from_list(sloppy_demonstrations(rows, settings.carry_error_rate, seed=settings.seed))
    config = SFTConfig(
        output_dir=str(output_dir),
        max_steps=settings.sft_steps,
        per_device_train_batch_size=32,
        learning_rate=settings.sft_learning_rate,
        lr_scheduler_type="constant",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        save_strategy="no",
        logging_steps=50,
        seed=settings.seed,
    )
    tokenizer = AutoTokenizer.from_pretrained(base)
    trainer = SFTTrainer(model=str(base), args=config, train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    trainer.save_model(str(output_dir))
    tokenizer.save_pretrained(output_dir)
    return output_dir


def held_out_summary(model_dir: Path, test_file: Path, output_dir: Path, max_new_tokens: int, bf16: bool) -> dict:
    """Greedy evaluation on the held-out problems by the project's evaluator (the same grader as training), in the
    precision the run generated in (`bf16`: its resolved key), as the start-up precision line says."""
    from drgrpo.evaluation import evaluate
    from drgrpo.evaluation.backends import training_precision_dtype

    return evaluate(
        model_path=str(model_dir),
        data_file=str(test_file),
        question_column="question",
        answer_column="answer",
        prompt_template="plain",
        n=1,
        temperature=0.0,
        max_new_tokens=max_new_tokens,
        output_dir=str(output_dir),
        overwrite=True,  # the demo rebuilds its models each run: never resume from an earlier run's samples
        progress=False,
        dtype=training_precision_dtype(bf16),
    )


def prepare_warm_start(settings: DemoSettings) -> tuple[Path, Path, dict[str, Path]]:
    """Stages 1-3: the task files, the untrained tiny model and the warm-started one: (base, sft, data)."""
    from drgrpo.experiments.tiny import build_tiny_model

    out = Path(settings.output_dir)
    data = write_task(settings)
    base = build_tiny_model(out / "base", seed=settings.seed)
    sft = warm_start(base, data["train"], out / "sft", settings)
    return base, sft, data


def run_demo(settings: DemoSettings) -> dict:
    """Run every stage and write `metrics.json` under `settings.output_dir`; return the metrics."""
    from drgrpo.recipe.cli import parse_recipe
    from drgrpo.run.training import train

    start = time.perf_counter()
    out = Path(settings.output_dir)
    base, sft, data = prepare_warm_start(settings)

    overrides = [
        "--model_name_or_path", str(sft),
        "--dataset_path", str(data["train"]),
        "--output_dir", str(out / "model"),
        "--overwrite_output_dir", "true",  # the demo rebuilds its models each run; only the demo writes here
        *settings.rl_overrides,
    ]  # fmt: skip
    script_args, training_args, model_args = parse_recipe([settings.recipe, *overrides])
    rl_start = time.perf_counter()
    train(script_args, training_args, model_args)
    rl_seconds = time.perf_counter() - rl_start

    def accuracy(model: Path, name: str) -> float:
        budget, bf16 = training_args.max_completion_length, training_args.bf16
        return held_out_summary(model, data["test"], out / "eval" / name, budget, bf16)["pass@1"]

    metrics = {
        "accuracy_untrained": accuracy(base, "untrained"),
        "accuracy_before_rl": accuracy(sft, "before_rl"),
        "accuracy_after_rl": accuracy(out / "model", "after_rl"),
        "num_test_problems": settings.num_test,
        "rl_steps": training_args.max_steps,
        "rl_seconds": round(rl_seconds, 1),
        "total_seconds": round(time.perf_counter() - start, 1),
        "algorithm": training_args.algorithm_summary,
    }
    metrics["rl_gain_points"] = round(100 * (metrics["accuracy_after_rl"] - metrics["accuracy_before_rl"]), 1)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def format_table(metrics: dict) -> str:
    """The before/after table printed at the end of the demo."""
    rows = [
        ("untrained (random weights)", metrics["accuracy_untrained"]),
        ("after SFT on sloppy demonstrations = before RL", metrics["accuracy_before_rl"]),
        ("after Dr.GRPO", metrics["accuracy_after_rl"]),
    ]
    lines = [f"| model | held-out accuracy ({metrics['num_test_problems']} problems, greedy) |", "|---|---|"]
    lines += [f"| {name} | {100 * value:.1f}% |" for name, value in rows]
    lines.append(
        f"\nDr.GRPO stage: {metrics['rl_gain_points']:+.1f} points in {metrics['rl_steps']} steps "
        f"({metrics['rl_seconds']:.0f} s); whole demo {metrics['total_seconds']:.0f} s."
    )
    return "\n".join(lines)
