"""Speed keys: bf16 where the CPU computes it (`bf16: auto`), completions sorted by length and cut to their
micro-batch's width (drgrpo/algorithm/padding.py), and the LM head scored only at the trained positions on CPU.

- `compact_lm_head`: TRL's fused LM head (`trl.trainer.utils.add_fused_lm_head`) projects through the 49k-vocabulary
  head only the positions that have a label (the completion tokens) where `trl.trainer.utils._use_triton(device)`
  holds, CUDA and XPU; elsewhere, the CPU included, it projects every position, prompt and padding too, and zeroes
  them afterwards (the comment there: Neuron would recompile for every count of valid positions). A CPU never
  recompiles, so `compact_fused_lm_head` lets the CPU take the compact path for the duration of one call: the same
  log-probs and gradients, from a fraction of the projection (a prompt of ~50 tokens before answers of ~30).

Generation under autocast (issue 40 settled it with a profile, `benchmarks/autocast_casts.py`): accelerate's
autocast wraps each forward, and autocast keeps a cast weight only while the outermost autocast context is open, so
TRL's generation on float32 weights cast every weight to bf16 again at every generated token (the LM head 4 times
for 4 tokens, 8 for 8; the 30 up/gate weights 240 and 480 times); inside one outer autocast context it is once per
`generate` call. An earlier text here said "once per call either way": its probe ran inside an outer context. The
CPU generation engine (drgrpo/algorithm/rollout/engine.py) now generates from a bf16 copy cast once per optimizer
step instead.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field


@dataclass
class StepSpeedArguments:
    """Keys that remove work (or kept activations) from a training step without changing what it computes
    (drgrpo/algorithm/step_speed.py, drgrpo/algorithm/swiglu.py),
    and `bf16` with its `auto` (drgrpo/core/cpu_bf16.py; resolved in `DrGRPOConfig.__post_init__`)."""

    # TRL's `bf16` (bool, unset meaning True), widened to take `auto`: on a CPU run bf16 only where the processor
    # computes it natively (drgrpo/core/cpu_bf16.py); resolved to a bool before TRL and transformers read it.
    bf16: str | None = field(
        default=None,
        metadata={
            "help": "bf16 mixed precision (autocast; trained weights and AdamW states stay float32): true, false or "
            "auto. auto (or unset): with use_cpu, on where the CPU has native bf16 (avx512_bf16 or amx_bf16 on x86, "
            "bf16 on ARM), else float32, saying why; on GPUs, on where the GPU supports bf16 (TRL's default)."
        },
    )

    sort_by_length: bool = field(
        default=True,
        metadata={
            "help": "Sort the completions of each optimizer step by length before they are split into "
            "micro-batches, and cut every micro-batch to its own longest completion: padding columns "
            "cost forward and backward compute for nothing. The loss is unchanged (bnpo, top_entropy_quantile < 1, "
            "an entropy bonus and a MoE router loss, whose terms depend on the micro-batch, are only cut, not "
            "sorted). Off where TRL recomputes pi_old (gradient_accumulation_steps not a multiple of "
            "steps_per_generation x num_iterations, or vLLM's importance-sampling correction): the loss then keeps "
            "TRL's micro-batches, so the first update's ratio stays exactly 1."
        },
    )
    share_prompt_forward: bool = field(
        default=True,
        metadata={
            "help": "In the loss forward, run each prompt once per micro-batch and its completions on top of its "
            "keys and values (an optimizer step's rows grouped by prompt, then by length), instead of every row's "
            "prompt again: the same log-probs for a fraction of the compute (drgrpo/algorithm/shared_prompt.py). "
            "Only where pi_old is not recomputed (num_iterations 1, steps_per_generation <= "
            "gradient_accumulation_steps), sort_by_length is on, gradient checkpointing is off and the model is a "
            "plain transformers model (no peft, FSDP or DeepSpeed)."
        },
    )
    recompute_swiglu: bool = field(
        default=True,
        metadata={
            "help": "Keep only the gate and up projections of each SwiGLU MLP (Llama, SmolLM2, Qwen2/3, Mistral) for "
            "the backward and compute SiLU and their product again there: bit-identical gradients, two of the "
            "MLP's four intermediate-width tensors kept per token instead of four (drgrpo/algorithm/swiglu.py). "
            "Nothing to do under gradient checkpointing, which keeps nothing of the layer."
        },
    )
    compact_lm_head: bool = field(
        default=True,
        metadata={
            "help": "On CPU, project only the completion positions through the LM head (TRL does so on CUDA/XPU, "
            "and on CPU projects prompt and padding positions too): the same log-probs for less work."
        },
    )


@contextlib.contextmanager
def compact_fused_lm_head(enabled: bool = True):
    """Inside: TRL's fused LM head scores only the labelled positions on CPU too (module docstring)."""
    if not enabled:
        yield
        return
    import trl.trainer.utils as trl_utils

    original = trl_utils._use_triton
    trl_utils._use_triton = lambda device: device.type == "cpu" or original(device)
    try:
        yield
    finally:
        trl_utils._use_triton = original
