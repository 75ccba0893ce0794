"""A tiny Qwen3-architecture causal LM with a character-level tokenizer, built locally from a seed.

The hub is unreachable on CPU-only test machines, so the demo and the tests train this model instead of a real one.
It goes through exactly the same `from_pretrained` path as a hub model: it is saved with `save_pretrained` and
loaded back from the folder.
"""

from __future__ import annotations

import string
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<answer>", "</answer>"]

# ChatML, as Qwen's models use it. Like Qwen3's template it reads `enable_thinking`: when the caller passes
# `enable_thinking=False`, an empty thinking block is opened and closed in the generation prompt.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    "{% endif %}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer over printable ASCII plus ChatML/R1 special tokens, with a chat template."""
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for char in string.printable:
        vocab.setdefault(char, len(vocab))
    vocab["<unk>"] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(
    output_dir: str | Path,
    *,
    seed: int = 0,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    max_position_embeddings: int = 512,
    tie_word_embeddings: bool = True,
) -> Path:
    """Build a random-weight Qwen3 model and its tokenizer, save both to `output_dir`, and return the path.

    `tie_word_embeddings=False` gives the model its own `lm_head` weight, as Qwen3-8B and Qwen2.5-Coder-7B have:
    under ZeRO-3 that weight is a separate sharded parameter that TRL's fused head gathers (the path the GPU smoke
    test checks)."""
    output_dir = Path(output_dir)
    tokenizer = build_tokenizer()
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir
