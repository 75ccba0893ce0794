"""LoRA outputs as models: what a `use_peft: true` run saves (the adapter, adapter_config.json naming its base) is
loaded, merged and evaluated like any saved model.

- `load_causal_lm`: a whole model folder or hub id as `AutoModelForCausalLM.from_pretrained` loads it; an adapter
  folder as its base (resolved by `drgrpo.core.models.resolve_model`, so a prepared short name works on any machine)
  with the adapter merged in (peft's `merge_and_unload`: the same weights, no adapter code left at generation time);
- `whole_model_folder`: a folder that loaders which take only a path (vLLM) can read: the model itself, an adapter's
  `merged/` folder when training wrote one (`save_merged_model: true`), else the adapter merged into a temporary
  folder that lasts as long as the process;
- `record_portable_base`: after training, the adapter's base as the recipe named it (`smollm2-135m-instruct`)
  instead of the machine's cache folder that peft records, so the folder still loads when copied elsewhere;
- `save_merged`: the base with the adapter merged in, saved with the tokenizer as a plain model folder.

torch, transformers and peft are imported inside the functions.
"""

from __future__ import annotations

import atexit
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from drgrpo.core.models import (
    ADAPTER_CONFIG,
    MERGED_FOLDER,
    PREPARED_MODELS,
    TOKENIZER_FILES,
    adapter_base,
    resolve_model,
)

logger = logging.getLogger(__name__)


def load_causal_lm(model_path: str, **kwargs: Any):
    """`AutoModelForCausalLM.from_pretrained(model_path, **kwargs)`; for an adapter folder, its base with the adapter
    merged in."""
    from transformers import AutoModelForCausalLM

    base = adapter_base(model_path) if Path(model_path).is_dir() else None
    if base is None:
        return AutoModelForCausalLM.from_pretrained(model_path, **kwargs)
    from peft import PeftModel

    model = AutoModelForCausalLM.from_pretrained(resolve_model(base), **kwargs)
    return PeftModel.from_pretrained(model, model_path).merge_and_unload()


def tokenizer_folder(model_path: str) -> str:
    """Where the tokenizer of `model_path` is: the folder itself (training saves it beside the adapter), else, for an
    adapter folder without one, its base."""
    base = adapter_base(model_path) if Path(model_path).is_dir() else None
    if base is None or any((Path(model_path) / name).is_file() for name in TOKENIZER_FILES):
        return model_path
    return resolve_model(base)


def save_merged(adapter_folder: str | Path, output: str | Path, **kwargs: Any) -> Path:
    """Save the adapter's base with the adapter merged in, and the tokenizer, as a plain model folder `output`
    (written beside it under a temporary name, then renamed: never half a model)."""
    from transformers import AutoTokenizer

    output = Path(output)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-", dir=output.parent))
    try:
        load_causal_lm(str(adapter_folder), **kwargs).save_pretrained(staging)
        AutoTokenizer.from_pretrained(tokenizer_folder(str(adapter_folder))).save_pretrained(staging)
        if output.exists():
            shutil.rmtree(output)
        staging.rename(output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return output


def whole_model_folder(model_path: str) -> str:
    """A folder holding a whole model for `model_path` (see the module docstring)."""
    if not Path(model_path).is_dir() or adapter_base(model_path) is None:
        return model_path
    merged = Path(model_path) / MERGED_FOLDER
    if (merged / "config.json").is_file():
        return str(merged)
    temporary = Path(tempfile.mkdtemp(prefix="drgrpo-merged-"))
    atexit.register(shutil.rmtree, temporary, ignore_errors=True)
    logger.info("Merging the adapter %s into its base for generation (temporary folder %s)", model_path, temporary)
    return str(save_merged(model_path, temporary / "model"))


def record_portable_base(adapter_folder: str | Path, given: str) -> None:
    """Name the base in `adapter_folder`'s adapter_config.json as the recipe did (`given`) when that is a prepared
    short name: peft records the path it loaded, which is this machine's model cache."""
    path = Path(adapter_folder) / ADAPTER_CONFIG
    if given not in PREPARED_MODELS or not path.is_file():
        return
    config = json.loads(path.read_text())
    if config.get("base_model_name_or_path") != given:
        config["base_model_name_or_path"] = given
        path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
