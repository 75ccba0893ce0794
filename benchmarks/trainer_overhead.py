"""Step-time overhead of `DrGRPOTrainer` (its advantage override + the diag/ metrics and warnings) over TRL's
`GRPOTrainer`, on the same tiny config, seed and data. Runs are interleaved (GRPO, Dr, Dr, GRPO, ...) so that load
changes on a shared machine hit both alike; the first step of each run (warm-up) is dropped. The headline ratio
compares the least-disturbed time of each step position across rounds (noise from other processes only adds time).
Target: ratio <= 1.05.

    python benchmarks/trainer_overhead.py [--rounds 10] [--steps 15] [--num_iterations 1]
    python benchmarks/trainer_overhead.py --model smollm2 [--rounds 2] [--steps 3] [--threads 1]

`--model smollm2` runs the real recipe (recipes/smollm2_135m_drgrpo.yaml: SmolLM2-135M-Instruct, 4 prompts x 8
completions of up to 64 tokens, gradient checkpointing, micro-batches of 8) with each trainer in a fresh process, so
that the peak resident memory of each is measured too (a ratio of peak RSS, goal <= 1.05). TRL's GRPOTrainer gets
the recipe's TRL keys with the algorithm the dr_grpo switch resolves to; `zero_reward_for_truncated`, which TRL does
not have, is off in both, so that both trainers do the same work step for step.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path

from datasets import Dataset
from transformers import PrinterCallback, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

import drgrpo.algorithm.trainer
from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.trainer import DrGRPOTrainer
from drgrpo.experiments.tasks import write_addition_task
from drgrpo.experiments.tiny import build_tiny_model
from drgrpo.observe.failure_warnings import DiagnosticsCallback
from rewards import get_reward_funcs


class StepTimer(TrainerCallback):
    """Wall time of every optimizer step: generation, rewards, advantages, diagnostics, loss, backward, update."""

    def __init__(self) -> None:
        self.durations: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.durations.append(time.perf_counter() - self._start)


class OwnCodeTimer:
    """Total time spent in the code DrGRPOTrainer adds to TRL's step: a direct, noise-robust measure of the overhead
    (the step-time ratio swings with whatever else the machine runs)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, function):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        return timed


def instrument(trainer: DrGRPOTrainer, timer: OwnCodeTimer) -> None:
    """Time the advantage replacement, the diag/ metrics, the ratio probe and the warning callback of one trainer."""
    for name in ("_log_batch_diagnostics", "_log_first_update_ratios"):
        setattr(trainer, name, timer.wrap(getattr(trainer, name)))
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, DiagnosticsCallback):
            callback.on_log = timer.wrap(callback.on_log)


def run_once(
    kind: str, model: Path, dataset: Dataset, output_dir: Path, args: argparse.Namespace
) -> tuple[list[float], float]:
    """Train `args.steps` steps with one trainer class; return the step times after the first and the total time
    spent in DrGRPOTrainer's own code (0 for TRL's trainer)."""
    # The same algorithm in both: Dr.GRPO's three TRL settings, written out for GRPOConfig.
    common = dict(
        output_dir=str(output_dir), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
        max_steps=args.steps, per_device_train_batch_size=args.batch_size, num_generations=args.num_generations,
        max_completion_length=args.max_completion_length, num_iterations=args.num_iterations, logging_steps=1,
        learning_rate=1e-4, seed=0, disable_tqdm=True, scale_rewards="none", loss_type="dr_grpo", beta=0.0,
    )  # fmt: skip
    if kind == "GRPOTrainer":
        trainer_class, config = GRPOTrainer, GRPOConfig(**common)
    else:
        trainer_class, config = DrGRPOTrainer, DrGRPOConfig(**common)
    timer = StepTimer()
    trainer = trainer_class(
        model=str(model), reward_funcs=get_reward_funcs(["accuracy"]), args=config, train_dataset=dataset,
        callbacks=[timer],
    )  # fmt: skip
    trainer.remove_callback(PrinterCallback)  # keep the output to the timing table (metrics are still computed)
    own = OwnCodeTimer()
    if isinstance(trainer, DrGRPOTrainer):
        instrument(trainer, own)
        # The advantage override calls these two through the trainer module's namespace.
        originals = {name: getattr(drgrpo.algorithm.trainer, name) for name in ("combine_rewards", "group_advantages")}
        for name, function in originals.items():
            setattr(drgrpo.algorithm.trainer, name, own.wrap(function))
    try:
        trainer.train()
    finally:
        if isinstance(trainer, DrGRPOTrainer):
            for name, function in originals.items():
                setattr(drgrpo.algorithm.trainer, name, function)
    return timer.durations[1:], own.seconds


