"""Activations (pure): the bytes a training micro-batch keeps for backward, with and without gradient checkpointing.

Counted from what transformers' Llama-layout decoders (modeling_{llama,mistral,qwen2,qwen3}.py) save for backward
under SDPA attention, tensor by tensor, in bf16 (`act_bytes` 2). Per decoder layer and token:

- two RMSNorms, each: its float32 input (4h), the float32 rsqrt (4), the normalized bf16 copy (2h) and its output,
  the next projections' input (2h): 2 x (8h + 4);
- Qwen3's q_norm/k_norm on each head: float32 input, bf16 copy, rsqrt: (4 + 2) x (heads + kv_heads) x head_dim + 4
  per head;
- SDPA: q, k, v (with padding, transformers repeats k and v to every head, `repeat_kv`; without, GQA keeps kv_heads)
  and the output, 2 bytes each, plus the float32 log-sum-exp per head (CUDA's memory-efficient and CPU's flash
  kernels save the same tensors; the output is laid out [batch, seq, heads, dim], so o_proj's input is the same
  storage);
- the gated MLP: gate, up, SiLU(gate) and their product (down_proj's input): 4 x 2 x intermediate;
- with padding, SDPA's float copy of the boolean mask, [batch, 1, seq, seq], 2 bytes per entry, made per layer.

Shared by all layers: input ids (8 per token), RoPE cos/sin, and the final RMSNorm (4h + 4 + 2h per token).
`tests/test_plan_gpu_memory.py` checks these counts against the tensors transformers saves (saved-tensor hooks) on
tiny Qwen3 and Qwen2 models, exactly.

TRL 1.16 never materializes the logits: its fused LM head (`trl.trainer.utils.add_fused_lm_head`, kernel
`trl.kernels.chunked_logprob.ChunkedLogProbFunction`) projects the scored positions in [4096 x 32768] tiles. It
saves the scored positions' hidden states (2h), their targets (int64), log-normalizer and entropy (float32), and two
boolean masks; its backward holds float32 gradients of those hidden states (4h per scored token) and of the LM head
weight (4 x vocab x h), and one tile.

With gradient checkpointing (transformers' non-reentrant `torch.utils.checkpoint` per decoder layer), each layer
keeps only its input (2h per token); backward recomputes one layer at a time, so the peak holds every layer's input,
the head's saved tensors, and the larger of the head's backward buffers and one recomputed layer. Not counted: the
transient gradient tensors inside one layer's backward and the allocator's fragmentation (only a GPU shows those).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The architectures whose saved tensors the counts above follow (tests/test_plan_gpu_memory.py checks them).
LLAMA_LAYOUT_TYPES = ("llama", "mistral", "qwen2", "qwen3")
# TRL 1.16's fused-head tiles (trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE, trl/trainer/utils.py
# _CHUNKED_LOGPROB_CHUNK_SIZE); tests/test_plan_gpu_memory.py reads them from the installed TRL.
HEAD_TILE_TOKENS = 4096
HEAD_TILE_VOCAB = 32768


@dataclass(frozen=True)
class ActivationEstimate:
    """Per-GPU bytes of one training micro-batch's activations (each term, then the two peaks)."""

    micro_batch: int
    sequence_length: int
    scored_tokens: int
    layer_inputs: int  # every layer's input: what gradient checkpointing keeps
    one_layer: int  # one decoder layer's saved tensors (recomputed one at a time with checkpointing)
    all_layers: int  # every layer's saved tensors, without checkpointing
    shared: int  # input ids, RoPE, final norm
    head_saved: int  # TRL's fused LM head, saved for backward
    head_backward: int  # its backward buffers

    @property
    def with_checkpointing(self) -> int:
        return self.layer_inputs + self.shared + self.head_saved + max(self.head_backward, self.one_layer)

    @property
    def without_checkpointing(self) -> int:
        return self.all_layers + self.shared + self.head_saved + self.head_backward


def layer_bytes_per_token(config: dict[str, Any], *, padded: bool = True, act_bytes: int = 2) -> int:
    """Bytes one decoder layer saves for backward per token (the module docstring's list), without the mask term."""
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    norms = 2 * (4 * hidden + 4 + 2 * act_bytes * hidden)
    head_norms = 0
    if config.get("model_type") == "qwen3":
        head_norms = (4 + act_bytes) * (heads + kv_heads) * head_dim + 4 * (heads + kv_heads)
    kv_saved = heads if padded else kv_heads
    attention = act_bytes * head_dim * (2 * heads + 2 * kv_saved) + 4 * heads
    mlp = 4 * act_bytes * config["intermediate_size"]
    return norms + head_norms + attention + mlp


def training_activations(
    config: dict[str, Any],
    micro_batch: int,
    sequence_length: int,
    scored_tokens: int,
    *,
    padded: bool = True,
    act_bytes: int = 2,
) -> ActivationEstimate:
    """Activations of `micro_batch` sequences of `sequence_length` tokens (prompt + completion, padded to the longest),
    `scored_tokens` of which the loss scores (TRL: the completion tokens, micro_batch x max_completion_length at most).
    `config` holds the config.json fields with transformers' defaults (`model_size.with_defaults`)."""
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    layers = config["num_hidden_layers"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    tokens = micro_batch * sequence_length
    mask = act_bytes * micro_batch * sequence_length**2 if padded else 0
    one_layer = tokens * layer_bytes_per_token(config, padded=padded, act_bytes=act_bytes) + mask
    rope = 2 * act_bytes * sequence_length * head_dim
    shared = 8 * tokens + rope + tokens * (4 * hidden + 4 + act_bytes * hidden)
    return ActivationEstimate(
        micro_batch=micro_batch,
        sequence_length=sequence_length,
        scored_tokens=scored_tokens,
        layer_inputs=layers * tokens * act_bytes * hidden,
        one_layer=one_layer,
        all_layers=layers * one_layer,
        shared=shared,
        head_saved=scored_tokens * (act_bytes * hidden + 16) + 2 * micro_batch * (sequence_length - 1),
        head_backward=4 * scored_tokens * hidden + 4 * vocab * hidden + act_bytes * HEAD_TILE_TOKENS * HEAD_TILE_VOCAB,
    )
