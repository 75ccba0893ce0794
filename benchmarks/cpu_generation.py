"""TRL's generation on CPU, three ways, side by side in one process: the demo's 4 prompts x 8 completions of up to 64
tokens through `GRPOTrainer._generate_single_turn` with (a) transformers `generate` and its dynamic KV cache (TRL's
default), (b) `cache_implementation: static`, (c) `use_transformers_continuous_batching: true` (paged attention).
Rounds interleaved; the least time of each variant over the rounds, wall and CPU seconds, tokens generated.

    python benchmarks/cpu_generation.py [--rounds 2] [--threads 1] [--bf16 false]

Each variant gets its own trainer on the same model; every round samples with the same seed, so (a) and (b)
generate the same tokens. With `--bf16 true` note that TRL's continuous batching casts the training model itself to
bf16 (`unwrapped_model.to(torch.bfloat16)`, never cast back): float32 master weights would be lost.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import torch
from cpu_step_speed import OURS, StepClock, build

VARIANTS = {
    "dynamic_cache": {},
    "static_cache": {"cache_implementation": "static"},
    "continuous_batching": {"use_transformers_continuous_batching": "true"},
}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--bf16", default="false")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    trainers = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.variants:
            OURS[name] = {"bf16": args.bf16, **VARIANTS[name]}
            trainers[name] = build(name, Path(tmp) / name, 1, StepClock())
        first = next(iter(trainers.values()))
        rows = next(iter(first.get_train_dataloader()))
        tokenizer = first.processing_class
        texts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]
        prompts = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
        best: dict[str, tuple[float, float, int]] = {}
        for round_index in range(args.rounds):
            order = args.variants if round_index % 2 == 0 else list(reversed(args.variants))
            for name in order:
                trainer = trainers[name]
                trainer.model.eval()
                torch.manual_seed(round_index)
                start, cpu = time.perf_counter(), cpu_seconds()
                completions, _ = trainer._generate_single_turn(prompts, None, {}, trainer.num_generations)
                wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu
                tokens = sum(len(c) for c in completions)
                print(f"round {round_index + 1} {name}: {wall:.1f} s wall, {cpu:.1f} s CPU, {tokens} tokens "
                      f"({tokens / wall:.0f}/s; load {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
                previous = best.get(name)
                best[name] = (min(wall, previous[0]) if previous else wall, min(cpu, previous[1]) if previous else cpu,
                              tokens)  # fmt: skip
    base = best[args.variants[0]]
    print(f"\nleast time over {args.rounds} rounds, {args.threads} thread(s), bf16 {args.bf16}:")
    for name, (wall, cpu, tokens) in best.items():
        print(f"  {name}: {wall:.1f} s wall ({base[0] / wall:.2f}x of {args.variants[0]}), {cpu:.1f} s CPU "
              f"({base[1] / cpu:.2f}x), {tokens} tokens in the last round")  # fmt: skip
    print(f"load at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
