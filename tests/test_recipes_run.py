"""Every shipped recipe runs as shipped, minus the GPU: 2 training steps on CPU, through the train script's own
parser and training function.

Only these keys change (`cpu_variant`); every other key stays as the recipe ships it, so a key that TRL rejects, a
column that its dataset does not have, a filter that keeps nothing, or a template that does not render fails here
rather than on a GPU node:
- the model: the locally built tiny model (the hub is unreachable, and an 8B model does not train on a CPU), built
  with a context of 8192 positions, as the recipes' own models have at least (Qwen2.5-Math 4096), so that each
  recipe's prompt budget (`max_prompt_tokens`) fits it as on its real model;
- the data: a small local file in the format of each dataset the recipe names (tests/dataset_formats.py: the same
  columns and value types), replacing the hub id (and its config/split) or the shipped local path; every column
  mapping, filter, answer_extraction, template and mixture weight stays;
- GPU-only keys off: `use_vllm` (vLLM runs only on CUDA GPUs; the other `vllm_*` keys stay, unused),
  `bf16: false` (transformers refuses bf16 mixed precision without a bf16 GPU), `use_cpu: true` (so that a machine
  with a GPU still runs this on CPU), and `attn_implementation: flash_attention_2` -> `sdpa` (the flash-attn kernels
  are CUDA-only; no shipped recipe uses it yet). DeepSpeed ZeRO-3 and multi-GPU launches live in
  accelerate_configs/, not in the recipes, so this single-process run simply does not use them; `dtype: bfloat16`
  weights, gradient checkpointing and `ds3_gather_for_generation` work on CPU and stay;
- sizes: 2 steps, 2 completions per prompt, 4 completions per step, 1 accumulation step, 8 completion tokens;
- where it writes: `output_dir` (and wandb's offline files) under the test's temporary folder.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from dataset_formats import write_format

RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))

# Sizes: the smallest batch TRL accepts with groups of 2 (2 prompts x 2 completions per step).
SIZES = {
    "max_steps": 2,
    "num_generations": 2,
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 1,
    "max_completion_length": 8,
}
# Set only when the recipe sets them (they must then agree with the sizes above).
OPTIONAL_SIZES = {
    "generation_batch_size": 4,
    "steps_per_generation": 1,
    "num_generations_eval": 2,
    "per_device_eval_batch_size": 4,
    "dataset_mixture_size": 12,
}
GPU_ONLY = {"use_vllm": False, "bf16": False, "use_cpu": True}
SOURCE_KEYS = ("dataset_name", "dataset_config", "dataset_path", "split")


@pytest.fixture(scope="module")
def recipe_model(tmp_path_factory) -> Path:
    """The tiny model with 8192 positions (see the module docstring)."""
    from drgrpo.experiments.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-8k"), seed=0, max_position_embeddings=8192)


def _local_source(entry: dict, split_key: str, data_dir: Path, number: int) -> dict:
    """A copy of a data source with its hub id / shipped path replaced by a local file of the same format."""
    name = entry.get("dataset_name") or entry.get("dataset_path")
    path = write_format(name, data_dir / f"source{number}.jsonl")
    local = {key: value for key, value in entry.items() if key not in (*SOURCE_KEYS, split_key)}
    return {**local, "dataset_path": str(path)}


def cpu_variant(recipe: dict, model: Path, data_dir: Path, output_dir: Path) -> dict:
    """The recipe with only the changes listed in this module's docstring."""
    variant = dict(recipe)
    variant["model_name_or_path"] = str(model)
    if variant.get("attn_implementation") == "flash_attention_2":
        variant["attn_implementation"] = "sdpa"
    if variant.get("dataset_mixture"):
        variant["dataset_mixture"] = [
            _local_source(entry, "split", data_dir, number) for number, entry in enumerate(variant["dataset_mixture"])
        ]
    else:
        source = _local_source(variant, "dataset_train_split", data_dir, 0)
        variant = {key: value for key, value in variant.items() if key not in (*SOURCE_KEYS, "dataset_train_split")}
        variant.update(source)
    if variant.get("dataset_test_split"):  # a hub split of dataset_name: the same format, as a local file
        name = recipe["dataset_name"]
        variant["dataset_test_path"] = str(write_format(name, data_dir / "test.jsonl", rows=8))
        del variant["dataset_test_split"]
    elif variant.get("dataset_test_path"):  # a held-out file the recipe names: the same format, as a local file
        variant["dataset_test_path"] = str(write_format(recipe["dataset_test_path"], data_dir / "test.jsonl", rows=8))
    variant.update(SIZES)
    variant.update({key: value for key, value in OPTIONAL_SIZES.items() if key in recipe})
    variant.update(GPU_ONLY)
    variant["output_dir"] = str(output_dir)
    return variant


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_runs_two_steps_on_cpu(recipe, recipe_model, tmp_path, monkeypatch):
    from drgrpo.recipe.cli import parse_recipe
    from drgrpo.run.training import train

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    shipped = yaml.safe_load(recipe.read_text())
    variant = cpu_variant(shipped, recipe_model, tmp_path / "data", tmp_path / "run")
    changed = {key for key in variant if variant.get(key) != shipped.get(key)} | (shipped.keys() - variant.keys())
    allowed = {*SIZES, *OPTIONAL_SIZES, *GPU_ONLY, *SOURCE_KEYS, "dataset_train_split", "dataset_test_split"}
    allowed |= {"model_name_or_path", "attn_implementation", "dataset_mixture", "dataset_test_path", "output_dir"}
    assert changed <= allowed, f"the CPU run changed more than it may: {sorted(changed - allowed)}"

    path = tmp_path / recipe.name
    path.write_text(yaml.safe_dump(variant, sort_keys=False))
    script_args, training_args, model_args = parse_recipe([str(path)])
    trainer = train(script_args, training_args, model_args)

    assert trainer.state.global_step == 2
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert all(math.isfinite(loss) for loss in losses)
    assert (tmp_path / "run" / "config.json").exists() or (tmp_path / "run" / "adapter_config.json").exists()
    # the algorithm the recipe claims is the one that ran
    if shipped.get("dr_grpo"):
        assert (trainer.args.scale_rewards, trainer.args.loss_type, trainer.args.beta) == ("none", "dr_grpo", 0.0)


def test_a_recipe_that_does_not_fit_its_dataset_fails_the_cpu_run(recipe_model, tmp_path):
    """The check can fail: MATH's level is the string "Level 3", so an integer level filter keeps no row."""
    from drgrpo.recipe.cli import parse_recipe
    from drgrpo.run.training import train

    shipped = yaml.safe_load((ROOT / "recipes" / "qwen3_8b_drgrpo.yaml").read_text())
    broken = {**shipped, "dataset_filter": {"level": [3, 4, 5]}}
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(cpu_variant(broken, recipe_model, tmp_path / "data", tmp_path / "run")))
    with pytest.raises(ValueError, match="kept 0 of 20 rows"):
        train(*parse_recipe([str(path)]))
