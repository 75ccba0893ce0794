"""Step-time overhead of `DrGRPOTrainer` (its advantage override + the diag/ metrics and warnings) over TRL's
`GRPOTrainer`, on the same tiny config, seed and data. Runs are interleaved (GRPO, Dr, Dr, GRPO, ...) so that load
changes on a shared machine hit both alike; the first step of each run (warm-up) is dropped. Target: ratio <= 1.05.

    python benchmarks/trainer_overhead.py [--rounds 4] [--steps 8] [--num_iterations 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from drgrpo.config import DrGRPOConfig
from drgrpo.tasks import write_addition_task
from drgrpo.tiny import build_tiny_model
from drgrpo.trainer import DrGRPOTrainer
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


def run_once(kind: str, model: Path, dataset: Dataset, output_dir: Path, args: argparse.Namespace) -> list[float]:
    """Train `args.steps` steps with one trainer class; return the step times after the first."""
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
    trainer.train()
    return timer.durations[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (each trains both trainers)")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per run (the first is dropped)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--num_generations", type=int, default=8)
    parser.add_argument("--max_completion_length", type=int, default=8)
    parser.add_argument("--num_iterations", type=int, default=1, help="2 also exercises the first-update ratio probe")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = build_tiny_model(tmp / "model", seed=0)
        data = write_addition_task(tmp / "data", max_operand=19, num_test=50)
        rows = [json.loads(line) for line in data["train"].read_text().splitlines()]
        dataset = Dataset.from_list([{"prompt": r["question"], "answer": r["answer"]} for r in rows])
        times: dict[str, list[float]] = {"GRPOTrainer": [], "DrGRPOTrainer": []}
        per_round = []
        for round_index in range(args.rounds):
            order = ["GRPOTrainer", "DrGRPOTrainer"] if round_index % 2 == 0 else ["DrGRPOTrainer", "GRPOTrainer"]
            medians = {}
            for kind in order:
                durations = run_once(kind, model, dataset, tmp / f"run-{round_index}-{kind}", args)
                times[kind].extend(durations)
                medians[kind] = statistics.median(durations)
            per_round.append(medians["DrGRPOTrainer"] / medians["GRPOTrainer"])
            grpo_ms, dr_ms = medians["GRPOTrainer"] * 1e3, medians["DrGRPOTrainer"] * 1e3
            print(
                f"round {round_index + 1}/{args.rounds}: median step GRPOTrainer {grpo_ms:.1f} ms, "
                f"DrGRPOTrainer {dr_ms:.1f} ms, ratio {per_round[-1]:.3f}",
                flush=True,
            )

    grpo, dr = statistics.median(times["GRPOTrainer"]), statistics.median(times["DrGRPOTrainer"])
    load = os.getloadavg()[0]
    print()
    print("| trainer | median step (ms) | steps timed |")
    print("|---|---|---|")
    print(f"| TRL GRPOTrainer | {grpo * 1e3:.1f} | {len(times['GRPOTrainer'])} |")
    print(f"| DrGRPOTrainer (diagnostics on) | {dr * 1e3:.1f} | {len(times['DrGRPOTrainer'])} |")
    print()
    print(
        f"step-time ratio DrGRPOTrainer / GRPOTrainer: {dr / grpo:.3f} (target <= 1.05); per-round ratios "
        f"{', '.join(f'{r:.3f}' for r in per_round)}; median of rounds {statistics.median(per_round):.3f}"
    )
    print(f"1-minute load average at the end: {load:.1f} on {os.cpu_count()} CPUs (a shared machine adds noise).")


if __name__ == "__main__":
    main()
