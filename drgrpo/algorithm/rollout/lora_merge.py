"""peft LoRA adapters merged into the engine's generation copy through peft's own merge path (issue 53).

The generation copy is the base architecture, so every adapted layer's weight must be merged: what peft's
`merge(safe_merge=True)` computes for the layer (peft/tuners/lora/layer.py, `Linear.merge` and `Embedding.merge`),
without touching the trained model:

- plain LoRA, rsLoRA included (its scale alpha / sqrt(r) is in `get_delta_weight`): W + delta, summed over the
  active adapters;
- a LoRA variant (peft's `lora_variant`, resolved from the config: `use_dora`, ...) merges by its own
  `merge_safe(module, adapter, weight)`: DoRA rescales each output row of W + delta by magnitude / ||W + delta||,
  which `W + delta` alone gets wrong (the copy's weights were 0.61 off peft's merge, its logits 1.25, before issue 53);
- `lora_bias`: the base bias plus lora_B's bias times the scale.

Only what was checked against peft's own `merge_and_unload` is merged (tests/test_engine_lora_variants.py): plain
LoRA, rsLoRA, `lora_bias` and DoRA on linear and embedding layers. Anything else (aLoRA and Arrow, which peft cannot
merge; MonteCLoRA, whose trained forward samples noise; KaSA, whose merge rewrites the base weight; the other variants,
peft's convolution and parameter adapters, other peft methods) is refused when the engine is built, in one line naming
the layer: the engine would sample from another policy than the one trained. Without a copy (float32: the engine
samples from the trained model itself, adapters and all) nothing needs merging.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

MERGED_VARIANTS = frozenset({"DoraLinearVariant", "DoraEmbeddingVariant"})  # checked against peft's merge
MERGED = "it merges plain LoRA, rsLoRA, lora_bias and DoRA on linear and embedding layers, as peft does"
FIX = "set generation_engine: trl (TRL's generate runs peft's own forward)"


def _lora_classes() -> tuple[type, ...]:
    from peft.tuners.lora.layer import Embedding, Linear

    return Linear, Embedding


def _adapters(module) -> list[str]:
    """The active adapters the layer holds weights for (a layer may lack some of the model's adapters)."""
    return [a for a in module.active_adapters if a in module.lora_A or a in module.lora_embedding_A]


def unmergeable(prefix: str, module) -> str | None:
    """Why the peft layer `module` (named `prefix`) cannot be merged into a generation copy, or None if it can (or is
    not a peft tuner layer)."""
    from peft.tuners.lora import LoraLayer
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import ModulesToSaveWrapper

    if isinstance(module, ModulesToSaveWrapper) or not isinstance(module, BaseTunerLayer):
        return None
    if not isinstance(module, LoraLayer):
        return f"the peft layer {type(module).__name__} on {prefix} is not LoRA"
    if type(module) not in _lora_classes():
        return f"the peft LoRA layer {type(module).__name__} on {prefix} is not a linear or embedding layer"
    if module.merged:
        return None
    adapters = _adapters(module)
    for adapter in adapters:
        variant = getattr(module, "lora_variant", {}).get(adapter)
        if variant is not None and type(variant).__name__ not in MERGED_VARIANTS:
            return f"the peft LoRA variant {type(variant).__name__} on {prefix} (adapter {adapter!r})"
        if getattr(module, "lora_bias", {}).get(adapter) and getattr(module.get_base_layer(), "bias", None) is None:
            return f"lora_bias on {prefix}, whose base layer has no bias (peft cannot merge it either)"
    if len(adapters) > 1 and any(a in getattr(module, "lora_variant", {}) for a in adapters):
        return f"{len(adapters)} active adapters on {prefix}, one of them a LoRA variant (merged in turn, not apart)"
    return None


def check_mergeable(model) -> None:
    """Raise one line if a peft layer of `model` cannot be merged into the generation copy (module docstring)."""
    for prefix, module in model.named_modules():
        reason = unmergeable(prefix, module)
        if reason is not None:
            raise ValueError(
                f"generation_engine: {reason}: the engine's generation copy cannot merge it ({MERGED}); {FIX}."
            )


@torch.no_grad()
def merged_parameters(module) -> Iterator[tuple[str, torch.Tensor]]:
    """("weight", W) and ("bias", b) of the peft LoRA layer `module` with its active adapters merged as peft merges
    them (module docstring); the layer itself is left as it was (peft's merge caches DoRA's weight norm on it: dropped
    again)."""
    base = module.get_base_layer()
    weight = base.weight.detach()
    bias = None if getattr(base, "bias", None) is None else base.bias.detach()
    if not module.merged:
        cached = set(module._caches)
        weight = weight.clone()
        for adapter in _adapters(module):
            variant = module.lora_variant.get(adapter)
            if variant is None:
                weight += module.get_delta_weight(adapter).to(weight.dtype)
            else:
                weight = variant.merge_safe(module, adapter, weight)
            if module.lora_bias.get(adapter):
                bias = (bias + module.lora_B[adapter].bias * module.scaling[adapter]).to(weight.dtype)
        for key in set(module._caches) - cached:
            module._caches.pop(key)
    yield "weight", weight
    if bias is not None:
        yield "bias", bias
