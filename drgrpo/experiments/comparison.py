"""GRPO vs Dr.GRPO from the same start: train both recipes with the same seed, model and data, evaluate both on the
held-out problems, and write the overlay plot and a markdown summary of what was measured.

Four tasks: `smollm2` (`make compare`), SmolLM2-135M-Instruct on the real demo's chat additions
(`recipes/smollm2_135m_{grpo,drgrpo}.yaml`, data from `drgrpo.experiments.arithmetic_task`), 15 steps; `smollm2-long`
(`make compare ARGS="--task smollm2-long --seeds 0 1 2"`, run by `make bias-real`, docs/bias.md), the same model and
problems trained long enough for lengths to move (`recipes/smollm2_135m_long_{grpo,drgrpo}.yaml`: 60 steps, answers
up to 128 tokens, resumable); `smollm2-long-ablation`, the two halves of their difference each alone (GRPO without
its std scaling, GRPO with Dr.GRPO's constant loss normaliser); and `tiny` (`make compare-tiny`), the tiny demo's
warm-started model (`drgrpo.experiments.demo`, reused when `make demo-tiny` built it). The summary reports the numbers
whichever way they come out, and one seed is one sample.

With `resume` (the long task's default) a run that finished is kept (its `row.json`), one that was killed continues
from its newest checkpoint, and an evaluation from its saved samples, so that an interrupted comparison loses at most
the steps since the last checkpoint. With a `deadline` (drgrpo/experiments/budget.py) a run stops at the first step
past it with a checkpoint saved, and no evaluation starts past it (`OutOfTime`); a run's wall time and load add up
over the commands it took (`wall_time.json`).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from drgrpo.observe import metric_names as d
from drgrpo.observe.plotting import metric_series, plot_runs

if TYPE_CHECKING:
    from drgrpo.experiments.budget import Deadline

logger = logging.getLogger(__name__)


RECIPES = {
    "smollm2": ("recipes/smollm2_135m_grpo.yaml", "recipes/smollm2_135m_drgrpo.yaml"),
    "smollm2-long": ("recipes/smollm2_135m_long_grpo.yaml", "recipes/smollm2_135m_long_drgrpo.yaml"),
    "tiny": ("recipes/tiny_grpo.yaml", "recipes/tiny_drgrpo.yaml"),
    # The two halves of the difference between the long GRPO and Dr.GRPO recipes, each alone (docs/bias.md).
    "smollm2-long-ablation": (
        "recipes/smollm2_135m_long_grpo_no_std.yaml",
        "recipes/smollm2_135m_long_grpo_constant_loss.yaml",
    ),
}
TITLES = {
    "smollm2": "SmolLM2-135M-Instruct on chat additions",
    "smollm2-long": "SmolLM2-135M-Instruct on chat additions, 60 steps",
    "tiny": "the tiny addition task",
    "smollm2-long-ablation": "SmolLM2-135M-Instruct on chat additions, 60 steps",
}
RUN_ROW = "row.json"  # a finished run's summary row and curves, written after its evaluation
RUN_WALL_TIME = "wall_time.json"  # one (seconds, load) segment per command that trained the run


@dataclass
class CompareSettings:
    """What `make compare` trains and where it writes. Both runs get the same model, data, seed and overrides."""

    task: str = "smollm2"
    output_dir: str = "outputs/compare"
    demo_dir: str = "outputs/demo-tiny"
    recipes: tuple[str, ...] = ()
    seed: int = 42
    data_seed: int = 0
    final_window: int = 5
    overrides: tuple[str, ...] = field(default_factory=tuple)
    data_dir: str | None = None  # smollm2 tasks: where the task files go (default output_dir/data)
    num_test: int = 200  # smollm2 tasks: held-out problems
    baseline_dir: str | None = None  # the starting model's held-out evaluation (default output_dir/eval/start)
    resume: bool | None = None  # keep finished runs, continue killed ones (None: on for the smollm2-long tasks only)
    # Held-out: a sample cut at the budget counts wrong, as training scores it (None: on for the smollm2-long tasks).
    truncated_as_wrong: bool | None = None
    deadline: Deadline | None = None  # stop at the first safe point past it (drgrpo/experiments/budget.py)
    side_by_side: bool = False  # train the recipes at once, one process each (drgrpo/experiments/side_by_side.py)

    def __post_init__(self) -> None:
        if self.task not in RECIPES:
            raise ValueError(f"task {self.task!r}: choose one of {', '.join(RECIPES)}.")
        self.recipes = tuple(self.recipes) or RECIPES[self.task]
        if self.resume is None:
            self.resume = self.task.startswith("smollm2-long")
        if self.truncated_as_wrong is None:
            self.truncated_as_wrong = self.task.startswith("smollm2-long")


@dataclass(frozen=True)
class StartingPoint:
    """The model both runs start from, their data, and how the held-out problems are prompted."""

    model: str
    train_file: Path
    test_file: Path
    prompt_template: str


def starting_point(settings: CompareSettings) -> StartingPoint:
    """The tiny demo's warm start and data, or the prepared SmolLM2 and the real demo's task (seeded by `data_seed`)."""
    if settings.task == "tiny":
        model, train_file, test_file = ensure_demo_assets(settings.demo_dir)
        return StartingPoint(str(model), train_file, test_file, "plain")
    from drgrpo.core.models import resolve_model
    from drgrpo.experiments.arithmetic_task import write_chat_addition_task
    from drgrpo.recipe.file import read_recipe

    model = read_recipe(settings.recipes[0]).get("model_name_or_path")
    if "--model_name_or_path" in settings.overrides:
        model = settings.overrides[settings.overrides.index("--model_name_or_path") + 1]
    resolve_model(model)  # not prepared: one line naming `make smollm2`, before anything is trained
    data_dir = Path(settings.data_dir or Path(settings.output_dir) / "data")
    data = write_chat_addition_task(data_dir, seed=settings.data_seed, num_test=settings.num_test)
    return StartingPoint(model, data["train"], data["test"], "chat")


def ensure_demo_assets(demo_dir: str | Path, seed: int = 0) -> tuple[Path, Path, Path]:
    """(warm-started model, train file, test file) of the demo; built with `drgrpo.experiments.demo`'s own stages when
    missing, so that the comparison starts from exactly the policy and task that `make demo` trains."""
    from drgrpo.experiments.demo import DemoSettings, prepare_warm_start

    demo_dir = Path(demo_dir)
    model, train_file, test_file = demo_dir / "sft", demo_dir / "data" / "train.jsonl", demo_dir / "data" / "test.jsonl"
    if (model / "config.json").is_file() and train_file.is_file() and test_file.is_file():
        logger.warning("Reusing the demo's warm-started model and data in %s (delete it to rebuild)", demo_dir)
        return model, train_file, test_file
    logger.warning("Building the demo's task, tiny model and SFT warm-start in %s", demo_dir)
    _, model, data = prepare_warm_start(DemoSettings(output_dir=str(demo_dir), seed=seed))
    return model, data["train"], data["test"]


def held_out_evaluation(
    model,
    test_file: Path,
    output_dir: Path,
    max_new_tokens: int,
    prompt_template: str,
    resume: bool = False,
    truncated_as_wrong: bool = False,
    bf16: bool = False,
) -> dict:
    """Greedy held-out evaluation by the project's evaluator, prompted as in training and in training's precision
    (`bf16`: float32 weights under bf16 autocast; else float32), continued from its saved samples with `resume`; a
    sample cut at `max_new_tokens` counted wrong with `truncated_as_wrong`."""
    from drgrpo.evaluation import evaluate
    from drgrpo.evaluation.backends import training_precision_dtype

    return evaluate(
        model_path=str(model),
        data_file=str(test_file),
        question_column="question",
        answer_column="answer",
        prompt_template=prompt_template,
        n=1,
        temperature=0.0,
        max_new_tokens=max_new_tokens,
        output_dir=str(output_dir),
        dtype=training_precision_dtype(bf16),
        overwrite=not resume,  # runs retrained from scratch must not resume from an earlier comparison's samples
        truncated_as_wrong=truncated_as_wrong,
        progress=prompt_template != "plain",  # a bar for the real model's minutes, none for the tiny one's seconds
    )


def final_mean(history: Sequence[Mapping], key: str, window: int) -> float | None:
    """Mean of a metric over its last `window` logged values (None if never logged): the end-of-training level,
    less noisy than the single last log."""
    _, values = metric_series(history, key)
    if not values:
        return None
    recent = values[-window:]
    return sum(recent) / len(recent)


def run_summary(label: str, algorithm: str, history: Sequence[Mapping], evaluation: Mapping, window: int) -> dict:
    """One row of the comparison: end-of-training diagnostics and held-out evaluation of one run."""
    return {
        "run": label,
        "algorithm": algorithm,
        "train_pass_rate": final_mean(history, d.PASS_RATE, window),
        "train_length_correct": final_mean(history, d.LENGTH_CORRECT, window),
        "train_length_incorrect": final_mean(history, d.LENGTH_INCORRECT, window),
        "zero_std_share": final_mean(history, d.TRL_ZERO_STD_SHARE, window),
        "groups_all_correct": final_mean(history, d.GROUPS_ALL_CORRECT, window),
        "groups_all_wrong": final_mean(history, d.GROUPS_ALL_WRONG, window),
        "truncation_rate": final_mean(history, d.TRUNCATION_RATE, window),
        "eval_pass_at_1": evaluation.get("pass@1"),
        "eval_length_correct": evaluation.get("mean_length_correct"),
        "eval_length_incorrect": evaluation.get("mean_length_incorrect"),
        "eval_problems": evaluation.get("num_problems"),
        "eval_truncation_rate": evaluation.get("truncation_rate"),
        "eval_tokens_per_correct": tokens_per_correct(evaluation),
    }


def tokens_per_correct(evaluation: Mapping) -> float | None:
    """Tokens generated on the held-out problems per right answer, `mean_length / pass@1` (the paper's token
    efficiency: Dr.GRPO's claim is the same accuracy for fewer tokens); None without a right answer."""
    accuracy, length = evaluation.get("pass@1"), evaluation.get("mean_length")
    if not accuracy or length is None:
        return None
    return length / accuracy


PER_STEP = {"pass_rate": d.PASS_RATE, "length_correct": d.LENGTH_CORRECT, "length_incorrect": d.LENGTH_INCORRECT,
            "truncation_rate": d.TRUNCATION_RATE}  # fmt: skip


def per_step(history: Sequence[Mapping]) -> dict[str, dict[int, float]]:
    """The per-step training curves the comparison reports: {name: {step: value}} (a step without a value is absent,
    e.g. a length of correct completions in a step with none correct)."""
    series = {}
    for name, key in PER_STEP.items():
        steps, values = metric_series(history, key)
        series[name] = dict(zip(steps, values, strict=True))
    return series


def per_step_markdown(curves: Mapping[str, Mapping[str, Mapping[int, float]]]) -> list[str]:
    """One row per logged step: each run's pass rate and mean length of correct / incorrect completions."""
    runs = list(curves)
    steps = sorted({step for run in runs for step in curves[run]["pass_rate"]})
    header = " | ".join(f"{run} pass rate | {run} length correct / incorrect" for run in runs)
    lines = [f"| step | {header} |", "|---" * (1 + 2 * len(runs)) + "|"]
    for step in steps:
        cells = []
        for run in runs:
            c = curves[run]
            cells.append(f"{_percent(c['pass_rate'].get(step))} | {_tokens(c['length_correct'].get(step))} / "
                         f"{_tokens(c['length_incorrect'].get(step))}")  # fmt: skip
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return lines


def per_step_section(rows: Sequence[Mapping]) -> list[str]:
    """The per-step table, when the rows carry their curves and there are few enough steps to read (<= 50)."""
    curves = {row["run"]: row["per_step"] for row in rows if "per_step" in row}
    if not curves or len(next(iter(curves.values()))["pass_rate"]) > 50:
        return []
    return [
        "",
        "Per training step (the sampled training batch; lengths in tokens):",
        "",
        *per_step_markdown(curves),
        "",
    ]


def _percent(value: float | None) -> str:
    return "–" if value is None or math.isnan(value) else f"{100 * value:.1f}%"


def _tokens(value: float | None) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.2f}"


