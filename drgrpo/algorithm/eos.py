"""Extra end-of-answer tokens (`extra_eos_tokens`): tokens that end a completion besides the model's own eos.

A base model's generation config often ends text only at `<|endoftext|>`, while the prompt template's turns end with
another token (`<|im_end|>` under the Qwen-Math / ChatML template). Every place that decides where a completion ends
must then agree on the extra token, or a finished answer is read as truncated:

- TRL's `eos_token_ids` (GRPOTrainer): masks everything after the first eos, decides which completions count as
  truncated (`completions/clipped_ratio`, `mask_truncated_completions`) and feeds our `diag/` truncation metrics;
- the transformers generation backend: `GenerationConfig.eos_token_id` (where `generate` stops);
- vLLM: `SamplingParams.stop_token_ids` (its own eos is always a stop token; the extras are added);
- the evaluator (`drgrpo.evaluation`), which reads the same key from the recipe.

The model's saved `generation_config.json` is left as it was (TRL keeps it so, too): the key belongs to the recipe.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

EXTRA_EOS_HELP = (
    "Tokens that also end a completion, besides the model's own eos (e.g. ['<|im_end|>'] for a base model under a "
    "ChatML/Qwen-Math template). They reach TRL's eos_token_ids (completion mask, clipped_ratio, "
    "mask_truncated_completions, diag/ truncation), the transformers backend's eos_token_id, vLLM's stop_token_ids "
    "and the evaluator. Each must be a single token of the model's tokenizer."
)


@dataclass
class EosArguments:
    """The `extra_eos_tokens` key, shared by the trainer config and the evaluator's arguments."""

    extra_eos_tokens: list[str] | None = field(default=None, metadata={"help": EXTRA_EOS_HELP})


def extra_eos_token_ids(tokenizer: Any, tokens: Sequence[str] | None) -> list[int]:
    """The ids of `tokens` in `tokenizer`'s vocabulary, in order; a `ValueError` naming any token it lacks.

    Only whole vocabulary entries count: a string the tokenizer would split into several tokens cannot end a
    completion on its own, so it is an error, not a silent no-op.
    """
    if not tokens:
        return []
    if isinstance(tokens, str):
        tokens = [tokens]
    vocab = tokenizer.get_vocab()
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    ids = []
    for token in tokens:
        if token not in vocab:
            raise ValueError(
                f"extra_eos_tokens: {token!r} is not a single token of the tokenizer {name!r}; use one of its "
                "special tokens (e.g. its chat template's end-of-turn token) or remove the entry."
            )
        ids.append(vocab[token])
    return ids


def merge_token_ids(base: Iterable[int] | int | None, extra: Iterable[int]) -> list[int]:
    """`base` (an id, a list of ids or None) followed by the ids of `extra` it lacks, without duplicates."""
    if base is None:
        merged: list[int] = []
    elif isinstance(base, int):
        merged = [base]
    else:
        merged = list(base)
    for token_id in extra:
        if token_id not in merged:
            merged.append(token_id)
    return merged


def with_stop_token_ids(generation_kwargs: dict | None, extra_ids: Sequence[int]) -> dict:
    """A copy of vLLM `generation_kwargs` whose `stop_token_ids` also hold `extra_ids` (the input is not changed)."""
    kwargs = dict(generation_kwargs or {})
    if extra_ids:
        kwargs["stop_token_ids"] = merge_token_ids(kwargs.get("stop_token_ids"), extra_ids)
    return kwargs


def apply_extra_eos_tokens(trainer: Any, tokens: Sequence[str] | None) -> list[int]:
    """Make a constructed `GRPOTrainer` end completions at `tokens` too; return their ids.

    TRL builds `eos_token_ids` from the model's generation config inside `GRPOTrainer.__init__`, and the generation
    backends read it (or `generation_kwargs`) when they generate, so extending them after construction covers every
    later use: the completion mask, the truncation metrics, `generate`'s stop list and vLLM's stop list.
    """
    ids = extra_eos_token_ids(trainer._tokenizer, tokens)
    if not ids:
        return []
    trainer.eos_token_ids = merge_token_ids(trainer.eos_token_ids, ids)
    if trainer.use_vllm:
        trainer.vllm_generation.generation_kwargs = with_stop_token_ids(trainer.vllm_generation.generation_kwargs, ids)
    else:
        trainer.generation_config.eos_token_id = merge_token_ids(trainer.generation_config.eos_token_id, ids)
        trainer.generation_kwargs["eos_token_id"] = list(trainer.generation_config.eos_token_id)
    return ids
