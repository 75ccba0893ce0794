"""Generation on CPU, side by side in one process: the demo's 4 prompts x 8 completions through
`DrGRPOTrainer._generate_single_turn`, every row generating all `max_completion_length` tokens (64: no end token can
stop a row early, so every variant does the same work), with

- `engine`: the CPU generation engine (`generation_engine: auto`, drgrpo/algorithm/rollout/engine.py): a bf16 copy of
  the weights (with `--bf16 true`) synced once per optimizer step, shared prompt prefill, preallocated KV cache,
  per-row sampler;
- `trl`: TRL's transformers `generate` on the trained float32 weights (`generation_engine: trl`, the path before issue
  40), with the model prepared by accelerate as `trainer.train()` prepares it, so that with `--bf16 true` every
  forward runs under accelerate's bf16 autocast, as in training;
- optional: `trl_static_cache` (`cache_implementation: static`) and `trl_continuous_batching`
  (`use_transformers_continuous_batching: true`, which casts the model itself to bf16 with `--bf16 true`).

    python benchmarks/cpu_generation.py [--rounds 3] [--threads 2] [--bf16 true] [--variants engine trl]

Rounds are interleaved (A B, B A, ...); each variant's least time over the rounds is its figure (other processes only
add time), with its CPU seconds, the precision measured inside its forward (weights and output dtype, autocast on or
off) and the ratio to `trl`. Every round samples with the same seed.
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
    "engine": {"generation_engine": "auto"},
    "trl": {"generation_engine": "trl"},
    "trl_static_cache": {"generation_engine": "trl", "cache_implementation": "static"},
    "trl_continuous_batching": {"generation_engine": "trl", "use_transformers_continuous_batching": "true"},
}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def full_length(trainer) -> None:
    """No row may stop before `max_completion_length`: the engine gets no end token, TRL's generate a minimum."""
    if trainer._engine is not None:
        trainer._engine.engine.eos = frozenset()
    else:
        trainer.generation_config.min_new_tokens = trainer.max_completion_length


def precision_probe(trainer, seen: set):
    """Record, inside the forward of each model that generates, its weights' dtype, its output dtype and autocast."""

    def record(module, inputs, output):
        autocast = "on" if torch.is_autocast_enabled("cpu") else "off"
        weight = getattr(module, "weight", None)
        dtype = weight.dtype if weight is not None else module.packed.dtype
        seen.add(f"weights {str(dtype).removeprefix('torch.')}, autocast {autocast}, output {output.dtype}")

    handles = []

    def attach(model):
        handles.append(model.model.layers[0].mlp.down_proj.register_forward_hook(record))

    return attach, handles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bf16", default="true")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=["engine", "trl"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    trainers = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.variants:
            OURS[name] = {"bf16": args.bf16, **VARIANTS[name]}
            trainer = build(name, Path(tmp) / name, 1, StepClock())
            # As `trainer.train()` prepares it: accelerate wraps the forward in bf16 autocast when bf16 is on.
            trainer.model_wrapped = trainer.accelerator.prepare_model(trainer.model)
            full_length(trainer)
            trainers[name] = trainer
        first = next(iter(trainers.values()))
        rows = next(iter(first.get_train_dataloader()))
        tokenizer = first.processing_class
        texts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]
        prompts = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
        best: dict[str, list[float]] = {}
        precision: dict[str, set] = {name: set() for name in trainers}
        for round_index in range(args.rounds):
            order = args.variants if round_index % 2 == 0 else list(reversed(args.variants))
            for name in order:
                trainer = trainers[name]
                trainer.model.train()
                torch.manual_seed(round_index)
                attach, handles = precision_probe(trainer, precision[name])
                attach(trainer.model)
                if trainer._engine is not None and trainer._engine.weights.copy is not None:
                    attach(trainer._engine.weights.copy)
                start, cpu = time.perf_counter(), cpu_seconds()
                completions, _ = trainer._generate_single_turn(prompts, None, {}, trainer.num_generations)
                wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu
                for handle in handles:
                    handle.remove()
                if trainer._engine is not None and not precision[name] and trainer._engine.weights.copy is not None:
                    precision[name].add("(the copy was built in this round: probed from the next)")
                tokens = sum(len(c) for c in completions)
                print(f"round {round_index + 1} {name}: {wall:.2f} s wall, {cpu:.1f} s CPU, {tokens} tokens "
                      f"({tokens / wall:.0f}/s; load {os.getloadavg()[0]:.2f})", flush=True)  # fmt: skip
                previous = best.get(name, [float("inf"), float("inf")])
                best[name] = [min(wall, previous[0]), min(cpu, previous[1])]
    reference = "trl" if "trl" in best else args.variants[0]
    print(f"\nleast time over {args.rounds} rounds (the first includes the engine's copy), {args.threads} thread(s), "
          f"bf16 {args.bf16}, {len(prompts)} rows x {first.max_completion_length} tokens:")  # fmt: skip
    print(f"| variant | precision measured in the forward | wall (s) | CPU (s) | speed-up vs {reference} (wall) |")
    print("|---|---|---:|---:|---:|")
    for name, (wall, cpu) in best.items():
        measured = "; ".join(sorted(precision[name])) or "n/a"
        print(f"| {name} | {measured} | {wall:.2f} | {cpu:.1f} | {best[reference][0] / wall:.2f}x |")
    print(f"load at the end {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
