"""The loss forward with each prompt computed once: GRPO's completions of one prompt share it, so the training forward
runs the prompt through the model once per micro-batch and the completions on top of its keys and values.

TRL's loss forward runs every row's prompt and completion through the model: in the SmolLM2 demo a ~50-token prompt
before completions of 12 to 64 tokens, repeated for each of the 8 completions of a group. Here a micro-batch whose
rows share prompts (the trainer groups an optimizer step's rows by prompt, then by length: `padding.py`) is split at
the last prompt token:

1. the distinct prompts (all but their last token) run through the backbone once, keeping their key/value cache,
   with gradients;
2. the cache is indexed out to the micro-batch's rows (a differentiable index: each row's gradient flows back into
   its prompt's one forward; `select_rows`, deterministic);
3. the rows' last prompt token and completions run on top of it through TRL's fused LM head, which returns the
   completion tokens' log-probs and entropies as TRL's own forward does.

The same computation as TRL's forward, token for token: each position attends to the same keys with the same
position ids (the full sequence's, from its first column, as TRL numbers them), so the log-probs agree to float
rounding (tested against TRL's forward, with their gradients). A micro-batch without a repeated prompt, a model
under a wrapper (peft, DeepSpeed) and multimodal inputs take TRL's path.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from drgrpo.algorithm.rollout.engine import cache_keyword


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(index of each distinct prompt's first row, each row's distinct prompt) for (rows, prompt width) tensors."""
    keyed = torch.cat([prompt_ids * prompt_mask, prompt_mask], dim=1)
    _, inverse = torch.unique(keyed, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), prompt_ids.size(0), dtype=torch.long)
    first = first.scatter_reduce(0, inverse, torch.arange(prompt_ids.size(0)), reduce="amin")
    order = torch.argsort(first)  # distinct prompts in the order their first rows come
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel())
    return first[order], rank[inverse]


def select_rows(cache: DynamicCache, rows: torch.Tensor) -> None:
    """Index every layer's keys and values out to `rows`, with a backward that gives the same bits each run.

    transformers' `batch_select_indices` indexes with `keys[rows, ...]`, whose backward on CPU is `index_put_` with
    accumulation, done with parallel atomic adds once a layer's cache holds 32,768 elements or more and torch runs 2
    threads: the rows' gradients reach their shared prompt summed in a different order each run (last-bit
    differences; two runs of the SmolLM2 demo's step 2 differed in 265 of 272 gradients, which moved its later samples
    apart). On CPU `index_select` is used: its backward `index_add_` adds the rows one after another. On CUDA it is
    the other way round (`index_add_` uses atomics, `index_put_` sorts its indices: torch's list of nondeterministic
    operations), so there transformers' selection is kept."""
    if rows.device.type != "cpu":
        cache.batch_select_indices(rows)
        return
    for layer in cache.layers:
        keys = getattr(layer, "keys", None)
        if type(layer) is DynamicLayer and keys is not None and keys.numel() > 0:
            layer.keys = keys.index_select(0, rows)
            layer.values = layer.values.index_select(0, rows)
        else:  # another layer kind (sliding window, with an indexer): transformers' own selection, bits as before
            layer.batch_select_indices(rows)


def shares_prompts(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int) -> bool:
    """Whether the split forward applies: a plain transformers model and a prompt shared by two rows or more."""
    if not isinstance(model, PreTrainedModel) or getattr(model, "peft_config", None) is not None:
        return False
    prompt_width = input_ids.size(1) - logits_to_keep
    if prompt_width < 2 or input_ids.size(0) < 2:
        return False
    _, rows = prompt_groups(input_ids[:, :prompt_width], attention_mask[:, :prompt_width])
    return int(rows.max()) + 1 < input_ids.size(0)


def shared_prompt_forward(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int):
    """TRL's fused-head output (`log_probs`, `entropy` of the last `logits_to_keep` positions' tokens) for the rows of
    `input_ids` (prompt then completion columns), each distinct prompt run once (module docstring). Call it where TRL
    calls the model: under the accelerator's autocast."""
    prefix = input_ids.size(1) - logits_to_keep - 1  # the prompt but its last token
    first, rows = prompt_groups(input_ids[:, : prefix + 1], attention_mask[:, : prefix + 1])
    positions = torch.arange(input_ids.size(1), device=input_ids.device).expand(input_ids.size(0), -1)
    cache = DynamicCache(config=model.config)
    cached = {cache_keyword(model): cache}
    model.base_model(
        input_ids=input_ids[first, :prefix],
        attention_mask=attention_mask[first, :prefix],
        position_ids=positions[first, :prefix],
        use_cache=True,
        **cached,
    )
    select_rows(cache, rows.to(input_ids.device))
    suffix = input_ids[:, prefix:]
    labels = suffix.masked_fill(attention_mask[:, prefix:] == 0, -100)
    labels[:, 0] = -100  # the last prompt token: only the tokens after it are scored
    return model(
        input_ids=suffix,
        attention_mask=attention_mask,
        position_ids=positions[:, prefix:],
        labels=labels,
        fused_lm_head=True,
        **cached,
    )