def comparison_markdown(
    rows: Sequence[Mapping], baseline: Mapping | None, notes: Sequence[str], window: int, title: str = TITLES["tiny"]
) -> str:
    """The markdown summary: one table row per run, the starting model's held-out accuracy, and what differs."""
    lines = [
        f"# GRPO vs Dr.GRPO: {title}",
        "",
        f"Training columns: mean of the last {window} logged steps. Held-out: greedy decoding on the demo's test "
        "problems, graded by the evaluator (`drgrpo.evaluation`).",
        "",
        "| run | held-out pass@1 | train pass rate | length correct / incorrect (train, tokens) "
        "| length correct / incorrect (held-out) | zero-variance groups (all correct + all wrong) | truncated |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['run']} | {_percent(row['eval_pass_at_1'])} | {_percent(row['train_pass_rate'])} "
            f"| {_tokens(row['train_length_correct'])} / {_tokens(row['train_length_incorrect'])} "
            f"| {_tokens(row['eval_length_correct'])} / {_tokens(row['eval_length_incorrect'])} "
            f"| {_percent(row['zero_std_share'])} ({_percent(row['groups_all_correct'])} + "
            f"{_percent(row['groups_all_wrong'])}) | {_percent(row['truncation_rate'])} |"
        )
    lines.append("")
    if baseline is not None:
        lines.append(
            f"Starting point (the model both runs start from, before RL): held-out pass@1 "
            f"{_percent(baseline['pass@1'])}."
        )
    lines += ["", "Algorithms:", *[f"- {row['run']}: `{row['algorithm']}`" for row in rows]]
    if notes:
        lines += ["", "Measured:", *[f"- {note}" for note in notes]]
    lines += [
        "",
        "One seed per algorithm: a gap of a few points may not survive another seed "
        "(`python scripts/compare.py --seed 1 --output_dir outputs/compare-seed1` shows the spread).",
        "",
        "Curves: `curves.png` (same folder).",
        *per_step_section(rows),
        "",
    ]
    return "\n".join(lines)


