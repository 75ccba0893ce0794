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

The reference model (`beta > 0`, or a KL in the reward) follows the same policy: TRL builds it in the dtype the
policy was loaded in, so with float32 master weights the two copies computed differently before any update (under
autocast, float32 weights keep norms and the residual stream in float32, bf16 weights do not), and a KL appeared at
step 0 (SmolLM2-135M, 449 sampled tokens: mean |delta log-prob| 0.033, summed k3 0.91; a KL summed over tokens then
acts as a length penalty from the first step). Its half-precision parameters are cast to float32 with the trained
ones (4 more bytes per parameter than bf16), so the KL before any update is 0 (measured exactly 0 on SmolLM2;
docs/scaling.md).

FSDP: with mixed precision on, accelerate already upcasts the trained parameters to float32 when it wraps the model
(its FSDP upcast, as DeepSpeed keeps float32 masters) and both copies compute with the plugin's bf16 parameters, so
nothing is cast here (KL at step 0 on the tiny model under FSDP2, measured once: 0). Without mixed precision the cast is
made, but after training the model is the FSDP wrapper, whose parameters are flat, sharded and renamed (FSDP1): there
is no half-precision copy to put back, so the final model is saved in float32 as FSDP gathers it (logged); TRL has
wrapped the reference already, which a cast cannot reach, so that case warns that the KL at step 0 is not 0.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

HALF_PRECISION = ("bfloat16", "float16")


def needs_master_weights(
    weight_dtype: str | None, *, deepspeed: bool, fsdp: bool = False, mixed_precision: str = "no"
) -> bool:
    """Whether trained weights of `weight_dtype` ("bfloat16", "torch.bfloat16", ...) need float32 master copies from
    us: not under DeepSpeed, nor under FSDP with mixed precision (accelerate upcasts them when it wraps the model)."""
    name = str(weight_dtype or "").removeprefix("torch.")
    upcast_elsewhere = deepspeed or (fsdp and mixed_precision != "no")
    return not upcast_elsewhere and name in HALF_PRECISION


def keep_float32_master_weights(
    model, *, deepspeed: bool, fsdp: bool = False, mixed_precision: str = "no", reference=None
) -> tuple[object, list[str], bool] | None:
    """Cast the trained half-precision parameters of `model` to float32, and those of the `reference` model
    (TRL's `ref_model`, if any) with them (module docstring): (their dtype, their names, whether `restore_dtype` can
    put them back: not under FSDP), or None when nothing was cast (DeepSpeed, FSDP with mixed precision, LoRA, a
    float32 model)."""
    import torch

    trained = [
        (name, p)
        for name, p in model.named_parameters()
        if p.requires_grad and needs_master_weights(str(p.dtype), deepspeed=deepspeed)
    ]
    if not trained:
        return None
    dtype = trained[0][1].dtype
    shown = str(dtype).removeprefix("torch.")
    count = f"{sum(p.numel() for _, p in trained):,}"
    if not needs_master_weights(shown, deepspeed=deepspeed, fsdp=fsdp, mixed_precision=mixed_precision):
        logger.warning(
            "master weights: %s trained parameters are %s; under FSDP with mixed precision %s accelerate upcasts them "
            "to float32 when it wraps the model, nothing is cast here; the final model is saved in float32 "
            "(drgrpo/run/precision.py)",
            count,
            shown,
            mixed_precision,
        )
        return None
    # The reference is frozen (no requires_grad): its parameters of the trained copy's dtype follow it. Under FSDP TRL
    # has already wrapped it, and a cast through the wrapper does not reach the parameters it computes with.
    followers = [] if reference is None or fsdp else [p for p in reference.parameters() if p.dtype == dtype]
    if reference is not None and fsdp:
        logger.warning(
            "master weights: under FSDP without mixed precision the reference model stays %s while the trained copy "
            "trains in float32, so the KL before any update is not 0; set mixed_precision: bf16 in the accelerate "
            "config (accelerate then keeps the float32 masters and both copies compute in bf16)",
            shown,
        )
    for parameter in [p for _, p in trained] + followers:
        parameter.data = parameter.data.to(torch.float32)
    logger.warning(
        "master weights: %s trained parameters are %s and no DeepSpeed keeps float32 copies of them: they train in "
        "float32 (bf16: true still computes in bf16)%s; the final model is saved in %s (drgrpo/run/precision.py)",
        count,
        shown,
        ", and so does the reference model" if followers else "",
        "float32 (FSDP: no half-precision copy to put back)" if fsdp else shown,
    )
    return dtype, [name for name, _ in trained], not fsdp


def restore_dtype(model, cast: tuple[object, list[str], bool]) -> None:
    """Cast the float32 master weights that `keep_float32_master_weights` made back to their dtype (the final save).

    Under FSDP there is nothing to put back: after training `model` is the FSDP wrapper, whose flat, sharded
    parameters no longer carry the recorded names (`KeyError` before issue 30), and the final model is saved in
    float32 as FSDP gathers it."""
    dtype, names, restorable = cast
    if not restorable:
        logger.info("master weights: FSDP run, the final model is saved in float32")
        return
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
