"""`make bias` end to end: the warm start, the fixed-batch mechanism experiment, GRPO and Dr.GRPO trained from the
same warm start on several seeds through the recipe path every training uses (`parse_recipe` + `train`, as
`scripts/train.py`), held-out accuracy before and after, and the summary files and picture.

It reports what it measured, whichever way it comes out (`drgrpo.experiments.bias.report`).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

from drgrpo.experiments.bias.mechanism import MechanismSettings, run_mechanism
from drgrpo.experiments.bias.report import plot_bias_curves, run_record, summary_json, summary_markdown
from drgrpo.experiments.bias.warm_start import prepare_bias_warm_start

logger = logging.getLogger(__name__)


@dataclass
class BiasSettings:
    """What `make bias` runs. Every recipe is trained once per seed, from the same warm start and data."""

    output_dir: str = "outputs/bias"
    recipes: tuple[str, ...] = ("recipes/tiny_bias_grpo.yaml", "recipes/tiny_bias_drgrpo.yaml")
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    warm_start_seed: int = 0
    sft_steps: int = 1000
    edge_fraction: float = 0.1
    mechanism: MechanismSettings = field(default_factory=MechanismSettings)
    overrides: tuple[str, ...] = ()


def machine_facts() -> str:
    """What the numbers depend on besides the code: CPU model and count, torch's version and intra-op threads, and
    the load average when the run started (other processes on the cores change the timing, hence the sampling)."""
    import torch

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = f", load average {os.getloadavg()[0]:.1f} at the start" if hasattr(os, "getloadavg") else ""
    return (
        f"CPU {model} ({usable} usable cores), torch {torch.__version__} with {torch.get_num_threads()} thread(s) "
        f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}){load}"
    )


def held_out_accuracy(model_dir: Path, test_file: Path, output_dir: Path, max_new_tokens: int, bf16: bool) -> float:
    """Greedy pass@1 on the held-out problems by the project's evaluator (the grader of training), in the precision
    the runs generated in (`bf16`)."""
    from drgrpo.experiments.demo import held_out_summary

    return held_out_summary(model_dir, test_file, output_dir, max_new_tokens, bf16)["pass@1"]


def train_one(recipe: str, model: Path, train_file: Path, output_dir: Path, seed: int, overrides: tuple[str, ...]):
    """One recipe, one seed, through `parse_recipe` + `train` (what `scripts/train.py RECIPE --key value` runs).

    Returns (trainer, training_args, seconds)."""
    from drgrpo.recipe.cli import parse_recipe
    from drgrpo.run.training import train

    argv = [
        recipe, "--model_name_or_path", str(model), "--dataset_path", str(train_file),
        "--output_dir", str(output_dir), "--seed", str(seed), "--logging_steps", "1",
        "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true", *overrides,
    ]  # fmt: skip
    script_args, training_args, model_args = parse_recipe(argv)
    start = time.perf_counter()
    trainer = train(script_args, training_args, model_args)
    return trainer, training_args, time.perf_counter() - start


def run_bias(settings: BiasSettings) -> dict:
    """Run everything and write `curves.png`, `summary.md` and `summary.json` under `output_dir`; return the summary."""
    start = time.perf_counter()
    out = Path(settings.output_dir)
    machine = machine_facts()
    print(f"Machine: {machine}", flush=True)
    model, data = prepare_bias_warm_start(out, seed=settings.warm_start_seed, sft_steps=settings.sft_steps)
    rows = [json.loads(line) for line in data["train"].read_text().splitlines()]

    mechanism_start = time.perf_counter()
    mechanism = run_mechanism(str(model), rows, settings.mechanism)
    mechanism_seconds = time.perf_counter() - mechanism_start
    (out / "mechanism.json").write_text(json.dumps(mechanism, indent=2) + "\n")
    logger.warning("mechanism (%.0f s): %s", mechanism_seconds, json.dumps(mechanism))

    before = None
    runs, histories, summary = [], {}, {}
    for seed in settings.seeds:
        for recipe in settings.recipes:
            name = f"{Path(recipe).stem}-seed{seed}"
            trainer, args, seconds = train_one(
                recipe, model, data["train"], out / "runs" / name, seed, settings.overrides
            )
            algorithm = "dr_grpo" if args.dr_grpo else "grpo"
            budget = args.max_completion_length
            if before is None:
                before = held_out_accuracy(model, data["test"], out / "eval" / "before_rl", budget, args.bf16)
            after = held_out_accuracy(out / "runs" / name, data["test"], out / "eval" / name, budget, args.bf16)
            history = trainer.state.log_history
            runs.append(run_record(seed, algorithm, history, before, after, seconds, settings.edge_fraction))
            histories[(algorithm, seed)] = history
            logger.warning("%s: %s", name, json.dumps(runs[-1]))
            del trainer
            # Written after every run, so that an interrupted `make bias` leaves what it measured so far.
            summary = write_outputs(out, mechanism, runs, histories, settings, mechanism_seconds, start, machine)
    return summary


def write_outputs(
    out: Path,
    mechanism: dict,
    runs: list,
    histories: dict,
    settings: BiasSettings,
    mechanism_seconds: float,
    start: float,
    machine: str | None = None,
) -> dict:
    """`summary.json`, `summary.md` and `curves.png` for the runs so far."""
    summary = summary_json(mechanism, runs)
    plot_bias_curves(histories, out / "curves.png")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    counts = mechanism["details"]["completions"]
    notes = [
        f"Mechanism: {settings.mechanism.num_batches} fixed batches of {settings.mechanism.prompts_per_batch} prompts "
        f"x {settings.mechanism.group_size} completions ({counts['negative']} completions with A < 0, "
        f"{counts['positive']} with A > 0, {counts['no_signal']} in all-equal groups, {counts['unmeasured']} without "
        f"a readable guess and ones sum or `;`), {mechanism_seconds:.0f} s.",
        f"Seeds {list(settings.seeds)} vary the RL sampling and data order; all runs start from one warm start "
        f"(seed {settings.warm_start_seed}). Lengths are per completion in tokens, including the end-of-sequence "
        f"token, averaged over the first and last {settings.edge_fraction:.0%} of the logged steps that had such "
        "completions.",
    ]
    total = time.perf_counter() - start
    markdown = summary_markdown(
        summary, step_norm=settings.mechanism.step_norm, total_seconds=total, notes=notes, machine=machine
    )
    (out / "summary.md").write_text(markdown)
    return summary
