"""The weights the generation engine samples with: a copy of the trained weights in the generation dtype, synced once
per optimizer step, the way TRL keeps vLLM's weights (issue 40).

- **bf16** (a CPU with native bf16, `bf16` on): a copy of the model in bfloat16, built from its config on the meta
  device (no second random init), its parameters cast from the trained float32 ones, its buffers (RoPE's `inv_freq`)
  taken as they are. In a single process it lives from a step's first generation call to the end of the step's
  generation (`free`: re-cast in place if the optimizer stepped and no `free` came between, else built again), so
  the loss's forward and backward never hold it: 270 MB for SmolLM2-135M (2 steps of the demo's recipe with bf16
  forced, Zen 3: peak RSS 3.98 -> 3.75 GB, the same samples), for ~0.2 s a step of rebuilding (0.32-0.34 s against
  0.09-0.12 s cast in place, 1 thread, Zen 3).
- **ZeRO-3 and FSDP** (`persistent=False`): **no persistent copy**, it would undo the sharding (Qwen3-8B is 16 GB in
  bf16). Each generation call builds a copy from the gathered parameters, in the generation dtype or else in their
  own, and drops it after the call. Even in float32 the engine never decodes with the DeepSpeed-wrapped model
  itself: its root module's forward hook is a collective (every rank must run the same number of forwards), while
  the engine's ranks end their decoding independently.
- **float32** (no native bf16, or `bf16: false`) on a CPU: a **packed view** (issue 53): a model of the trained
  model's class whose parameters *are* the trained ones (shared, not copied) except its linear layers, packed for
  oneDNN (below) at the first generation call of each optimizer step and dropped when the step's generation is done
  (`free`), so the loss's forward and backward never hold it. MKL's float32 matmul at 32 rows is far below the CPU's
  peak (SmolLM2's LM head: 39 ms against oneDNN's 19 ms on a Zen 3); generation is ~1.3x faster for ~0.5 s of
  packing a step. A peft model, or a GPU, samples from the trained model itself, as does a trained model already in
  the generation dtype (DeepSpeed's bf16 mode keeps bf16 weights).
- **Packed for oneDNN** (a bf16 copy on a CPU whose oneDNN computes bf16, and the float32 packed view): each
  `nn.Linear` of the copy, the LM head included, holds its weight in oneDNN's blocked layout (`PackedLinear`), packed
  once per sync instead of at every matmul: generation 1.2x faster in bf16 on a Zen 4, 1.3x in float32 on a Zen 3
  (docs/demo.md).
- **LoRA** (peft): the copy is the base architecture with each adapted layer merged as peft's own merge computes it
  (`lora_merge.py`: plain LoRA and rsLoRA, `lora_bias`, DoRA), so generation runs no adapter code; a variant it cannot
  merge is refused when the engine is built; peft's `modules_to_save` copies are taken as trained.

The copy is a new object of the model's class: neither TRL's fused-LM-head patch nor accelerate's autocast wrapper
(both set on the trained model's instance) reaches it, and its config is a copy, so the engine's attention setting
never touches the trained model's.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator

import torch

from drgrpo.algorithm.rollout.lora_merge import check_mergeable, merged_parameters


def base_model(model):
    """The plain transformers model under a peft wrapper (or `model` itself)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a parameter: FSDP2 shards parameters as DTensors (gathering one is a collective: every
    rank builds its copy at the same call, in the same parameter order)."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def source_weights(model) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of every parameter of `model` as the plain model names it, LoRA adapters merged in: what the
    generation copy loads. Raises for a peft layer that cannot be merged (`lora_merge.check_mergeable`)."""
    for name, tensor in _named_weights(model):
        yield name, full(tensor)


def _named_weights(model) -> Iterator[tuple[str, torch.Tensor]]:
    base = base_model(model)
    if base is model:
        yield from ((name, p.detach()) for name, p in model.named_parameters(remove_duplicate=False))
        return
    from peft.tuners.lora import LoraLayer
    from peft.utils.other import ModulesToSaveWrapper

    check_mergeable(base)
    skip: set[str] = set()
    for prefix, module in base.named_modules():
        if isinstance(module, ModulesToSaveWrapper):
            trained = module.modules_to_save[module.active_adapters[0]] if module.active_adapters else None
            chosen = trained if trained is not None else module.original_module
            for name, parameter in chosen.named_parameters():
                yield f"{prefix}.{name}", parameter.detach()
            skip.add(prefix + ".")
        elif isinstance(module, LoraLayer):
            for name, tensor in merged_parameters(module):
                yield f"{prefix}.{name}", tensor
            skip.add(prefix + ".")
    for name, parameter in base.named_parameters(remove_duplicate=False):
        if not any(name.startswith(prefix) for prefix in skip):
            yield name, parameter.detach()


def packs_linears(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the copy's linear layers are packed for oneDNN: bf16 weights on a CPU where oneDNN computes bf16."""
    if dtype != torch.bfloat16 or device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    supported = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(supported()) if supported is not None else False


