"""The one sampler of training and evaluation: each row draws its next token from its own random stream, from the
distribution vLLM would draw it from, and the log-probability of what it drew comes back with it.

- **Logits** are upcast to float32 first (a bf16 LM head's output has 8 significant bits), then processed in vLLM's
  order (vLLM v1's `Sampler`, vllm/v1/sample/sampler.py: penalties, then in `sample` the temperature, the
  argmax-invariant processors, which are min-p, then top-k and top-p): the repetition penalty on the row's own prompt
  and generated tokens (`penalize_repetitions`, vLLM's rule; never its left-padding), the temperature (one in-place
  division), min-p, top-k, top-p. The last three are transformers' own classes (`MinPLogitsWarper`,
  `TopKLogitsWarper`, `TopPLogitsWarper`), whose rules are vLLM's (`MinPLogitsProcessor` in
  vllm/v1/sample/logits_processor/builtin.py, `apply_top_k_top_p` in vllm/v1/sample/ops/topk_topp_sampler.py); only
  the order is vLLM's, not `generate`'s (which applies min-p after top-k and top-p: another distribution when min-p
  and top-p are both set).
- **The draw** is a two-level inverse-CDF sample (`inverse_cdf_tokens`): one uniform number of 53 bits from the
  row's own `torch.Generator` picks a block of 256 tokens by float64 cumulative sums of the block sums, then the token
  inside it by a float64 cumulative sum of its 256 probabilities. Every token is drawn with its share of the processed
  distribution to a relative 4e-7 (the rounding of its block's float32 sum), the distribution vLLM's exponential
  race (`probs / q`, q ~ Exp(1), `random_sample` in vllm/v1/sample/ops/topk_topp_sampler.py) draws from in its own
  float32; a float32 cumulative sum over the whole vocabulary, as before issue 53, rounded every token's share to a
  multiple of 6e-8 and left up to 2e-4 of the mass undrawable. The race itself draws one exponential per vocabulary
  entry and row: 46 ms a token for 32 rows of 49k on a Zen 2, a decode step's worth (docs/demo.md). The uniform
  number comes from the row's own generator, so which token a row draws from given probabilities depends on its
  seed, never on the other rows of its batch (the probabilities themselves can: docs/demo.md, batch invariance).
- **The log-prob** returned is the sampled token's under the processed distribution (vLLM's `processed_logprobs`, what
  TRL's importance-sampling correction expects): the log of its softmax probability. Greedy decoding (temperature 0)
  takes the arg-max of the penalised logits and returns its log-prob under them (vLLM's greedy `processed_logprobs`:
  after the penalty, before any temperature).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch


def row_seed(*parts: object) -> int:
    """The random seed of one row: a hash of `parts` (run seed, step, rank, row, ...), stable across processes and
    machines; 63 bits, a valid torch and vLLM seed."""
    digest = hashlib.blake2b(":".join(str(part) for part in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen: TRL's generation keys (temperature 0: greedy)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float | None = None
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature}: use 0 (greedy) or above.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p}: use a value in (0, 1].")
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"top_k={self.top_k}: use 0 (off) or more.")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty={self.repetition_penalty}: use a value above 0 (1: off).")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def penalizes(self) -> bool:
        """Whether the repetition penalty is on: the sampler then needs each row's `seen_tokens`."""
        return self.repetition_penalty != 1.0


def seen_tokens(rows: Sequence[Sequence[int]], vocab: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(rows, vocab) booleans: which token ids each row holds, its own tokens only (vLLM's prompt and output masks,
    `get_token_bin_counts_and_mask` in vllm/model_executor/layers/utils.py, which pads with an id past the vocabulary
    so that padding never counts)."""
    seen = torch.zeros(len(rows), vocab, dtype=torch.bool, device=device)
    for index, ids in enumerate(rows):
        if ids:
            seen[index, torch.tensor(list(ids), device=device)] = True
    return seen


def penalize_repetitions(scores: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """The repetition penalty of CTRL (Keskar et al. 2019) as vLLM applies it (`apply_repetition_penalties_torch`,
    vllm/_custom_ops.py): the logit of every token the row has seen (`seen`, its prompt and its generated tokens) is
    divided by `penalty` where positive and multiplied by it where not; the others are left alone. In place."""
    penalized = torch.where(scores > 0, scores / penalty, scores * penalty)
    return scores.copy_(torch.where(seen, penalized, scores))


def logits_processors(params: SamplingParams) -> list:
    """transformers' warpers for `params` in vLLM's order, applied after the temperature: min-p, top-k, top-p; the
    neutral ones are left out (greedy: none)."""
    from transformers import MinPLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    if params.greedy:
        return []
    processors: list = []
    if params.min_p:
        processors.append(MinPLogitsWarper(params.min_p))
    if params.top_k:
        processors.append(TopKLogitsWarper(params.top_k))
    if params.top_p < 1.0:
        processors.append(TopPLogitsWarper(params.top_p))
    return processors


def processed_logits(
    logits: torch.Tensor, params: SamplingParams, processors: Sequence, seen: torch.Tensor | None = None
) -> torch.Tensor:
    """(rows, vocab) logits as a new float32 tensor, processed in vLLM's order (module docstring): the repetition
    penalty on `seen` (required when it is on), the temperature, then `processors` (`logits_processors(params)`);
    greedy: the penalty only."""
    scores = logits.to(torch.float32, copy=True)
    if params.penalizes:
        if seen is None:
            raise ValueError("processed_logits: repetition_penalty is on, but no seen tokens were given.")
        penalize_repetitions(scores, seen, params.repetition_penalty)
    if params.greedy:
        return scores
    if params.temperature != 1.0:
        scores.div_(params.temperature)
    for processor in processors:
        scores = processor(None, scores)  # min-p, top-k and top-p read the scores only
    return scores


BLOCK = 256  # tokens per block of the two-level inverse CDF


def block_sums(probs: torch.Tensor) -> torch.Tensor:
    """(rows, ceil(vocab / BLOCK)) sums of `probs` (rows, vocab) over consecutive blocks of `BLOCK` tokens, summed in
    the probabilities' dtype (no float64 copy of the whole vocabulary: making one costs more than the sampling) and
    returned in float64."""
    rows, vocab = probs.shape
    full = vocab // BLOCK * BLOCK
    sums = probs[:, :full].view(rows, full // BLOCK, BLOCK).sum(dim=-1)
    if full < vocab:
        sums = torch.cat([sums, probs[:, full:].sum(dim=-1, keepdim=True)], dim=-1)
    return sums.double()


def inverse_cdf_tokens(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row of `probs` (rows, vocab: non-negative, not necessarily normalised), drawn by the inverse CDF
    with the row's uniform number u in [0, 1) (53 bits), in two levels: the block whose float64 cumulative sum of block
    sums passes u x total, then, at the target's place inside that block, the token whose float64 cumulative sum
    passes it. A token's probability is then its exact share of its block times its block's share of the total: exact
    but for the rounding of the block's float32 sum (a relative 3.4e-7 at most, measured on softmaxes of 49k tokens),
    with no floor (a float32 cumulative sum over the whole vocabulary, as before issue 53, gave every token a multiple
    of 6e-8). A token of probability 0 is never drawn: the target stays below the total and the token found is one
    where a cumulative sum rises (where the block's share rounds to its end, the block's last token of positive
    probability)."""
    rows, vocab = probs.shape
    sums = block_sums(probs)
    cdf = sums.cumsum(dim=-1)
    total = cdf[:, -1:]
    targets = uniforms.to(torch.float64).unsqueeze(-1) * total
    targets = torch.minimum(targets, torch.nextafter(total, torch.zeros_like(total)))
    block = torch.searchsorted(cdf, targets, right=True)  # (rows, 1); its sum is > 0: the cumulative sum rises there
    before = torch.where(block > 0, cdf.gather(-1, (block - 1).clamp(min=0)), 0.0)
    share = (targets - before) / sums.gather(-1, block)  # the target's place inside its block, in [0, 1)
    index = block * BLOCK + torch.arange(BLOCK, device=probs.device)  # (rows, BLOCK), past the vocab in the last one
    inside = probs.gather(-1, index.clamp(max=vocab - 1)).masked_fill(index >= vocab, 0.0)
    inside_cdf = inside.cumsum(dim=-1, dtype=torch.float64)
    offset = torch.searchsorted(inside_cdf, share * inside_cdf[:, -1:], right=True)
    last_positive = BLOCK - 1 - (inside > 0).flip(-1).int().argmax(dim=-1, keepdim=True)
    return (block * BLOCK + torch.minimum(offset, last_positive)).squeeze(-1)


def draw_uniforms(generators: Sequence[torch.Generator]) -> torch.Tensor:
    """One uniform number in [0, 1) per row, in float64 (53 random bits), each from the row's own generator."""
    return torch.cat([torch.rand(1, generator=generator, dtype=torch.float64) for generator in generators])


def sample_next(
    logits: torch.Tensor,
    params: SamplingParams,
    generators: Sequence[torch.Generator],
    processors: Sequence | None = None,
    seen: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(next token, its log-prob) per row of `logits` (rows, vocab): see the module docstring; `seen` (rows, vocab)
    are the rows' own tokens so far, for the repetition penalty. The log-prob is the log of the sampled token's softmax
    probability, exact in float32 for any token that can be drawn; `exp` over the log-softmax instead would take the
    slow denormal path for the vocabulary's tail (3.8 ms against 0.5 ms for softmax at 32 x 49k on a Zen 4)."""
    processors = logits_processors(params) if processors is None else processors
    scores = processed_logits(logits, params, processors, seen)
    if params.greedy:
        tokens = scores.argmax(dim=-1)
        return tokens, torch.log_softmax(scores, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    probs = torch.softmax(scores, dim=-1)
    tokens = inverse_cdf_tokens(probs, draw_uniforms(generators))
    return tokens, probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).log()
