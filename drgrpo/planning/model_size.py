"""Model size: parameter counts of the model transformers builds from config.json fields, on the meta device.

`meta_model` builds the causal LM on torch's meta device: every parameter has its shape and no memory, so no weights
are downloaded or allocated, and any architecture the installed transformers knows is counted. (Not accelerate's
`init_empty_weights`: it re-creates each parameter registered under it, which unties a tied lm_head.)
`count_parameters` reads its `num_parameters()` and largest module; `trainable_parameters` wraps it with the run's
LoRA config through peft (its own target-module mapping) and reads `get_nb_trainable_parameters`.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from peft import PeftConfig
    from transformers import PreTrainedModel

# The config.json fields of the hub models our recipes name, so that the planner needs no download. Values are those
# of the models' published config.json files.
BUILTIN_MODEL_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen3-8B": {
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
    },
    "Qwen/Qwen2.5-Math-1.5B": {
        "model_type": "qwen2",
        "vocab_size": 151936,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
    },
    "Qwen/Qwen2.5-Coder-7B-Instruct": {  # 7.62B parameters (model card)
        "model_type": "qwen2",
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
    },
}


@dataclass(frozen=True)
class ModelSize:
    """Parameter counts the memory estimators need, and the model's context length."""

    total_params: int
    largest_layer_params: int  # the largest module's own parameters: DeepSpeed's ZeRO-3 gather buffer unit
    context_length: int | None
    source: str


@contextmanager
def _without_gc() -> Iterator[None]:
    """Cyclic garbage collection paused while thousands of modules are built: beside the objects torch and transformers
    hold, the full collections it would trigger cost more than the build itself (0.3 s of 0.7 s for the 8B LoRA)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def with_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """The config.json fields completed with transformers' defaults for that model_type (e.g. Qwen3's head_dim 128,
    which is not hidden_size / num_attention_heads), exactly as `from_pretrained` would see them."""
    from transformers import AutoConfig

    return {**AutoConfig.for_model(**config).to_dict(), **config}


def meta_model(config: dict[str, Any]) -> PreTrainedModel:
    """The causal LM transformers builds from the config.json fields `config`, its parameters on the meta device.
    ValueError when transformers does not know the model_type or has no causal LM for it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"), _without_gc():
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))


def count_parameters(model: PreTrainedModel | dict[str, Any]) -> tuple[int, int]:
    """(total, largest single module) parameter counts of `model`, or of the `meta_model` of config.json fields:
    transformers' `num_parameters()` (a tied lm_head counted once) and the largest module's own parameters."""
    if isinstance(model, dict):
        model = meta_model(model)
    largest = max(sum(p.numel() for p in module.parameters(recurse=False)) for module in model.modules())
    return model.num_parameters(), largest


def model_size(model: PreTrainedModel, source: str) -> ModelSize:
    """`model`'s parameter counts and context (its text config's `max_position_embeddings`)."""
    context = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    return ModelSize(*count_parameters(model), context, source)


def trainable_parameters(model: PreTrainedModel, peft_config: PeftConfig) -> int:
    """Parameters training updates once peft wraps `model` (changed in place) with `peft_config`, as peft counts them.

    peft resolves the targets: its default for the architecture when `target_modules` is None, "all-linear", or
    names (a ValueError for a name the model lacks). An adapter on the output layer is refused: TRL's fused LM head
    (`trl.trainer.utils.add_fused_lm_head`) projects with the layer's base weight, so the adapter would never train.
    """
    from peft import get_peft_model

    if getattr(peft_config, "init_lora_weights", None) is True:  # the adapters' values are not counted: skip them
        peft_config = replace(peft_config, init_lora_weights=False)
    head = next((name for name, module in model.named_modules() if module is model.get_output_embeddings()), None)
    with _without_gc():
        wrapped = get_peft_model(model, peft_config, low_cpu_mem_usage=True)  # adapters on the meta device too
    if head in wrapped.base_model.targeted_module_names:
        raise ValueError(
            f"lora_target_modules targets {head!r}, the output layer: TRL's fused LM head reads its base weight, "
            "so the adapter would never be trained. Target the decoder layers' modules or 'all-linear'."
        )
    return wrapped.get_nb_trainable_parameters()[0]


def lora_parameters(config: dict[str, Any], rank: int, target_modules: str | list[str] | None) -> int:
    """Trainable parameters of rank-`rank` LoRA adapters on `target_modules` (as peft's `LoraConfig` takes them) of
    the `meta_model` of config.json fields."""
    from peft import LoraConfig

    lora = LoraConfig(r=rank, target_modules=target_modules, task_type="CAUSAL_LM")
    return trainable_parameters(meta_model(config), lora)


def load_model_config(model_name_or_path: str) -> tuple[dict[str, Any] | None, str]:
    """The model's config.json fields (local folder or prepared model first, then `BUILTIN_MODEL_CONFIGS`, then the
    Hugging Face cache) and where they came from. A prepared short name (`smollm2-135m-instruct`) is read from the
    model cache when it is there."""
    from drgrpo.core.models import PREPARED_MODELS, is_prepared, prepared_model_dir

    if model_name_or_path in PREPARED_MODELS and is_prepared(prepared_model_dir(model_name_or_path)):
        model_name_or_path = str(prepared_model_dir(model_name_or_path))
    local = Path(model_name_or_path) / "config.json"
    if local.is_file():
        return json.loads(local.read_text()), str(local)
    if model_name_or_path in BUILTIN_MODEL_CONFIGS:
        return dict(BUILTIN_MODEL_CONFIGS[model_name_or_path]), "drgrpo.planning.model_size.BUILTIN_MODEL_CONFIGS"
    cached = _hub_cache_config(model_name_or_path)  # a hub model whose config.json is in the cache: no network
    return (json.loads(Path(cached).read_text()), cached) if cached else (None, "")


def _hub_cache_config(name: str) -> str | None:
    """The cached config.json of hub id `name` (the Hugging Face cache only, never the network), or None."""
    if name.count("/") != 1 or name.startswith((".", "/", "~")):
        return None
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # not a valid repo id
        return None
    return found if isinstance(found, str) else None
