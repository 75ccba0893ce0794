"""Model size (pure): parameter counts from config.json fields, without downloading weights."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The config.json fields the parameter count reads, for the hub models our recipes name, so that the planner needs no
# download. Values are those of the models' published config.json files.
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
# Decoder-only architectures with the Llama layout (q/k/v/o attention, gated MLP, RMSNorm) whose size
# `count_parameters` computes exactly.
LLAMA_LAYOUT_TYPES = ("llama", "mistral", "qwen2", "qwen3")
# peft's default LoRA targets for these architectures (peft TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
DEFAULT_LORA_TARGETS = ("q_proj", "v_proj")


@dataclass(frozen=True)
class ModelSize:
    """Parameter counts the memory estimators need, and the model's context length."""

    total_params: int
    largest_layer_params: int  # the largest module's own parameters: DeepSpeed's ZeRO-3 gather buffer unit
    context_length: int | None
    source: str


def with_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """The config.json fields completed with transformers' defaults for that model_type (e.g. Qwen3's head_dim 128,
    which is not hidden_size / num_attention_heads), exactly as `from_pretrained` would see them."""
    from transformers import AutoConfig

    fields = {key: value for key, value in config.items() if key != "model_type"}
    return {**AutoConfig.for_model(config["model_type"], **fields).to_dict(), **config}


def _linear_shapes(config: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each linear layer of one decoder layer of the Llama layout."""
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    intermediate = config["intermediate_size"]
    return {
        "q_proj": (hidden, heads * head_dim),
        "k_proj": (hidden, kv_heads * head_dim),
        "v_proj": (hidden, kv_heads * head_dim),
        "o_proj": (heads * head_dim, hidden),
        "gate_proj": (hidden, intermediate),
        "up_proj": (hidden, intermediate),
        "down_proj": (intermediate, hidden),
    }


def count_parameters(config: dict[str, Any]) -> tuple[int, int]:
    """(total, largest single module) parameter counts of a Llama-layout decoder from its config.json fields.

    Per layer, following transformers' modeling_{llama,mistral,qwen2,qwen3}.py: the seven linear layers of
    `_linear_shapes` (q/k/v biases in Qwen2 always; q/k/v/o biases in Llama and Qwen3 when `attention_bias`; MLP
    biases in Llama when `mlp_bias`; none in Mistral), two RMSNorm vectors of `hidden_size`, and in Qwen3 a q_norm
    and k_norm of `head_dim`.
    Plus the embedding (vocab x hidden), the final norm, and an untied lm_head (vocab x hidden).
    Checked against Qwen3-8B's published size: 8,190,735,360 parameters (16,381,470,720 bytes of bf16 weights).
    """
    model_type = config.get("model_type")
    if model_type not in LLAMA_LAYOUT_TYPES:
        raise ValueError(
            f"count_parameters handles the Llama layout ({', '.join(LLAMA_LAYOUT_TYPES)}), not model_type="
            f"{model_type!r}."
        )
    config = with_defaults(config)
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    shapes = _linear_shapes(config)
    module_sizes = {name: i * o for name, (i, o) in shapes.items()}
    if model_type == "qwen2":
        for name in ("q_proj", "k_proj", "v_proj"):
            module_sizes[name] += shapes[name][1]
    elif model_type in ("llama", "qwen3") and config.get("attention_bias"):
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            module_sizes[name] += shapes[name][1]
    if model_type == "llama" and config.get("mlp_bias"):
        for name in ("gate_proj", "up_proj", "down_proj"):
            module_sizes[name] += shapes[name][1]
    per_layer = sum(module_sizes.values()) + 2 * hidden
    if model_type == "qwen3":
        head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
        per_layer += 2 * head_dim
    embedding = vocab * hidden
    tied = config.get("tie_word_embeddings", False)
    total = embedding + per_layer * config["num_hidden_layers"] + hidden + (0 if tied else embedding)
    return total, max(embedding, *module_sizes.values())


def lora_parameters(config: dict[str, Any], rank: int, target_modules: str | Sequence[str] | None) -> int:
    """Trainable parameters of LoRA adapters (A: r x in, B: out x r) on the targeted linear layers of every layer.

    `target_modules` as peft takes it: None (peft's default for these architectures, q_proj and v_proj),
    "all-linear" (every linear layer except lm_head) or a list of module names (Hu et al. 2021; peft LoraConfig).
    """
    shapes = _linear_shapes(with_defaults(config))
    if target_modules is None:
        names: Sequence[str] = DEFAULT_LORA_TARGETS
    elif target_modules == "all-linear":
        names = tuple(shapes)
    else:
        names = [target_modules] if isinstance(target_modules, str) else list(target_modules)
    unknown = [name for name in names if name not in shapes]
    if unknown:
        raise ValueError(
            f"lora_target_modules {unknown} are not linear layers of a {config.get('model_type')} decoder layer. "
            f"Use names from {list(shapes)} or 'all-linear'."
        )
    per_layer = sum(rank * (shapes[name][0] + shapes[name][1]) for name in names)
    return per_layer * config["num_hidden_layers"]


def load_model_config(model_name_or_path: str) -> tuple[dict[str, Any] | None, str]:
    """The model's config.json fields (local folder or prepared model first, then `BUILTIN_MODEL_CONFIGS`) and where
    they came from. A prepared short name (`smollm2-135m-instruct`) is read from the model cache when it is there."""
    from drgrpo.core.models import PREPARED_MODELS, is_prepared, prepared_model_dir

    if model_name_or_path in PREPARED_MODELS and is_prepared(prepared_model_dir(model_name_or_path)):
        model_name_or_path = str(prepared_model_dir(model_name_or_path))
    local = Path(model_name_or_path) / "config.json"
    if local.is_file():
        return json.loads(local.read_text()), str(local)
    if model_name_or_path in BUILTIN_MODEL_CONFIGS:
        return dict(BUILTIN_MODEL_CONFIGS[model_name_or_path]), "drgrpo.planning.model_size.BUILTIN_MODEL_CONFIGS"
    return None, ""


def model_size(config: dict[str, Any], source: str) -> ModelSize:
    total, largest = count_parameters(config)
    return ModelSize(total, largest, config.get("max_position_embeddings"), source)