class PackedLinear(torch.nn.Module):
    """`nn.Linear` for inference whose weight is kept in oneDNN's blocked layout (`torch.ops.mkldnn`, the op
    `torch.compile`'s CPU freezing uses): `pack(weight)` takes a (out, in) weight of any dtype."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.dtype = linear.weight.dtype
        self.packed: torch.Tensor | None = None
        self.bias = None if linear.bias is None else linear.bias.detach().clone()
        self.pack(linear.weight)

    def pack(self, weight: torch.Tensor) -> None:
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(self.dtype).contiguous(), None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


def pack_linears(model) -> None:
    """Replace every `nn.Linear` of `model` (a generation copy) by a `PackedLinear`."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, PackedLinear(child))


def _empty_model(base, dtype: torch.dtype | None = None):
    """A model of `base`'s class on the meta device (no weights allocated), from a copy of its config, in `dtype`
    (else its own). The class itself, not `_from_config`: under DeepSpeed ZeRO-3 that would partition it (zero.Init)."""
    config = copy.deepcopy(base.config)
    if dtype is not None:
        config.dtype = dtype
    with torch.device("meta"):
        model = type(base)(config)
    return model if dtype is None else model.to(dtype)


def _finish_inference_model(model, base) -> None:
    """Give `model` `base`'s buffers as `base` holds them (RoPE's inv_freq stays float32: only parameters are cast or
    shared) and generation config, and put it in inference mode (no gradients, eval)."""
    buffers = {name: full(buffer) for name, buffer in base.named_buffers()}
    for name in [name for name, _ in model.named_buffers()]:
        owner, _, leaf = name.rpartition(".")
        model.get_submodule(owner).register_buffer(leaf, buffers[name].detach().clone(), persistent=False)
    model.generation_config = copy.deepcopy(base.generation_config)
    model.requires_grad_(False)
    model.eval()


def build_copy(model, dtype: torch.dtype):
    """A new model of `model`'s (base) class in `dtype`: the trained weights cast in, its buffers as they are."""
    base = base_model(model)
    generation_copy = _empty_model(base, dtype)
    device = next(base.parameters()).device
    generation_copy.to_empty(device=device)
    generation_copy.tie_weights()
    _finish_inference_model(generation_copy, base)
    load_weights(generation_copy, model)
    if packs_linears(dtype, device):
        pack_linears(generation_copy)
    return generation_copy


def packed_view(model):
    """A model of `model`'s class for inference whose parameters are `model`'s own tensors (shared, not copied) and
    whose linear layers are packed for oneDNN from them (`PackedLinear`; the LM head too, tied or not): a float32
    generation copy at the cost of the packed weights alone. Valid until the optimizer next changes `model`."""
    view = _empty_model(model)
    shared = dict(_named_weights(model))
    for name, _ in list(view.named_parameters(remove_duplicate=False)):  # a tied LM head takes the embedding's tensor
        owner, _, leaf = name.rpartition(".")
        view.get_submodule(owner)._parameters[leaf] = torch.nn.Parameter(shared[name], requires_grad=False)
    _finish_inference_model(view, model)
    pack_linears(view)
    return view


def views_packed(model) -> bool:
    """Whether the engine generates from a `packed_view` of `model`: a plain (not peft) float32 model on a CPU with
    oneDNN."""
    if base_model(model) is not model:
        return False
    parameter = next(model.parameters())
    return parameter.dtype == torch.float32 and parameter.device.type == "cpu" and torch.backends.mkldnn.is_available()


@torch.no_grad()
def load_weights(generation_copy, model) -> None:
    """Cast `model`'s current weights into `generation_copy`'s parameters in place (and pack its `PackedLinear`s)."""
    targets = {name: parameter.copy_ for name, parameter in generation_copy.named_parameters()}
    for prefix, module in generation_copy.named_modules():
        if isinstance(module, PackedLinear):
            targets[f"{prefix}.weight"] = module.pack
            if module.bias is not None:
                targets[f"{prefix}.bias"] = module.bias.copy_
    loaded = set()
    for name, tensor in source_weights(model):
        target = targets.get(name)
        if target is not None and name not in loaded:
            target(tensor)
            loaded.add(name)
    missing = sorted(set(targets) - loaded)
    if missing:
        raise RuntimeError(f"generation copy: no trained weight for {', '.join(missing[:5])}")


def inference_model(model, dtype: torch.dtype):
    """The model to generate with in `dtype` when the caller gives `model` up (the evaluator): a float32 model on a
    CPU packed in place (no second copy of its weights at any point), else `GenerationWeights`' model or copy."""
    weights = GenerationWeights(dtype)
    if not weights.is_copy(model) and views_packed(model):
        pack_linears(model)
        return model
    return weights.for_generation(model, 0)


class GenerationWeights:
    """The model the engine generates with, in `dtype`: the trained model itself when `dtype` is its own (or None),
    else a copy, kept across the calls of one optimizer step until `free` (re-cast in place when the optimizer has
    stepped and it was not freed) or built for each call (`persistent=False`: ZeRO-3, FSDP).

    `syncs` counts the casts into a copy (one per optimizer step that generated, or per call when not persistent) and
    `sync_seconds` their time; `synced_step` is the optimizer step the copy holds."""

    def __init__(self, dtype: torch.dtype | None, persistent: bool = True) -> None:
        self.dtype = dtype
        self.persistent = persistent
        self.copy = None
        self.synced_step: int | None = None
        self.syncs = 0
        self.sync_seconds = 0.0
        self.last_sync_seconds = 0.0

    def is_copy(self, model) -> bool:
        """Whether `model` generates from a copy (not persistent, or its parameters are in another dtype) or from
        itself (or its packed view, `views_packed`)."""
        if not self.persistent:
            return True
        if self.dtype is None:
            return False
        return any(p.dtype != self.dtype for p in base_model(model).parameters() if p.is_floating_point())

    def for_generation(self, model, step: int):
        """The model to generate with at optimizer step `step`: `model` itself, its packed view (packed again at each
        step's first call), or the copy, synced if needed."""
        view = not self.is_copy(model)
        if view and not views_packed(model):
            return model
        if self.copy is not None and self.persistent and self.synced_step == step:
            return self.copy
        start = time.perf_counter()
        if view:
            self.copy = None  # the last step's view is dropped before the new one is packed
            self.copy = packed_view(model)
        elif self.copy is None or not self.persistent:
            dtype = self.dtype or next(p.dtype for p in base_model(model).parameters() if p.is_floating_point())
            self.copy = build_copy(model, dtype)
        else:
            load_weights(self.copy, model)
        self.synced_step = step
        self.syncs += 1
        self.last_sync_seconds = time.perf_counter() - start
        self.sync_seconds += self.last_sync_seconds
        return self.copy

    def release(self) -> None:
        """Drop a copy that is not persistent (after each generation call under ZeRO-3)."""
        if not self.persistent:
            self.copy = None

    def free(self) -> None:
        """Drop the generation model, the packed view or the copy (the trainer calls this when a step's generation is
        done: its weights are not held beside the gradients and the activations); the next call builds it again."""
        self.copy = None
