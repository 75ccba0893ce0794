"""Throughput of `scripts/gpu_smoke.sh`'s runs: steps/s and generated tokens/s, from the files the runs leave.

Training: `trainer_state.json` (transformers' final log entry holds `train_runtime`; TRL logs each step's
`completions/mean_length`, the mean completion length over the step's completions). Evaluation: `samples.jsonl`
(`num_tokens` per sample) and the wall time of `make eval`, measured by the script.

    python -m drgrpo.setup.smoke --train outputs/gpu_smoke/train --completions_per_step 64 \\
        --eval_samples outputs/gpu_smoke/eval/samples.jsonl --eval_seconds 12.5
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

MEAN_LENGTH = "completions/mean_length"  # TRL's GRPOTrainer metric


def training_throughput(log_history: Sequence[Mapping[str, Any]], completions_per_step: int) -> dict[str, float]:
    """Steps, seconds, steps/s and generated tokens/s of one training run, from its `log_history`.

    Generated tokens = sum over logged steps of mean completion length x completions per step; with
    `logging_steps: 1` every step is logged. Tokens/s divides by the whole training time (generation, rewards and
    the update), so it is the rate the run sustains, not the generator's peak.
    """
    final = next((entry for entry in reversed(log_history) if "train_runtime" in entry), None)
    if final is None:
        raise ValueError("log_history has no final entry with train_runtime: the run did not finish.")
    steps = [entry for entry in log_history if MEAN_LENGTH in entry]
    seconds = float(final["train_runtime"])
    tokens = sum(entry[MEAN_LENGTH] for entry in steps) * completions_per_step
    return {
        "steps": float(len(steps)),
        "seconds": seconds,
        "steps_per_second": len(steps) / seconds,
        "generated_tokens": tokens,
        "generated_tokens_per_second": tokens / seconds,
    }


def eval_throughput(samples: Iterable[Mapping[str, Any]], seconds: float) -> dict[str, float]:
    """Samples, generated tokens and tokens/s of an evaluation over `seconds` of wall time."""
    rows = list(samples)
    tokens = float(sum(row["num_tokens"] for row in rows))
    return {
        "samples": float(len(rows)),
        "seconds": seconds,
        "generated_tokens": tokens,
        "generated_tokens_per_second": tokens / seconds,
    }


def _line(name: str, numbers: Mapping[str, float]) -> str:
    parts = [f"{numbers['generated_tokens_per_second']:.0f} generated tokens/s"]
    if "steps_per_second" in numbers:
        parts.insert(0, f"{numbers['steps_per_second']:.2f} steps/s ({numbers['steps']:.0f} steps)")
    else:
        parts.append(f"{numbers['samples']:.0f} samples")
    return f"{name}: {', '.join(parts)} in {numbers['seconds']:.1f} s"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", action="append", default=[], help="NAME=OUTPUT_DIR of a training run (repeat)")
    parser.add_argument("--completions_per_step", type=int, required=True)
    parser.add_argument("--eval_samples", help="samples.jsonl of the evaluation")
    parser.add_argument("--eval_seconds", type=float, help="wall time of the evaluation")
    args = parser.parse_args(argv)
    for spec in args.train:
        name, _, folder = spec.partition("=")
        history = json.loads((Path(folder) / "trainer_state.json").read_text())["log_history"]
        print(_line(name, training_throughput(history, args.completions_per_step)))
    if args.eval_samples:
        rows = [json.loads(line) for line in Path(args.eval_samples).read_text().splitlines() if line.strip()]
        print(
            _line(
                "make eval (transformers backend, wall time incl. start-up)", eval_throughput(rows, args.eval_seconds)
            )
        )


if __name__ == "__main__":
    main()
