"""SwiGLU MLPs keeping gate and up only for the backward (drgrpo/algorithm/swiglu.py): the same outputs and gradients
bit for bit (float32, bf16 autocast, LoRA), two intermediate-width tensors kept per MLP instead of four, applied only
to the SwiGLU line and never under gradient checkpointing; the trainer applies it unless `recompute_swiglu: false`."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from drgrpo.algorithm.swiglu import SiluMul, is_swiglu_mlp, saves_less


def smollm2_like() -> LlamaForCausalLM:
    """SmolLM2's architecture (Llama, tied embeddings, GQA), shrunk."""
    config = LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True, hidden_act="silu",
    )  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config).float()


def loss_and_grads(model: nn.Module, ids: torch.Tensor, autocast: bool = False):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=ids).logits
    loss = torch.log_softmax(logits.float(), dim=-1)[..., 3].mul(torch.linspace(0.5, 2, ids.size(1))).sum()
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16 autocast"])
def test_outputs_and_gradients_are_bit_identical(autocast):
    stock = smollm2_like()
    lean = copy.deepcopy(stock)
    assert saves_less(lean) == 2 and saves_less(stock.model.embed_tokens) == 0
    ids = torch.randint(0, 97, (3, 11), generator=torch.Generator().manual_seed(1))
    stock_logits, stock_grads = loss_and_grads(stock, ids, autocast)
    lean_logits, lean_grads = loss_and_grads(lean, ids, autocast)
    assert torch.equal(lean_logits, stock_logits)
    assert lean_grads.keys() == stock_grads.keys() and len(lean_grads) == len(list(stock.parameters()))
    for name, grad in stock_grads.items():
        assert torch.equal(lean_grads[name], grad), name


def test_lora_adapters_get_the_same_gradients():
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=4, lora_alpha=8, target_modules=["gate_proj", "up_proj", "down_proj"], lora_dropout=0.0)
    stock = get_peft_model(smollm2_like(), config)
    for name, parameter in stock.named_parameters():
        if "lora_B" in name:  # non-zero B: the adapters take part in the forward, not only in the backward
            nn.init.normal_(parameter, std=0.1, generator=torch.Generator().manual_seed(len(name)))
    lean = copy.deepcopy(stock)
    assert saves_less(lean) == 2
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(2))
    stock_logits, stock_grads = loss_and_grads(stock, ids)
    lean_logits, lean_grads = loss_and_grads(lean, ids)
    assert torch.equal(lean_logits, stock_logits)
    assert any("lora_A" in name for name in lean_grads) and lean_grads.keys() == stock_grads.keys()
    for name, grad in stock_grads.items():
        assert torch.equal(lean_grads[name], grad), name


def kept_widths(model: nn.Module, ids: torch.Tensor) -> int:
    """How many tensors (distinct storages) of the MLP's intermediate width autograd keeps for one forward."""
    kept: dict[int, torch.Size] = {}

    def pack(tensor):
        kept[tensor.untyped_storage().data_ptr()] = tensor.shape
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(input_ids=ids).logits.sum()
    loss.backward()
    weights = {parameter.untyped_storage().data_ptr() for parameter in model.parameters()}  # down_proj's, for one
    return sum(1 for at, shape in kept.items() if shape[-1] == model.config.intermediate_size and at not in weights)


def test_two_intermediate_tensors_are_kept_per_mlp_instead_of_four():
    ids = torch.randint(0, 97, (2, 7), generator=torch.Generator().manual_seed(3))
    stock = smollm2_like()
    lean = copy.deepcopy(stock)
    saves_less(lean)
    assert kept_widths(stock, ids) == 4 * 2  # gate, silu(gate), up, the product; 2 layers
    assert kept_widths(lean, ids) == 2 * 2  # gate and up
    with torch.no_grad():  # generation: the stock expression, nothing kept
        assert torch.equal(lean(input_ids=ids).logits, stock(input_ids=ids).logits)


def test_silu_mul_keeps_only_its_inputs():
    gate = torch.randn(4, 6, requires_grad=True)
    up = torch.randn(4, 6, requires_grad=True)
    product = SiluMul.apply(gate, up)
    assert [t.data_ptr() for t in product.grad_fn.saved_tensors] == [gate.data_ptr(), up.data_ptr()]
    product.sum().backward()
    expected_gate = up * torch.sigmoid(gate) * (1 + gate * (1 - torch.sigmoid(gate)))
    assert torch.allclose(gate.grad, expected_gate.detach(), atol=1e-6)
    assert torch.allclose(up.grad, torch.nn.functional.silu(gate).detach(), atol=1e-6)


class GeluMLP(nn.Module):
    """The same attributes and line, another activation."""

    def __init__(self):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(4, 8), nn.Linear(4, 8), nn.Linear(8, 4)
        self.act_fn = nn.GELU()

    def forward(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj


class ScaledSwiGLU(GeluMLP):
    """SiLU, another forward."""

    def __init__(self):
        super().__init__()
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x) * 0.5)


def test_only_the_swiglu_line_with_silu_is_replaced_and_never_under_gradient_checkpointing():
    assert not is_swiglu_mlp(GeluMLP()) and not is_swiglu_mlp(ScaledSwiGLU())
    assert saves_less(nn.Sequential(GeluMLP(), ScaledSwiGLU())) == 0
    model = smollm2_like()
    assert all(is_swiglu_mlp(layer.mlp) for layer in model.model.layers)
    model.gradient_checkpointing_enable()
    assert saves_less(model) == 0 and "forward" not in vars(model.model.layers[0].mlp)


def test_the_trainer_applies_it_unless_the_key_is_off_and_trains_the_same_weights(
    tiny_model_path, addition_data, tmp_path
):
    from test_generation_engine import make_trainer

    on = make_trainer(tiny_model_path, addition_data, tmp_path / "on")  # the default: on
    assert on._lean_mlps == on.model.config.num_hidden_layers > 0
    assert all("forward" in vars(layer.mlp) for layer in on.model.model.layers)
    on.train()  # before the next trainer is built: each seeds the process's generators when it is built
    off = make_trainer(tiny_model_path, addition_data, tmp_path / "off", recompute_swiglu=False)
    assert off._lean_mlps == 0 and not any("forward" in vars(layer.mlp) for layer in off.model.model.layers)
    off.train()
    losses = [[entry["loss"] for entry in t.state.log_history if "loss" in entry] for t in (on, off)]
    assert len(losses[0]) == 2 and losses[0] == losses[1]
    for (name, trained), (_, reference) in zip(on.model.named_parameters(), off.model.named_parameters(), strict=True):
        assert torch.equal(trained, reference), name
