"""Which precision each stage of a run computes in, read from the built trainer: the start-up `precision:` line.

What was measured (TRL 1.16, transformers 5.24, accelerate 1.15, on CPU): with `bf16: true` accelerate wraps the
model's forward in `torch.autocast(dtype=bfloat16)` when the trainer prepares it, and TRL's transformers generation
calls that same forward on the unwrapped model (`unwrap_model_for_generation` keeps accelerate's wrapper), so
generation autocasts too: inside both, matmul outputs are bf16 while the weights stay float32, and so do AdamW's
states (`tests/test_cpu_bf16.py` checks all of it). TRL's in-loop evaluation uses the same forward. vLLM generates
in its own dtype; TRL's transformers continuous batching casts the model itself to bf16 (so it is not used on CPU).
On a CPU the generation engine (drgrpo/algorithm/rollout/engine.py, `generation_engine: auto`) generates instead of
TRL's `generate`: from a bf16 copy of the weights with bf16 on, else from the trained weights themselves (their
linear layers packed for oneDNN once per optimizer step); TRL's in-loop evaluation and the project's evaluator
generate with it too.
"""

from __future__ import annotations


def compute_precision(mixed_precision: str, deepspeed: bool) -> str:
    """How the forward computes: `bf16 autocast`, `fp16 autocast`, DeepSpeed's bf16/fp16 weights, or `float32`."""
    if mixed_precision in ("bf16", "fp16"):
        return f"{mixed_precision} (DeepSpeed)" if deepspeed else f"{mixed_precision} autocast"
    return "float32"


def precision_line(
    mixed_precision: str,
    *,
    deepspeed: bool,
    trained_dtypes: set[str],
    use_vllm: bool,
    continuous_batching: bool,
    reason: str,
    engine: str = "trl",
) -> str:
    """The start-up line: training, TRL's generation and evaluation precision, the trained weights' dtype, why."""
    compute = compute_precision(mixed_precision, deepspeed)
    weights = "/".join(sorted(trained_dtypes)) or "none"
    if use_vllm:
        generation = "vLLM's own dtype"
    elif engine == "cpu":
        generation = (
            "bf16 weights (the CPU engine's copy, synced once per optimizer step)"
            if mixed_precision == "bf16" and not deepspeed
            else f"{weights} weights (the CPU engine, on the trained weights)"
        )
    elif continuous_batching and mixed_precision in ("bf16", "fp16"):
        generation = f"{mixed_precision} weights (TRL's continuous batching casts the model)"
    else:
        generation = f"{compute} (TRL's transformers generate, the same forward)"
    return (
        f"precision: training {compute} over {weights} trained weights (AdamW's states alike), "
        f"generation {generation}, evaluation as generation (TRL's eval steps; the demo's evaluation follows "
        f"training); {reason}"
    )


def trainer_precision_line(trainer) -> str:
    """`precision_line` for a built `DrGRPOTrainer` (what engaged, not what was asked)."""
    args = trainer.args
    return precision_line(
        trainer.accelerator.mixed_precision,
        deepspeed=trainer.is_deepspeed_enabled,
        trained_dtypes={str(p.dtype).removeprefix("torch.") for p in trainer.model.parameters() if p.requires_grad},
        use_vllm=args.use_vllm,
        continuous_batching=args.use_transformers_continuous_batching,
        reason=getattr(args, "bf16_reason", f"bf16: {args.bf16}"),
        engine=getattr(args, "engine", "trl"),
    )
