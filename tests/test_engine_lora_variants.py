"""The generation copy of a peft model is peft's merged model, for every LoRA variant it merges; a variant it cannot
merge is refused when the engine is built, in one line (issue 53).

Before issue 53 every LoRA layer was merged as W + delta, peft's merge for plain LoRA only: with `use_dora` the copy
sampled from another policy (the review measured its weights 0.61 and its logits 1.25 off peft's merge), `lora_bias`
was left out and an adapted embedding was not merged at all."""

from __future__ import annotations

import json

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model

from drgrpo.algorithm.rollout.lora_merge import check_mergeable
from drgrpo.algorithm.rollout.weights import build_copy

VOCAB = 96
VARIANTS = {
    "lora": {},
    "rslora": {"use_rslora": True},
    "dora": {"use_dora": True},
    "dora + rslora": {"use_dora": True, "use_rslora": True},
    "lora_bias": {"lora_bias": True, "target_modules": ["q_proj", "v_proj"]},  # Qwen2's q and v have biases
    "lora on embeddings": {"target_modules": ["embed_tokens", "v_proj"]},
    "dora on embeddings": {"use_dora": True, "target_modules": ["embed_tokens", "q_proj"]},
}


def qwen2() -> torch.nn.Module:
    """A tiny random Qwen2 (q, k, v biases; untied embeddings, so an adapted embedding is the input's alone)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
    )  # fmt: skip
    return Qwen2ForCausalLM(config).eval()


def adapted(settings: dict):
    """A peft model of `settings` whose adapters do something: peft starts a linear layer's B and an embedding's A at 0
    (and DoRA's magnitude at the weight's norm, where it changes nothing), so they are moved as training would."""
    settings = dict(settings)
    targets = settings.pop("target_modules", ["q_proj", "v_proj", "down_proj"])
    model = get_peft_model(qwen2(), LoraConfig(r=4, lora_alpha=8, target_modules=targets, **settings))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name or "lora_embedding_A" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
            elif "lora_magnitude_vector" in name:
                parameter.mul_(1 + 0.3 * torch.randn(parameter.shape, generator=generator))
    return model


@pytest.mark.parametrize("name", list(VARIANTS))
def test_the_copy_is_pefts_merged_model(name):
    model = adapted(VARIANTS[name])
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        trained = model(ids).logits  # peft's own forward, adapters unmerged
        copy = build_copy(model, torch.float32)
        copied = copy(ids).logits
        bf16_copy = build_copy(model, torch.bfloat16)
        merged_model = model.merge_and_unload()  # peft's merge (in place: last)
        merged = merged_model(ids).logits
    assert (merged - trained).abs().max() < 1e-4  # peft's merge is its forward
    assert (copied - merged).abs().max() < 1e-5, f"{name}: the copy's logits are off peft's merge"
    copy_weights, bf16_weights = dict(copy.named_parameters()), dict(bf16_copy.named_parameters())
    for key, parameter in merged_model.named_parameters():
        assert torch.allclose(copy_weights[key], parameter, atol=1e-6), f"{name}: {key}"
        if key in bf16_weights:  # absent where the bf16 copy's linear layers are packed for oneDNN
            assert torch.equal(bf16_weights[key], parameter.to(torch.bfloat16)), f"{name}: {key}"
    assert (merged - qwen2()(ids).logits).abs().max() > 0.1  # the adapters really changed the policy
    if any("lora_embedding" in key for key, _ in model.named_parameters()):  # an adapted embedding moved its rows
        moved = merged_model.get_input_embeddings().weight - qwen2().get_input_embeddings().weight
        assert moved.abs().max() > 0.1


def test_the_copy_leaves_the_trained_model_as_it_was():
    model = adapted(VARIANTS["dora"])
    before = {key: value.clone() for key, value in model.state_dict().items()}
    build_copy(model, torch.bfloat16)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[key], after[key]) for key in before)
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    assert not layer.merged and not layer._caches  # peft's merge caches DoRA's weight norm; dropped again


@pytest.mark.parametrize(
    "settings, said",
    [
        ({"alora_invocation_tokens": [5, 6]}, "the peft LoRA variant ALoraLinearVariant on base_model.model.model"),
        ({"lora_bias": True, "target_modules": ["o_proj"]}, "lora_bias on base_model.model.model.layers.0"),
    ],
)
def test_what_the_copy_cannot_merge_is_refused_in_one_line(settings, said):
    with pytest.raises(ValueError) as info:
        check_mergeable(adapted(settings))
    message = str(info.value)
    assert "\n" not in message and said in message and "set generation_engine: trl" in message


def test_the_trainer_refuses_it_at_start_up(tiny_model_path, addition_data, tmp_path):
    """Built with a bf16 copy and an aLoRA adapter: refused in the trainer's constructor, before any step."""
    from rank_probe import digit_reward

    from drgrpo.algorithm.config import DrGRPOConfig
    from drgrpo.algorithm.trainer import DrGRPOTrainer

    rows = [json.loads(line) for line in open(addition_data["train"])][:8]
    dataset = Dataset.from_list([{"prompt": r["question"], "answer": r["answer"]} for r in rows])
    args = DrGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=True, report_to="none", per_device_train_batch_size=4,
        num_generations=4, max_completion_length=4, dr_grpo=True,
    )  # fmt: skip
    adapter = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], alora_invocation_tokens=[5])
    with pytest.raises(ValueError, match="ALoraLinearVariant on .*: the engine's generation copy cannot merge it"):
        DrGRPOTrainer(
            model=str(tiny_model_path), reward_funcs=[digit_reward], args=args, train_dataset=dataset,
            peft_config=adapter,
        )  # fmt: skip
