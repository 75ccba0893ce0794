"""SwiGLU MLPs that keep two of their four intermediate-width tensors for the backward, computing the same values.

The MLP of Llama, SmolLM2, Qwen2/3 and Mistral computes `down_proj(silu(gate_proj(x)) * up_proj(x))`. For its
backward autograd keeps four tensors of the intermediate width (1536 for SmolLM2, 2.7x the hidden size) per token:
`gate` (SiLU's input), `silu(gate)` and `up` (the product's operands) and the product (`down_proj`'s input, for its
weight gradient): the largest share of what a loss forward keeps (measured on the demo, docs/demo.md). Here only
`gate` and `up` are kept: `silu(gate)` and the product are computed again in the backward from them, elementwise (a
small fraction of the layer's matrix products), with the same kernels autograd calls (`silu`, `mul`,
`silu_backward`), so every gradient is bit-identical to the stock forward's (tested: float32, bf16 autocast, LoRA;
and all 272 gradients of two SmolLM2 demo steps, docs/demo.md).

`down_proj` is any module (peft's LoRA layer, DeepSpeed's hooks, a packed layer): it still receives the product and
saves whatever it saves; a saved-tensor hook only replaces its copy of the product (or a view of it) by a note to
recompute it from `gate` and `up`, which are kept anyway. Applied to a module only where its class's `forward` is
exactly that line (read from its source) and its activation is SiLU; never under gradient checkpointing, which keeps
nothing of the layer (`saves_less`); in `no_grad` (generation, evaluation) the stock expression runs.
"""

from __future__ import annotations

import inspect
import textwrap
import types

import torch
import torch.nn.functional as F
from torch import nn

SWIGLU_FORWARD = (
    "def forward(self, x):\n"
    "    down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))\n"
    "    return down_proj\n"
)


class SiluMul(torch.autograd.Function):
    """`silu(gate) * up`, keeping `gate` and `up` (not `silu(gate)`) for the backward."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        gate, up = ctx.saved_tensors
        grad_gate = torch.ops.aten.silu_backward(grad * up, gate) if ctx.needs_input_grad[0] else None
        grad_up = grad * F.silu(gate) if ctx.needs_input_grad[1] else None
        return grad_gate, grad_up


def _recompute_product(gate: torch.Tensor, up: torch.Tensor, product: torch.Tensor):
    """Saved-tensor hooks for `down_proj`'s call: its saved copy of `product` (`silu(gate) * up`, or a view of it)
    becomes a note, and is computed again from `gate` and `up` when the backward needs it."""
    product_storage = product.untyped_storage().data_ptr()

    def pack(saved: torch.Tensor):
        if saved.untyped_storage().data_ptr() == product_storage:
            return ("product", saved.size(), saved.stride(), saved.storage_offset())
        return saved

    def unpack(packed):
        if isinstance(packed, tuple) and packed[:1] == ("product",):
            _, size, stride, offset = packed
            return (F.silu(gate) * up).as_strided(size, stride, offset)
        return packed

    return pack, unpack


def _lean_forward(self, x: torch.Tensor) -> torch.Tensor:
    """The SwiGLU line, computing the same values; under autograd it keeps `gate` and `up` only (module docstring)."""
    gate, up = self.gate_proj(x), self.up_proj(x)
    if not (torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad)):
        return self.down_proj(self.act_fn(gate) * up)
    product = SiluMul.apply(gate, up)  # a fresh contiguous tensor: as_strided in `unpack` rebuilds any view of it
    if product.numel() == 0:  # an empty tensor's storage cannot be told apart from another's
        return self.down_proj(product)
    with torch.autograd.graph.saved_tensors_hooks(*_recompute_product(gate, up, product)):
        return self.down_proj(product)


def is_swiglu_mlp(module: nn.Module) -> bool:
    """Whether `module` computes `down_proj(silu(gate_proj(x)) * up_proj(x))`: its class's forward is that line and its
    activation is torch's or transformers' SiLU with its stock forward."""
    from transformers.activations import SiLUActivation

    act = getattr(module, "act_fn", None)
    if not all(hasattr(module, name) for name in ("gate_proj", "up_proj", "down_proj")):
        return False
    if type(act) not in (nn.SiLU, SiLUActivation) or type(act).forward not in (nn.SiLU.forward, SiLUActivation.forward):
        return False
    try:
        source = textwrap.dedent(inspect.getsource(type(module).forward))
    except (OSError, TypeError):
        return False
    return source == SWIGLU_FORWARD


def saves_less(model: nn.Module) -> int:
    """Give every SwiGLU MLP of `model` the forward that keeps `gate` and `up` only for the backward (module
    docstring); none under gradient checkpointing. Returns how many modules now have it."""
    checkpointing = getattr(type(model), "is_activation_checkpointing", None)  # transformers >= 5.x's name
    if getattr(model, "is_activation_checkpointing" if checkpointing else "is_gradient_checkpointing", False):
        return 0
    count = 0
    for module in model.modules():
        if is_swiglu_mlp(module):
            module.forward = types.MethodType(_lean_forward, module)
            count += 1
    return count
