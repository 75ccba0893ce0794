"""Master weights: a full fine-tune without DeepSpeed trains float32 copies of half-precision weights.

DeepSpeed (bf16 or fp16 enabled) keeps float32 master weights of its own and steps those. DDP
(`accelerate_configs/ddp.yaml`), FSDP and a single process step the model's own parameters: loaded in bfloat16
(`dtype: bfloat16`, or `auto` for a bf16 checkpoint), an Adam update at learning_rate 1e-6 changes each weight by
about 1e-6 of itself, far below bfloat16's resolution (8 significant bits: 2^-8 = 0.4% relative), and rounds away.
So `train()` casts the trained parameters to float32 before training in that case (bf16 autocast, `bf16: true`,
still computes in bf16), logs it, and saves the final model in the dtype it was loaded in; checkpoints keep float32,
so that a resumed run continues from the master weights. LoRA's adapters are float32 already (peft's
`autocast_adapter_dtype`), so a LoRA run is unchanged. Model-state memory: float32 weights, gradients and Adam's two
moments, 16 bytes per parameter plus bf16 autocast copies; the planner's DDP line (DeepSpeed's estimator, 20 bytes per
parameter) bounds it.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

HALF_PRECISION = ("bfloat16", "float16")


def needs_master_weights(weight_dtype: str | None, *, deepspeed: bool) -> bool:
    """Whether trained weights of `weight_dtype` ("bfloat16", "torch.bfloat16", ...) need float32 master copies."""
    name = str(weight_dtype or "").removeprefix("torch.")
    return not deepspeed and name in HALF_PRECISION


def keep_float32_master_weights(model, *, deepspeed: bool) -> tuple[object, list[str]] | None:
    """Cast the trained half-precision parameters of `model` to float32 (module docstring): (their dtype, their
    names), or None when nothing was cast (DeepSpeed, LoRA, a float32 model)."""
    import torch

    half = [
        (name, p)
        for name, p in model.named_parameters()
        if p.requires_grad and needs_master_weights(str(p.dtype), deepspeed=deepspeed)
    ]
    if not half:
        return None
    dtype = half[0][1].dtype
    for _, parameter in half:
        parameter.data = parameter.data.to(torch.float32)
    shown = str(dtype).removeprefix("torch.")
    logger.warning(
        "master weights: %s trained parameters are %s and no DeepSpeed keeps float32 copies of them: they train in "
        "float32 (bf16: true still computes in bf16); the final model is saved in %s (drgrpo/run/precision.py)",
        f"{sum(p.numel() for _, p in half):,}",
        shown,
        shown,
    )
    return dtype, [name for name, _ in half]


def restore_dtype(model, cast: tuple[object, list[str]]) -> None:
    """Cast the float32 master weights that `keep_float32_master_weights` made back to their dtype (the final save)."""
    dtype, names = cast
    parameters = dict(model.named_parameters())
    for name in names:
        parameters[name].data = parameters[name].data.to(dtype)


def engaged_summary(trainer) -> str:
    """What the run actually engaged, read from the built trainer (one line; `scripts/gpu_smoke.sh` checks it):
    accelerate's mixed precision, DeepSpeed's ZeRO stage and whether the parameters are partitioned, the number of
    processes and the trained parameters' dtype."""
    accelerator = trainer.accelerator
    parts = [f"mixed precision {accelerator.mixed_precision}"]
    if trainer.is_deepspeed_enabled:
        stage = accelerator.state.deepspeed_plugin.zero_stage
        partitioned = any(hasattr(p, "ds_id") for p in trainer.model.parameters())
        parts.append(f"DeepSpeed ZeRO stage {stage}" + (" (parameters partitioned)" if partitioned else ""))
    else:
        parts.append("no DeepSpeed")
    trained = {str(p.dtype).removeprefix("torch.") for p in trainer.model.parameters() if p.requires_grad}
    parts.append(f"{accelerator.num_processes} process(es), trained parameters {'/'.join(sorted(trained)) or 'none'}")
    return ", ".join(parts)


def engine_summary(trainer) -> str:
    """What trained, read from the wrapped model after training (one line; `scripts/gpu_smoke.sh` checks it): the
    DeepSpeed engine's ZeRO stage, bf16 flag and optimizer class, or the wrapper of a run without DeepSpeed."""
    wrapped = trainer.model_wrapped
    if trainer.is_deepspeed_enabled and hasattr(wrapped, "zero_optimization_stage"):
        return (
            f"DeepSpeed ZeRO stage {wrapped.zero_optimization_stage()}, bf16 {wrapped.bfloat16_enabled()}, "
            f"optimizer {type(wrapped.optimizer).__name__}"
        )
    return f"{type(wrapped).__name__} (no DeepSpeed), mixed precision {trainer.accelerator.mixed_precision}"
