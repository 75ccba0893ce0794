"""Colocated vLLM (pure): its share of a GPU split into weights, non-KV overhead and KV cache, and how many sequences
that KV cache holds at once.

vLLM claims `gpu_memory_utilization` x the GPU's total memory. Of that it keeps the weights (its shard under tensor
parallelism), the peak of a profiling forward pass and the sampler's logits, and a runtime reserve (CUDA graphs,
NCCL and cuBLAS buffers); the rest is KV cache (vLLM's `determine_available_memory`). Each token of each sequence
takes `2 x layers x kv_heads x head_dim x dtype bytes` of it (a key and a value vector per layer and KV head); vLLM
refuses to start when the weights do not fit or when not even one `max_model_len`-token sequence fits.

TRL 1.16 builds the colocated engine with `max_num_batched_tokens=4096` and `max_num_seqs = per_device_train_batch_size
x vllm_tensor_parallel_size x steps_per_generation` (trl/generation/vllm_generation.py, trl/trainer/grpo_trainer.py):
every rollout sends that many requests to each engine at once. When the KV cache holds fewer full-length sequences,
vLLM runs them in waves (or preempts): generation is KV-bound.

The profiling forward and the reserve are estimates from vLLM's design, not measurements (no GPU here): the
profile as the largest activations of a `max_num_batched_tokens` forward (residual, normed input, q/k/v, gate+up,
SiLU output, 2 bytes each) plus two float32 copies of `max_num_seqs` rows of logits; the reserve as a fixed 1 GiB.
On a GPU, vLLM's log line "Available KV cache memory: X GiB" gives the real KV term.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from drgrpo.planning.memory import GIB

TRL_MAX_NUM_BATCHED_TOKENS = 4096  # trl/generation/vllm_generation.py: LLM(..., max_num_batched_tokens=4096)
VLLM_RUNTIME_RESERVE_BYTES = 1 * GIB  # CUDA graphs, NCCL and cuBLAS buffers: an allowance, not measured here


def kv_bytes_per_token(config: dict[str, Any], *, dtype_bytes: int = 2, tensor_parallel: int = 1) -> int:
    """KV-cache bytes per token per GPU: 2 (key, value) x layers x KV heads on this GPU x head_dim x dtype bytes.

    Under tensor parallelism vLLM splits the KV heads across GPUs, and replicates them when there are fewer heads
    than GPUs (at least one per GPU). Qwen3-8B: 2 x 36 x 8 x 128 x 2 = 147,456 bytes (144 KiB).
    """
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    kv_heads_here = max(1, kv_heads // tensor_parallel)
    return 2 * config["num_hidden_layers"] * kv_heads_here * head_dim * dtype_bytes


def profile_bytes(
    config: dict[str, Any], max_num_seqs: int, *, tensor_parallel: int = 1, batched_tokens: int = 0
) -> int:
    """The estimated peak of vLLM's profiling run (module docstring): one forward of `batched_tokens` tokens
    (default TRL's 4096) and two float32 copies of the sampler's `max_num_seqs` x vocab logits."""
    tokens = batched_tokens or TRL_MAX_NUM_BATCHED_TOKENS
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    per_token = 2 * hidden + ((heads + 2 * kv_heads) * head_dim + 3 * config["intermediate_size"]) / tensor_parallel
    return int(tokens * 2 * per_token) + 2 * 4 * max_num_seqs * config["vocab_size"]


@dataclass(frozen=True)
class VllmMemory:
    """Per-GPU bytes of a colocated vLLM engine, term by term."""

    utilization: float
    budget: int  # utilization x the GPU's memory
    weights: int
    profile: int
    reserve: int
    kv_bytes_per_token: int
    max_model_len: int
    max_num_seqs: int  # requests per engine per rollout (TRL's max_num_seqs)

    @property
    def kv_cache(self) -> int:
        return self.budget - self.weights - self.profile - self.reserve

    @property
    def sequence_bytes(self) -> int:
        """KV cache of one `max_model_len`-token sequence."""
        return self.kv_bytes_per_token * self.max_model_len

    @property
    def concurrent_sequences(self) -> int:
        """Full-length sequences the KV cache holds at once (vLLM's "maximum concurrency")."""
        return max(0, self.kv_cache // self.sequence_bytes)

    def utilization_for(self, sequences: int, gpu_bytes: int) -> float:
        """The smallest `gpu_memory_utilization` whose KV cache holds `sequences` full-length sequences."""
        return (self.weights + self.profile + self.reserve + sequences * self.sequence_bytes) / gpu_bytes


def vllm_memory(
    config: dict[str, Any],
    total_params: int,
    *,
    utilization: float,
    gpu_bytes: int,
    max_model_len: int,
    max_num_seqs: int,
    tensor_parallel: int = 1,
    dtype_bytes: int = 2,
) -> VllmMemory:
    """Colocated vLLM's terms for one GPU (`config`: config.json fields with transformers' defaults)."""
    return VllmMemory(
        utilization=utilization,
        budget=int(utilization * gpu_bytes),
        weights=math.ceil(dtype_bytes * total_params / tensor_parallel),
        profile=profile_bytes(config, max_num_seqs, tensor_parallel=tensor_parallel),
        reserve=VLLM_RUNTIME_RESERVE_BYTES,
        kv_bytes_per_token=kv_bytes_per_token(config, dtype_bytes=dtype_bytes, tensor_parallel=tensor_parallel),
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
    )
