"""LoRA through TRL's ModelConfig keys: `drgrpo.run.training.train` wraps the tiny model in peft adapters, trains only
them, and saves an adapter that peft loads back on top of the base model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rank_probe import PROBE_REWARD, with_probe_reward

import drgrpo.run.training as training
from drgrpo.recipe.cli import parse_recipe

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "tiny_drgrpo.yaml"
LORA_ARGS = ["--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--lora_dropout", "0.0"]
LORA_TARGETS = ("q_proj", "v_proj")


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_model_path, addition_data):
    """Three Dr.GRPO steps on the tiny model with LoRA r=4 on q_proj and v_proj (in this process)."""
    output_dir = tmp_path_factory.mktemp("lora") / "model"
    argv = [
        str(RECIPE),
        "--model_name_or_path",
        str(tiny_model_path),
        "--dataset_path",
        str(addition_data["train"]),
        "--output_dir",
        str(output_dir),
        "--max_steps",
        "3",
        "--per_device_train_batch_size",
        "16",
        "--num_generations",
        "4",
        "--logging_steps",
        "1",
        # The random tiny model never solves the addition task (accuracy is 0 everywhere, so nothing would train):
        # the share of digits in a completion varies within a group, so the adapters get a gradient.
        "--reward_funcs",
        PROBE_REWARD,
        *LORA_ARGS,
        "--lora_target_modules",
        *LORA_TARGETS,
    ]
    resolve = training.get_reward_funcs
    training.get_reward_funcs = with_probe_reward(resolve)
    try:
        trainer = training.train(*parse_recipe(argv))
    finally:
        training.get_reward_funcs = resolve
    return trainer, output_dir


def test_recipe_keys_become_a_peft_config(tiny_model_path):
    from trl import get_peft_config

    _, _, model_args = parse_recipe([str(RECIPE), *LORA_ARGS, "--lora_target_modules", *LORA_TARGETS])
    config = get_peft_config(model_args)
    assert config.r == 4 and config.lora_alpha == 8 and set(config.target_modules) == set(LORA_TARGETS)


def test_only_adapter_weights_train_and_change(lora_run, tiny_model_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    trainer, _ = lora_run
    model = trainer.model
    assert isinstance(model, PeftModel)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path).state_dict()
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable), sorted(trainable)[:5]
    # 2 layers x 2 targets x (A, B)
    assert len(trainable) == 2 * len(LORA_TARGETS) * 2
    lora_b_moved = 0
    for name, param in model.named_parameters():
        if "lora_" in name:
            # lora_B starts at zero (the adapter is a no-op at step 0): non-zero means it was trained.
            lora_b_moved += "lora_B" in name and bool(param.detach().abs().max() > 0)
            continue
        base_name = name.replace("base_model.model.", "").replace(".base_layer", "")
        assert torch.equal(param.detach().cpu(), base[base_name]), f"frozen weight {base_name} changed"
    assert lora_b_moved == 2 * len(LORA_TARGETS)


def test_adapter_saves_and_loads(lora_run, tiny_model_path):
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    trainer, output_dir = lora_run
    assert (output_dir / "adapter_config.json").exists() and (output_dir / "adapter_model.safetensors").exists()
    assert not (output_dir / "model.safetensors").exists(), "save_model wrote full weights, not just the adapter"
    saved = load_file(output_dir / "adapter_model.safetensors")
    assert saved and all("lora_" in key for key in saved)

    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_path), output_dir).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    trained = trainer.model.eval()
    inputs = torch.tensor([[10, 11, 12, 13, 14]])
    with torch.no_grad():
        loaded_logits = loaded(inputs).logits
        assert torch.allclose(loaded_logits, trained(inputs).logits, atol=1e-6)
        assert not torch.allclose(loaded_logits, base(inputs).logits, atol=1e-6)  # the adapter does something
