"""A GGUF file (llama.cpp's format) as a plain Hugging Face model folder: safetensors weights, tokenizer, chat
template and generation config, which every part of the project (TRL, the evaluator, `from_pretrained`) loads.

transformers reads GGUF through the `gguf` package and dequantises the weights to float32, but a model loaded that way
refuses `save_pretrained` (its config carries a GGUF quantization config). So the weights are copied into a fresh
model built from the same config minus that quantization config, and saved from there; `convert_gguf` reloads the
result and checks that every tensor is bit-identical to what the GGUF file gave.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def _require_gguf() -> None:
    import importlib.util

    from drgrpo.core.errors import RecipeError

    if importlib.util.find_spec("gguf") is None:
        raise RecipeError(
            "Reading a GGUF file needs the `gguf` package: `make install` installs it (the `smollm2` extra), or "
            "pip install 'gguf>=0.10'."
        )


def load_gguf(gguf_path: str | Path):
    """(model in float32, tokenizer) from a GGUF file, dequantised by transformers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _require_gguf()
    gguf_path = Path(gguf_path)
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    return model, tokenizer


def plain_copy(gguf_model):
    """A fresh model of the same architecture, config minus its GGUF quantization config, holding the same weights."""
    import torch
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(gguf_model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = ""
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or {})
    if unexpected or set(missing) - tied:
        raise ValueError(f"GGUF weights do not fit the architecture: missing {missing}, unexpected {unexpected}.")
    model.generation_config = copy.deepcopy(gguf_model.generation_config)
    return model


def _generation_stops(model, tokenizer) -> None:
    """The generation config ends at the tokenizer's eos (`<|im_end|>` for a ChatML model) and pads with its pad."""
    config = model.generation_config
    eos = config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.append(tokenizer.eos_token_id)
    config.eos_token_id = eos[0] if len(eos) == 1 else eos
    if config.pad_token_id is None:
        config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]


def check_identical(expected_state: dict, folder: str | Path) -> None:
    """Reload `folder` and raise when any tensor differs from `expected_state` (bit for bit)."""
    import torch
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).state_dict()
    different = [k for k, v in expected_state.items() if k not in reloaded or not torch.equal(reloaded[k], v)]
    if different:
        raise ValueError(f"{folder}: the saved model differs from the GGUF weights in {different[:5]}.")


def convert_gguf(gguf_path: str | Path, output_dir: str | Path) -> Path:
    """Write `gguf_path` as a Hugging Face model folder in `output_dir` (created) and check it reloads identically."""
    output_dir = Path(output_dir)
    gguf_model, tokenizer = load_gguf(gguf_path)
    model = plain_copy(gguf_model)
    del gguf_model
    _generation_stops(model, tokenizer)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir)  # safetensors, config.json, generation_config.json
    tokenizer.save_pretrained(output_dir)  # tokenizer.json, tokenizer_config.json, the chat template
    check_identical(model.state_dict(), output_dir)
    return output_dir