SMOLLM2_RECIPE = "recipes/smollm2_135m_drgrpo.yaml"


def smollm2_trainer(kind: str, output_dir: Path, steps: int, timer: StepTimer, extra: dict | None = None):
    """One trainer on the SmolLM2 recipe (both kinds: the same model, data, seed and resolved algorithm)."""
    from transformers import AutoTokenizer

    from drgrpo.core.models import resolve_model
    from drgrpo.data import load_prompt_dataset
    from drgrpo.experiments.arithmetic_task import write_chat_addition_task
    from drgrpo.recipe.cli import parse_recipe
    from drgrpo.recipe.file import read_recipe

    data = write_chat_addition_task(output_dir / "data", seed=0)
    overrides = {"dataset_path": str(data["train"]), "output_dir": str(output_dir / "run"), "max_steps": steps,
                 "zero_reward_for_truncated": False, "logging_steps": 1, "disable_tqdm": True}  # fmt: skip
    overrides.update(extra or {})
    argv = [SMOLLM2_RECIPE, *(x for key, value in overrides.items() for x in (f"--{key}", str(value)))]
    script_args, dr_config, model_args = parse_recipe(argv)
    model = resolve_model(model_args.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(model)
    dataset, _ = load_prompt_dataset(script_args, seed=dr_config.seed, tokenizer=tokenizer)
    if kind == "GRPOTrainer":
        trl_keys = {f.name for f in fields(GRPOConfig) if f.init}
        values = {key: value for key, value in {**read_recipe(SMOLLM2_RECIPE), **overrides}.items() if key in trl_keys}
        resolved = {key: getattr(dr_config, key) for key in ("scale_rewards", "loss_type", "beta")}
        trainer_class, config = GRPOTrainer, GRPOConfig(**{**values, **resolved})
    else:
        trainer_class, config = DrGRPOTrainer, dr_config
    rewards = get_reward_funcs(script_args.reward_funcs, settings=script_args, max_completion_length=64)
    trainer = trainer_class(model=model, reward_funcs=rewards, args=config, train_dataset=dataset,
                            processing_class=tokenizer, callbacks=[timer])  # fmt: skip
    trainer.remove_callback(PrinterCallback)
    return trainer


def smollm2_worker(kind: str, steps: int, threads: int) -> None:
    """Child process: train `steps` steps with one trainer, print its step times and peak RSS as one JSON line."""
    import torch

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        timer = StepTimer()
        smollm2_trainer(kind, Path(tmp), steps, timer).train()
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    print(json.dumps({"kind": kind, "durations": timer.durations[1:], "peak_rss_gb": peak_gb}))


def smollm2_main(args: argparse.Namespace) -> None:
    """Interleaved fresh-process runs of both trainers on the SmolLM2 recipe; step-time and peak-RSS ratios."""
    results: dict[str, list[dict]] = {"GRPOTrainer": [], "DrGRPOTrainer": []}
    for round_index in range(args.rounds):
        order = ["GRPOTrainer", "DrGRPOTrainer"] if round_index % 2 == 0 else ["DrGRPOTrainer", "GRPOTrainer"]
        for kind in order:
            command = [sys.executable, __file__, "--model", "smollm2", "--worker", kind, "--steps", str(args.steps),
                       "--threads", str(args.threads)]  # fmt: skip
            env = {**os.environ, "HF_HUB_OFFLINE": "1"}
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                sys.exit(f"{kind} run failed:\n{done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            results[kind].append(result)
            steps = [round(d, 1) for d in result["durations"]]
            print(f"round {round_index + 1}/{args.rounds} {kind}: steps {steps} s, peak RSS "
                  f"{result['peak_rss_gb']:.2f} GB (load {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
    time_least = {k: least_disturbed_total([r["durations"] for r in rs]) for k, rs in results.items()}
    peak = {k: min(r["peak_rss_gb"] for r in rs) for k, rs in results.items()}
    print()
    print("| trainer | least-disturbed time, timed steps (s) | peak RSS (GB) |")
    print("|---|---|---|")
    for kind in results:
        print(f"| {kind} | {time_least[kind]:.1f} | {peak[kind]:.2f} |")
    print(
        f"\nSmolLM2 recipe, {args.steps - 1} timed steps x {args.rounds} rounds, {args.threads} torch thread(s): "
        f"step-time ratio DrGRPOTrainer / GRPOTrainer {time_least['DrGRPOTrainer'] / time_least['GRPOTrainer']:.3f}, "
        f"peak-RSS ratio {peak['DrGRPOTrainer'] / peak['GRPOTrainer']:.3f} (goal <= 1.05 each); "
        f"1-minute load at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="tiny", help="the tiny model, or SmolLM2")
    parser.add_argument("--threads", type=int, default=1, help="smollm2: torch threads of both runs")
    parser.add_argument("--worker", choices=["GRPOTrainer", "DrGRPOTrainer"], help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 10; smollm2: 2)")
    parser.add_argument("--steps", type=int, default=None, help="steps per run, the first dropped (15; smollm2: 3)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--num_generations", type=int, default=8)
    parser.add_argument("--max_completion_length", type=int, default=8)
    parser.add_argument("--num_iterations", type=int, default=1, help="2 also exercises the first-update ratio probe")
    args = parser.parse_args()
    smollm2 = args.model == "smollm2"
    args.rounds = args.rounds or (2 if smollm2 else 10)
    args.steps = args.steps or (3 if smollm2 else 15)
    if args.worker:
        return smollm2_worker(args.worker, args.steps, args.threads)
    if smollm2:
        return smollm2_main(args)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = build_tiny_model(tmp / "model", seed=0)
        data = write_addition_task(tmp / "data", max_operand=19, num_test=50)
        rows = [json.loads(line) for line in data["train"].read_text().splitlines()]
        dataset = Dataset.from_list([{"prompt": r["question"], "answer": r["answer"]} for r in rows])
        runs: dict[str, list[list[float]]] = {"GRPOTrainer": [], "DrGRPOTrainer": []}
        own_seconds = 0.0
        for round_index in range(args.rounds):
            order = ["GRPOTrainer", "DrGRPOTrainer"] if round_index % 2 == 0 else ["DrGRPOTrainer", "GRPOTrainer"]
            for kind in order:
                durations, own = run_once(kind, model, dataset, tmp / f"run-{round_index}-{kind}", args)
                runs[kind].append(durations)
                own_seconds += own
            totals = {kind: sum(durations[-1]) for kind, durations in runs.items()}
            print(
                f"round {round_index + 1}/{args.rounds}: GRPOTrainer {totals['GRPOTrainer']:.2f} s, DrGRPOTrainer "
                f"{totals['DrGRPOTrainer']:.2f} s for {args.steps - 1} steps, ratio "
                f"{totals['DrGRPOTrainer'] / totals['GRPOTrainer']:.3f}",
                flush=True,
            )

    least = {kind: least_disturbed_total(durations) for kind, durations in runs.items()}
    rounds = [sum(dr) / sum(grpo) for grpo, dr in zip(runs["GRPOTrainer"], runs["DrGRPOTrainer"], strict=True)]
    print()
    print("| trainer | least-disturbed time for the timed steps (s) | median step over all rounds (ms) |")
    print("|---|---|---|")
    for kind, name in (("GRPOTrainer", "TRL GRPOTrainer"), ("DrGRPOTrainer", "DrGRPOTrainer (diagnostics on)")):
        median_ms = statistics.median(d for durations in runs[kind] for d in durations) * 1e3
        print(f"| {name} | {least[kind]:.3f} | {median_ms:.1f} |")
    print()
    print(
        f"step-time ratio DrGRPOTrainer / GRPOTrainer: {least['DrGRPOTrainer'] / least['GRPOTrainer']:.3f} "
        f"(least-disturbed; target <= 1.05); median of per-round ratios {statistics.median(rounds):.3f} "
        f"({', '.join(f'{r:.2f}' for r in rounds)})"
    )
    own_ms = own_seconds / (args.rounds * args.steps) * 1e3
    step_ms = least["DrGRPOTrainer"] / (args.steps - 1) * 1e3
    print(
        f"time in DrGRPOTrainer's own code (advantages, diag/ metrics, ratio probe, warnings): {own_ms:.2f} ms per "
        f"step, {100 * own_ms / step_ms:.2f}% of its least-disturbed step ({step_ms:.0f} ms)"
    )
    load = os.getloadavg()[0]
    print(f"1-minute load average at the end: {load:.1f} on {os.cpu_count()} CPUs (a shared machine adds noise).")


def least_disturbed_total(runs: list[list[float]]) -> float:
    """Sum over step positions of the fastest time seen at that position across rounds.

    Both trainers do the same work at a given step (same seed, data and advantages), and interference from other
    processes only ever adds time, so the per-position minimum is the least noisy estimate of the step's own cost.
    """
    return sum(min(times) for times in zip(*runs, strict=True))


if __name__ == "__main__":
    main()
