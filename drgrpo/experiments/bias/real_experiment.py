"""`make bias-real`: the length bias on a real model, SmolLM2-135M-Instruct. The fixed-batch mechanism on its own
answers (`drgrpo.experiments.bias.chat_mechanism`), then GRPO vs Dr.GRPO trained from the same start on several seeds
through `make compare`'s long task (`drgrpo.experiments.comparison`, `recipes/smollm2_135m_long_{grpo,drgrpo}.yaml`),
and the report (`drgrpo.experiments.bias.real_report`).

Everything is kept as it finishes (each mechanism batch in `mechanism_batches.jsonl`, then `mechanism.json`; each
run's `row.json`, checkpoints every 10 steps, the evaluations' samples), so a killed `make bias-real` rerun continues
where it stopped. With `max_minutes` one invocation stops at the first safe point past that budget (a checkpoint
saved, no batch or evaluation started that would not finish) and says so: on a shared machine each command holds the
CPU for a bounded time, and the same command run again continues. It prints its expected time first, from times
measured on the 2-core development machine (`MEASURED`).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from drgrpo.experiments.bias.chat_mechanism import ChatMechanismSettings, run_chat_mechanism
from drgrpo.experiments.bias.experiment import machine_facts

logger = logging.getLogger(__name__)

MODEL = "smollm2-135m-instruct"
# Seconds measured on 2 cores of an Intel Xeon (2026-12-02, float32, load average given), for the expected time printed
# at the start. The train step is the mean over seeds 1 and 2's four runs, GRPO and Dr.GRPO trained side by side on one
# torch thread each (16.8 s; seed 0's ran at 36 s beside the mechanism, load 2.9); an AMD EPYC under load 8.5 took
# 680 / 130 / 3.0 s.
MEASURED = {
    "load": 2.1,
    "mechanism_batch": 60.0,  # one batch of 4 prompts x (8 + 8) answers: sampling, two gradients, three scorings
    "train_step": 17.0,  # one step of 2 prompts x 8 completions at 128 tokens, mean over a run
    "eval_problem": 0.3,  # one held-out problem, greedy, 128 tokens, batches of 32
}


@dataclass
class RealBiasSettings:
    """What `make bias-real` runs. Both algorithms train once per seed from SmolLM2 as prepared, on the same data."""

    output_dir: str = "outputs/bias-real"
    seeds: tuple[int, ...] = (0, 1, 2)
    data_seed: int = 0
    num_test: int = 100
    edge_fraction: float = 0.1
    parts: tuple[str, ...] = ("mechanism", "runs")  # one part alone: the mechanism first, or only the runs
    max_minutes: float | None = None  # stop at the first safe point past this budget; rerun to continue
    # Each seed's GRPO and Dr.GRPO at once, the cores split between them: how the README's times were measured.
    side_by_side: bool = True
    mechanism: ChatMechanismSettings = field(default_factory=ChatMechanismSettings)
    overrides: tuple[str, ...] = ()


def expected_seconds(settings: RealBiasSettings, steps: int, prompts_per_step: int) -> float:
    """The whole experiment's expected wall time from `MEASURED` (a train step scaled by its prompts from 2): mechanism,
    `2 x seeds` runs (two at a time `side_by_side`), and `1 + 2 x seeds` held-out evaluations."""
    runs = 2 * len(settings.seeds)
    run_slots = len(settings.seeds) if settings.side_by_side else runs
    step = MEASURED["train_step"] * prompts_per_step / 2
    batch = MEASURED["mechanism_batch"] * settings.mechanism.prompts_per_batch / 4
    return (
        settings.mechanism.num_batches * batch
        + run_slots * steps * step
        + (1 + runs) * settings.num_test * MEASURED["eval_problem"]
    )


def mechanism_prompts(train_file: Path, tokenizer) -> tuple[list[str], list[str]]:
    """The training problems with two two-digit operands, rendered with the chat template (all one token length, so
    a batch needs no padding), and their answers."""
    prompts, golds = [], []
    for line in train_file.read_text().splitlines():
        row = json.loads(line)
        operands = row["question"].removeprefix("What is ").split("?")[0].split(" + ")
        if all(len(x) == 2 for x in operands):
            messages = [{"role": "user", "content": row["question"]}]
            prompts.append(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
            golds.append(row["answer"])
    return prompts, golds


def recipe_shape(settings: RealBiasSettings) -> tuple[int, int]:
    """(max_steps, prompts per step) of the long GRPO recipe with the overrides applied."""
    from drgrpo.experiments.comparison import RECIPES
    from drgrpo.recipe.cli import parse_recipe

    _, args, _ = parse_recipe([RECIPES["smollm2-long"][0], *settings.overrides])
    return args.max_steps, args.per_device_train_batch_size * args.gradient_accumulation_steps // args.num_generations


def run_real_bias(settings: RealBiasSettings) -> dict:
    """Run (or continue) everything; write `summary.md`, `summary.json` and `curves.png` under `output_dir` once the
    mechanism and every run are done. Returns the summary, or `{}` when a part is left (not asked for, or stopped
    by `max_minutes`: raises `OutOfTime` then)."""
    from transformers import AutoTokenizer

    from drgrpo.core.models import resolve_model
    from drgrpo.experiments.arithmetic_task import write_chat_addition_task
    from drgrpo.experiments.bias.real_report import write_report
    from drgrpo.experiments.budget import Deadline
    from drgrpo.experiments.comparison import CompareSettings, run_comparison

    start = time.perf_counter()
    deadline = Deadline(None if settings.max_minutes is None else 60 * settings.max_minutes)
    out = Path(settings.output_dir)
    machine = machine_facts()
    steps, prompts_per_step = recipe_shape(settings)
    expected = expected_seconds(settings, steps, prompts_per_step)
    print(f"Machine: {machine}", flush=True)
    print(
        f"Expected time: about {expected / 3600:.1f} h from scratch (mechanism {settings.mechanism.num_batches} "
        f"batches, {2 * len(settings.seeds)} runs of {steps} steps of {prompts_per_step} prompts"
        f"{' two at a time' if settings.side_by_side else ' one after the other'}, {1 + 2 * len(settings.seeds)} "
        "evaluations of "
        f"{settings.num_test} problems), as measured on 2 cores at load "
        f"{MEASURED['load']:g}; finished parts in {out} are kept and skipped.",
        flush=True,
    )
    model = str(resolve_model(MODEL))
    data = write_chat_addition_task(out / "data", seed=settings.data_seed, num_test=settings.num_test)

    mechanism_file = out / "mechanism.json"
    mechanism = None
    if mechanism_file.is_file():
        logger.warning("Keeping the mechanism's result in %s (delete it to measure again)", mechanism_file)
        mechanism = json.loads(mechanism_file.read_text())
    elif "mechanism" in settings.parts:
        prompts, golds = mechanism_prompts(data["train"], AutoTokenizer.from_pretrained(model))
        batches = out / "mechanism_batches.jsonl"
        mechanism = run_chat_mechanism(model, prompts, golds, settings.mechanism, batches, deadline)
        mechanism_file.write_text(json.dumps(mechanism, indent=1) + "\n")
    if mechanism is not None:
        logger.warning("mechanism: %s", json.dumps({k: v for k, v in mechanism.items() if k != "details"}))

    comparisons = {}
    for seed in settings.seeds if "runs" in settings.parts else ():
        compare = CompareSettings(
            task="smollm2-long",
            output_dir=str(out / f"seed{seed}"),
            seed=seed,
            data_seed=settings.data_seed,
            data_dir=str(out / "data"),
            num_test=settings.num_test,
            baseline_dir=str(out / "eval" / "start"),
            overrides=settings.overrides,
            resume=True,
            deadline=deadline,
            side_by_side=settings.side_by_side,
        )
        comparisons[seed] = run_comparison(compare)
    if mechanism is None or set(comparisons) != set(settings.seeds):
        return {}
    return write_report(out, mechanism, comparisons, settings, machine, time.perf_counter() - start)