def difference_notes(first: Mapping, second: Mapping) -> list[str]:
    """Plain statements of how `second` differs from `first` on the headline numbers (signs as measured)."""
    notes = []
    for key, what, scale, unit in (
        ("eval_pass_at_1", "held-out pass@1", 100, " points"),
        ("train_length_incorrect", "mean length of incorrect training completions", 1, " tokens"),
        ("zero_std_share", "zero-variance group share", 100, " points"),
    ):
        a, b = first.get(key), second.get(key)
        if a is None or b is None or math.isnan(a) or math.isnan(b):
            notes.append(f"{what}: not available for both runs.")
        else:
            notes.append(f"{what}: {second['run']} {scale * (b - a):+.2f}{unit} vs {first['run']}.")
    return notes


def distinct_run_names(rows: Sequence[dict], recipes: Sequence[str]) -> None:
    """Two runs of one algorithm (an ablation: both GRPO) get their recipe's name beside it, so that the table and the
    plot tell them apart; distinct names are left as they are."""
    names = [row["run"] for row in rows]
    if len(set(names)) < len(names):
        for row, recipe in zip(rows, recipes, strict=True):
            row["run"] = f"{row['run']} ({Path(recipe).stem})"


def run_comparison(settings: CompareSettings) -> dict:
    """Train and evaluate both recipes, write `curves.png`, `summary.md` and `summary.json`; return the summary."""
    start = time.perf_counter()
    out = Path(settings.output_dir)
    begin = starting_point(settings)
    baseline_dir = Path(settings.baseline_dir) if settings.baseline_dir else out / "eval" / "start"
    rows, histories = [], {}
    baseline = None
    trained = {}
    if settings.side_by_side:
        from drgrpo.experiments.side_by_side import train_side_by_side

        trained = train_side_by_side(
            settings, begin, compare_one, lambda r: bool(settings.resume) and (out / Path(r).stem / RUN_ROW).is_file()
        )
    for recipe in settings.recipes:
        row, history = trained[recipe] if recipe in trained else compare_one(recipe, settings, begin)
        if baseline is None:
            if settings.deadline is not None:
                settings.deadline.check("the starting model's held-out evaluation")
            baseline = held_out_evaluation(
                begin.model,
                begin.test_file,
                baseline_dir,
                row["budget"],
                begin.prompt_template,
                settings.resume,
                settings.truncated_as_wrong,
                row.get("bf16", False),  # the start, in the first run's precision (both recipes share it)
            )
        rows.append(row)
        histories[recipe] = history
    distinct_run_names(rows, settings.recipes)
    histories = {row["run"]: histories[recipe] for row, recipe in zip(rows, settings.recipes, strict=True)}
    names = " vs ".join(row["run"] for row in rows)
    plot_runs(histories, out / "curves.png", title=f"{names}, {TITLES[settings.task]} (same seed and data)")
    notes = difference_notes(rows[0], rows[1]) if len(rows) == 2 else []
    markdown = comparison_markdown(rows, baseline, notes, settings.final_window, TITLES[settings.task])
    (out / "summary.md").write_text(markdown)
    summary = {"task": settings.task, "model": begin.model, "seed": settings.seed, "runs": rows,
               "start_pass_at_1": baseline["pass@1"] if baseline else None,
               "start_tokens_per_correct": tokens_per_correct(baseline) if baseline else None, "notes": notes,
               "total_seconds": round(time.perf_counter() - start, 1)}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def compare_one(recipe: str, settings: CompareSettings, begin: StartingPoint) -> tuple[dict, list]:
    """Train one recipe from the starting point and evaluate it: (summary row, log history). With `resume`, a run whose
    `row.json` exists is read back instead, and an unfinished one continues from its newest checkpoint."""
    from drgrpo.experiments.budget import Deadline, DeadlineCallback, OutOfTime
    from drgrpo.experiments.load import LoadSampler, add_segment, segments_total
    from drgrpo.recipe.cli import parse_recipe
    from drgrpo.run.training import train

    out = Path(settings.output_dir)
    name = Path(recipe).stem
    saved = out / name / RUN_ROW
    if settings.resume and saved.is_file():
        record = json.loads(saved.read_text())
        logger.warning("Keeping the finished run %s (delete %s to train it again)", out / name, saved)
        row = record["row"]
        row["per_step"] = {k: {int(step): v for step, v in s.items()} for k, s in row["per_step"].items()}
        return row, record["history"]
    overrides = [
        "--model_name_or_path", str(begin.model), "--dataset_path", str(begin.train_file),
        "--output_dir", str(out / name), "--seed", str(settings.seed), "--logging_steps", "1", "--report_to", "none",
    ]  # fmt: skip
    if not settings.resume:  # each quick comparison retrains both runs from the same start
        overrides += ["--save_strategy", "no", "--overwrite_output_dir", "true"]
    script_args, training_args, model_args = parse_recipe([recipe, *overrides, *settings.overrides])
    label = "Dr.GRPO" if training_args.dr_grpo else "GRPO"
    deadline = settings.deadline or Deadline()
    deadline.check(f"training {out / name}")
    wall_time = out / name / RUN_WALL_TIME
    if not settings.resume:
        wall_time.unlink(missing_ok=True)
    run_start = time.perf_counter()
    with LoadSampler() as load:
        trainer = train(script_args, training_args, model_args, callbacks=[DeadlineCallback(deadline)])
    add_segment(wall_time, time.perf_counter() - run_start, load.mean)
    history, reached = trainer.state.log_history, trainer.state.global_step
    budget = training_args.max_completion_length
    del trainer
    if reached < training_args.max_steps:
        raise OutOfTime(f"{out / name} stopped at step {reached} of {training_args.max_steps} (checkpoint saved)")
    deadline.check(f"the held-out evaluation of {out / name}")
    evaluation = held_out_evaluation(
        out / name,
        begin.test_file,
        out / "eval" / name,
        budget,
        begin.prompt_template,
        settings.resume,
        settings.truncated_as_wrong,
        bool(training_args.bf16),
    )
    row = run_summary(label, training_args.algorithm_summary, history, evaluation, settings.final_window)
    train_seconds, train_load = segments_total(wall_time)
    row.update(train_seconds=train_seconds, train_load=train_load, budget=budget, per_step=per_step(history),
               bf16=bool(training_args.bf16))  # fmt: skip
    saved.write_text(json.dumps({"row": row, "history": history}, indent=1) + "\n")
    return row, history
