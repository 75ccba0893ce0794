"""The CPU generation engine: batched decoding with a KV cache, built for what a GRPO step asks of it (issue 40).

It decodes with any transformers causal LM (the generation copy of `weights.GenerationWeights`, or the trained model
itself in float32) and returns, per row, the ids it sampled and their log-probs (`sampler.sample_next`), which the
trainer hands to TRL as `sampling_per_token_logps`. What makes it faster than `generate` on a CPU, each measured on
SmolLM2-135M, 32 rows (docs/demo.md, `benchmarks/cpu_generation.py`):

- **A prompt is prefilled once.** GRPO repeats each prompt `num_generations` times; the engine runs each distinct
  prompt through the model once and copies its KV cache to its rows (vLLM's prefix caching, for whole prompts).
- **A preallocated KV cache** (`GrowingLayer`): each layer writes the new keys and values into a buffer sized for
  the longest answer, instead of `DynamicCache`'s concatenation of the whole cache at every token.
- **Rows that ended leave the batch** once a quarter of it has ended (their cache rows are dropped), so a batch is not
  as slow as its longest answer.
- **Decode attention on the key/value heads** (`decode_attention`, Llama/Qwen families without a sliding window):
  one query per row, grouped per key/value head with two matmuls, instead of the fused CPU SDPA kernel, which costs
  ~0.7 ms a layer for one query; the masks are built once per token by the engine, not per layer.
- **One sampler** (`sampler.py`): vLLM's processing order and an exact draw, with per-row random streams, so a row's
  random numbers never depend on its batch (its logits can, in bf16: docs/demo.md, batch invariance).

`stop(row, token)` lets a caller end a row at a token of its choosing (the Python tool's closing fence); eos ids and
each row's token budget end rows too. A row with budget 0 is not generated at all (a padding row).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from drgrpo.algorithm.rollout.sampler import SamplingParams, logits_processors, sample_next, seen_tokens

ENGINE_ATTENTION = "drgrpo_engine"
# Model families whose attention is plain scaled dot-product over (grouped) key/value heads: no logit soft-capping,
# no attention sinks, no per-layer sliding window unless the config turns it on (checked separately).
PLAIN_ATTENTION_MODELS = frozenset({"llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "smollm3"})
COMPACT_SHARE = 0.25  # rows that ended, as a share of the batch, before they are dropped from it


@dataclass
class Sampled:
    """One row's generation: the sampled ids (an end token included) and each one's log-prob under the sampler."""

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values live in a buffer of `capacity` positions, written in place; `keys` and
    `values` are views of its filled part (what attention reads)."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        batch, heads, _, dim = key_states.shape
        self.key_buffer = key_states.new_empty(batch, heads, self.capacity, dim)
        self.value_buffer = value_states.new_empty(batch, value_states.shape[1], self.capacity, value_states.shape[-1])
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"GrowingLayer: {end} positions exceed the capacity of {self.capacity}.")
        self.key_buffer[:, :, self.length : end] = key_states
        self.value_buffer[:, :, self.length : end] = value_states
        self.length = end
        self.keys = self.key_buffer[:, :, :end]
        self.values = self.value_buffer[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if not self.is_initialized:
            return
        self.key_buffer = self.key_buffer.index_select(0, indices)
        self.value_buffer = self.value_buffer.index_select(0, indices)
        self.keys = self.key_buffer[:, :, : self.length]
        self.values = self.value_buffer[:, :, : self.length]


def engine_cache(config, capacity: int) -> DynamicCache:
    """A `DynamicCache` for `config` whose full-attention layers are `GrowingLayer`s of `capacity` positions (sliding
    window and other special layers keep transformers' own)."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    if not cache.layers:  # a config without layer types: one growing layer per hidden layer
        layers = config.get_text_config(decoder=True).num_hidden_layers
        cache.layers = [GrowingLayer(capacity) for _ in range(layers)]
    return cache


def cache_keyword(model) -> str:
    """The forward's name for the KV cache: `cache` (transformers 5.24+; `past_key_values` is deprecated there) or
    `past_key_values`."""
    return (
        "cache"
        if "cache" in inspect.signature(type(base_forward_owner(model)).forward).parameters
        else "past_key_values"
    )


def base_forward_owner(model):
    """The transformers model whose forward signature names the cache (under a peft wrapper, its base)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def decode_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """transformers attention function (registered as `drgrpo_engine`): one query per row is computed per key/value
    head, (rows, kv heads, group, dim) x (rows, kv heads, dim, length), scores and softmax in float32, as eager
    attention does; a prompt (several queries) goes to transformers' SDPA. `attention_mask` is the engine's boolean
    (rows, 1, queries, keys) mask, True where a query may attend."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if query.shape[2] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout)
    rows, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    grouped = query.view(rows, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float() * scaling
    scores = scores.masked_fill(~attention_mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).to(value.dtype)
    output = torch.matmul(weights, value)  # (rows, kv heads, group, dim)
    return output.reshape(rows, 1, heads, dim), None


def register_engine_attention() -> None:
    """Make `drgrpo_engine` an attention implementation transformers can dispatch to (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ENGINE_ATTENTION, decode_attention)


def uses_engine_attention(config) -> bool:
    """Whether the engine's own attention and masks fit this model: a plain-attention family, SDPA or eager, no
    sliding window layer."""
    text = config.get_text_config(decoder=True)
    if text.model_type not in PLAIN_ATTENTION_MODELS:
        return False
    if getattr(text, "_attn_implementation", None) not in ("sdpa", "eager", ENGINE_ATTENTION):
        return False
    layer_types = getattr(text, "layer_types", None) or []
    return all(kind == "full_attention" for kind in layer_types) and not getattr(text, "use_sliding_window", False)


@contextlib.contextmanager
def engine_attention(model) -> Iterator[bool]:
    """Inside: `model` attends with `decode_attention` (when `uses_engine_attention`); yields whether it does. The
    model's own attention setting is put back on exit (the trained model is shared with the loss)."""
    config = model.config.get_text_config(decoder=True)
    if not uses_engine_attention(config):
        yield False
        return
    register_engine_attention()
    previous = config._attn_implementation
    config._attn_implementation = ENGINE_ATTENTION
    try:
        yield True
    finally:
        config._attn_implementation = previous


class GenerationEngine:
    """Generates with a model: `generate(model, prompts, seeds, budgets, stop)` (module docstring)."""

    def __init__(self, eos_ids: Sequence[int], pad_id: int, params: SamplingParams) -> None:
        if not eos_ids:
            raise ValueError("GenerationEngine: no end-of-sequence id; generation would only stop at the budget.")
        self.eos = frozenset(int(i) for i in eos_ids)
        self.pad_id = int(pad_id)
        self.params = params
        self.processors = logits_processors(params)
        self.forwards = 0  # model calls so far (prefill and decode), for tests and benchmarks

    @torch.inference_mode()
    def generate(
        self,
        model,
        prompts: Sequence[Sequence[int]],
        seeds: Sequence[int],
        budgets: Sequence[int],
        stop: Callable[[int, int], bool] | None = None,
    ) -> list[Sampled]:
        """Each prompt's generation (see the class and module docstrings)."""
        if not len(prompts) == len(seeds) == len(budgets):
            raise ValueError("GenerationEngine.generate: prompts, seeds and budgets differ in length.")
        results = [Sampled() for _ in prompts]
        rows = [i for i, budget in enumerate(budgets) if budget > 0]
        if not rows:
            return results
        with engine_attention(model) as own_masks:
            self._decode(model, prompts, seeds, budgets, stop, rows, results, own_masks)
        return results

    def _decode(self, model, prompts, seeds, budgets, stop, rows, results, own_masks) -> None:
        device = next(model.parameters()).device
        distinct: dict[tuple[int, ...], int] = {}
        source = [distinct.setdefault(tuple(prompts[i]), len(distinct)) for i in rows]
        width = max(len(p) for p in distinct)
        capacity = width + max(budgets[i] for i in rows)
        ids = torch.full((len(distinct), width), self.pad_id, dtype=torch.long)
        valid = torch.zeros((len(distinct), capacity), dtype=torch.bool)
        for index, prompt in enumerate(distinct):  # left padding: every prompt ends where generation starts
            if prompt:
                ids[index, width - len(prompt) :] = torch.tensor(prompt)
            valid[index, width - len(prompt) : width] = True
        positions = (valid[:, :width].long().cumsum(-1) - 1).clamp(min=0)
        cache = engine_cache(model.config, capacity)
        cached = {cache_keyword(model): cache}
        if own_masks:
            causal = torch.ones(width, width, dtype=torch.bool).tril()
            mask = (causal & valid[:, None, None, :width]) | torch.eye(width, dtype=torch.bool)  # pads see themselves
        else:
            mask = valid[:, :width].long()
        output = model(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            position_ids=positions.to(device),
            use_cache=True,
            **cached,
            logits_to_keep=1,
        )
        self.forwards += 1
        select = torch.tensor(source)
        cache.batch_select_indices(select.to(device))
        logits = output.logits[:, -1].index_select(0, select.to(output.logits.device))
        valid = valid.index_select(0, select)
        next_position = positions[:, -1].index_select(0, select) + 1
        generators = [torch.Generator().manual_seed(int(seeds[i])) for i in rows]
        # The repetition penalty reads each row's own prompt and generated tokens, never its left-padding (vLLM).
        seen = None
        if self.params.penalizes:
            seen = seen_tokens(list(distinct), logits.shape[-1], logits.device)[select.to(logits.device)]
        live = list(rows)  # the result index of each row of the batch
        ended = [False] * len(live)
        length = width
        while True:
            tokens, logprobs = sample_next(logits, self.params, generators, self.processors, seen)
            token_list, logprob_list = tokens.tolist(), logprobs.tolist()
            for slot, row in enumerate(live):
                if ended[slot]:
                    continue
                token = token_list[slot]
                result = results[row]
                result.ids.append(token)
                result.logprobs.append(logprob_list[slot])
                if token in self.eos or len(result.ids) >= budgets[row] or (stop is not None and stop(row, token)):
                    ended[slot] = True
            if all(ended):
                return
            if sum(ended) >= max(1, COMPACT_SHARE * len(live)):
                keep = [slot for slot, done in enumerate(ended) if not done]
                index = torch.tensor(keep)
                cache.batch_select_indices(index.to(device))
                tokens, valid, next_position = tokens[index], valid[index], next_position[index]
                generators = [generators[slot] for slot in keep]
                seen = seen[index.to(seen.device)] if seen is not None else None
                live, ended = [live[slot] for slot in keep], [False] * len(keep)
            if seen is not None:
                seen.scatter_(1, tokens.unsqueeze(-1).to(seen.device), True)
            valid[:, length] = True
            length += 1
            mask = valid[:, None, None, :length] if own_masks else valid[:, :length].long()
            output = model(
                input_ids=tokens.unsqueeze(-1).to(device),
                attention_mask=mask.to(device),
                position_ids=next_position.unsqueeze(-1).to(device),
                use_cache=True,
                **cached,
            )
            self.forwards += 1
            next_position = next_position + 1
            logits = output.logits[:, -1]
