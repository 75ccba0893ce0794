"""Test helper: a tiny model that calls the Python tool on cue, deterministically, built in a second without training.

The tiny tokenizer (drgrpo.experiments.tiny) gets a few whole-word tokens (```python\\n, print(1), \\n```, ok), and
a Qwen3 model whose attention and MLP outputs are zero (`o_proj` and `down_proj` weights 0), so the residual stream at
a position is the embedding of its token: the model is a bigram table. Embeddings of the scripted tokens are
orthonormal and `lm_head` maps each one to its successor with a margin of ~40 nats, so sampling at temperature 1 picks
the scripted token with probability ~1 - 1e-17 (a few optimizer steps at a small learning rate do not change that):

    prompt "call:" ... ":"  ->  ```python\\n  print(1)  \\n```          (the turn stops at the fence; obs appended)
    observation ... "\\n"   ->  ok  <eos>     (or, `loop=True`, ```python\\n again: one call per turn, forever)
    prompt "skip:" ... "!"  ->  ok  <eos>                                (no call)

A prompt is plain text ending in ":" (calls the tool) or "!" (answers at once), so a test chooses per prompt how many
calls its answers make. With the tool off, the call turn goes on past the fence: \\n``` -> <eos>. `program` and
`answer` replace the words print(1) and ok (each stays one token, whatever characters it holds).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from drgrpo.experiments.tiny import build_tokenizer

WORDS = ("```python\n", "print(1)", "\n```", "ok")
MARGIN = 40.0


def build_tool_model(
    output_dir: str | Path, loop: bool = False, hidden_size: int = 32, program: str = "print(1)", answer: str = "ok"
) -> Path:
    """Save the scripted model and its tokenizer to `output_dir`; return the path."""
    output_dir = Path(output_dir)
    tokenizer = build_tokenizer()
    words = dict(zip(WORDS, ("```python\n", program, "\n```", answer), strict=True))
    tokenizer.add_tokens(list(words.values()))
    ids = {word: tokenizer.convert_tokens_to_ids(token) for word, token in words.items()}
    eos = tokenizer.eos_token_id
    newline = tokenizer.convert_tokens_to_ids("\n")
    successor = {
        tokenizer.convert_tokens_to_ids(":"): ids["```python\n"],
        ids["```python\n"]: ids["print(1)"],
        ids["print(1)"]: ids["\n```"],
        ids["\n```"]: eos,  # reached only with the tool off: the tool's turn stops at the fence
        newline: ids["```python\n"] if loop else ids["ok"],  # the observation's last token
        tokenizer.convert_tokens_to_ids("!"): ids["ok"],
        ids["ok"]: eos,
    }
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=2,  # 2: the layout tests/rank_probe.py records under ZeRO-3
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=hidden_size // 2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        scripted = sorted(successor)
        basis, _ = torch.linalg.qr(torch.randn(hidden_size, hidden_size))
        embeddings = model.model.embed_tokens.weight
        embeddings.normal_(0.0, 1.0 / hidden_size**0.5)
        for row, token in enumerate(scripted):
            embeddings[token] = basis[:, row]
        head = model.lm_head.weight
        head.zero_()
        scale = MARGIN / hidden_size**0.5  # the final RMSNorm scales a unit vector to norm sqrt(hidden_size)
        for token, nxt in successor.items():
            head[nxt] += scale * embeddings[token]
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir
