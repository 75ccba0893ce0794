"""Where the SmolLM2 recipe's memory goes: peak RSS of one Dr.GRPO step for several micro-batch / gradient-checkpointing
settings, each in a fresh process, beside the sizes that do not depend on them (weights, gradients, AdamW states) and
the largest activation (the logits over the 49,152-token vocabulary).

    python benchmarks/smollm2_memory.py [--variants 8:on 8:off 4:off 16:on] [--threads 1]

A variant `M:on` trains with micro-batches of M completions (`per_device_train_batch_size`, with 32 / M accumulation
steps, so every variant trains on the same 4 prompts x 8 completions per step) and gradient checkpointing on. The
fit over the `off` variants (peak = fixed + slope x M) predicts one micro-batch of 32 without checkpointing, the
setting of the first SmolLM2 run (12.6 GB measured then), without running it (it needs more memory than a shared
machine should give one process).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

COMPLETIONS_PER_STEP = 32


def static_sizes_gb(parameters: int) -> dict[str, float]:
    """float32 weights, their gradients and AdamW's two moment buffers: 4 bytes per parameter each."""
    gb = parameters * 4 / 1e9
    return {"weights": gb, "gradients": gb, "adamw_states": 2 * gb}


def logits_gb(completions: int, tokens: int, vocab: int = 49152) -> float:
    """One float32 logits tensor for a micro-batch (the loss holds several: logits, log-softmax, their gradients)."""
    return completions * tokens * vocab * 4 / 1e9


def worker(micro_batch: int, checkpointing: bool, threads: int) -> None:
    """Child process: one training step with the variant; print its peak RSS and the RSS before training."""
    import torch
    from trainer_overhead import StepTimer, smollm2_trainer

    torch.set_num_threads(threads)
    overrides = {"per_device_train_batch_size": micro_batch,
                 "gradient_accumulation_steps": COMPLETIONS_PER_STEP // micro_batch,
                 "gradient_checkpointing": checkpointing}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        trainer = smollm2_trainer("DrGRPOTrainer", Path(tmp), 1, StepTimer(), extra=overrides)
        loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
        parameters = sum(p.numel() for p in trainer.model.parameters())
        trainer.train()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    print(json.dumps({"peak_gb": peak, "loaded_gb": loaded, "parameters": parameters}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=["8:on", "8:off", "4:off", "16:on"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        micro_batch, checkpointing = args.worker.split(":")
        return worker(int(micro_batch), checkpointing == "on", args.threads)

    results = {}
    for variant in args.variants:
        command = [sys.executable, __file__, "--worker", variant, "--threads", str(args.threads)]
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if done.returncode != 0:
            sys.exit(f"variant {variant} failed:\n{done.stderr[-3000:]}")
        results[variant] = json.loads(done.stdout.strip().splitlines()[-1])
        micro_batch, checkpointing = variant.split(":")
        print(f"micro-batch {micro_batch:>2}, checkpointing {checkpointing:3s}: peak RSS "
              f"{results[variant]['peak_gb']:.2f} GB (after loading {results[variant]['loaded_gb']:.2f} GB)",
              flush=True)  # fmt: skip
    parameters = next(iter(results.values()))["parameters"]
    static = static_sizes_gb(parameters)
    print(f"\n{parameters / 1e6:.1f}M parameters: " + ", ".join(f"{k} {v:.2f} GB" for k, v in static.items()))
    print(f"one logits tensor, 8 completions x 112 tokens: {logits_gb(8, 112):.2f} GB; 32 x 112: "
          f"{logits_gb(32, 112):.2f} GB")  # fmt: skip
    off = sorted((int(v.split(":")[0]), r["peak_gb"]) for v, r in results.items() if v.endswith(":off"))
    if len(off) >= 2:
        (m0, p0), (m1, p1) = off[0], off[-1]
        slope = (p1 - p0) / (m1 - m0)
        print(f"without checkpointing: {slope:.3f} GB per completion in the micro-batch; predicted for one "
              f"micro-batch of 32: {p0 + slope * (32 - m0):.1f} GB")  # fmt: skip
    print(f"1-minute load at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
