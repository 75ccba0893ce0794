"""The CPU engine's sampler draws what vLLM draws (issue 53): the processed distribution in vLLM's order, against a
reference written here from vLLM's source (vLLM is not installed); drawn exactly, by frequency and in the tail a
float32 cumulative sum cannot resolve; and the repetition penalty reads a row's own tokens, never its padding.

The reference follows vLLM v1's sampler step by step (github.com/vllm-project/vllm, the files read at the commits
named, from the main branch of late 2025):

- vllm/v1/sample/sampler.py (3e342658): `Sampler.forward` applies the penalties, then `sample` applies the temperature
  (`apply_temperature`: an in-place division), then the argmax-invariant logits processors, then `topk_topp_sampler`;
  greedy takes the arg-max after the penalties, with `processed_logprobs` their log-softmax;
- vllm/model_executor/layers/utils.py (00358600): `apply_penalties` builds a prompt mask and an output mask from the
  token ids (padding is the id `vocab_size`, cut off), and vllm/_custom_ops.py's `apply_repetition_penalties_torch`
  divides a masked positive logit by the penalty and multiplies a masked non-positive one;
- vllm/v1/sample/logits_processor/builtin.py (bf17660a): `MinPLogitsProcessor` is argmax-invariant (so it runs right
  after the temperature) and masks every token whose probability is below min_p x the largest;
- vllm/v1/sample/ops/topk_topp_sampler.py (3babc05a): `apply_top_k_top_p` sorts ascending, masks below the k-th
  largest logit, then masks where the ascending cumulative probability is <= 1 - top_p (keeping the last), and
  `forward_cpu` returns `logits.log_softmax(dim=-1, dtype=torch.float32)` as the processed log-probs.
"""

from __future__ import annotations

import pytest
import torch

from drgrpo.algorithm.rollout import sampler
from drgrpo.algorithm.rollout.sampler import SamplingParams, logits_processors, processed_logits, row_seed, sample_next

# --- vLLM's order, reimplemented from its source ---------------------------------------------------------------------


def vllm_logprobs(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    repetition_penalty: float = 1.0,
    seen: tuple[int, ...] = (),
) -> torch.Tensor:
    """vLLM v1's processed log-probs of one row of `logits` (vocab,), in float64 (module docstring)."""
    logits = logits.double().clone().unsqueeze(0)
    vocab = logits.shape[-1]
    # apply_penalties: the prompt's and the output's tokens, padding (id vocab) cut off.
    mask = torch.zeros(1, vocab + 1, dtype=torch.bool)
    mask[0, list(seen)] = True
    penalties = torch.where(mask[:, :vocab], repetition_penalty, 1.0)
    logits *= torch.where(logits > 0, 1.0 / penalties, penalties)
    if temperature == 0:
        return logits.log_softmax(dim=-1)[0]
    logits.div_(temperature)
    if min_p:  # MinPLogitsProcessor.apply
        probability_values = torch.softmax(logits, dim=-1)
        adjusted_min_p = probability_values.amax(dim=-1, keepdim=True) * min_p
        logits[probability_values < adjusted_min_p] = -float("inf")
    if top_k or top_p < 1.0:  # apply_top_k_top_p
        logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
        if top_k:
            kth = logits_sort.gather(1, torch.tensor([[vocab - top_k]]))
            logits_sort.masked_fill_(logits_sort < kth, -float("inf"))
        if top_p < 1.0:
            probs_sum = logits_sort.softmax(dim=-1).cumsum(dim=-1)
            top_p_mask = probs_sum <= 1 - top_p
            top_p_mask[:, -1] = False
            logits_sort.masked_fill_(top_p_mask, -float("inf"))
        logits = logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)
    return logits.log_softmax(dim=-1)[0]


# Hand-made logits: probabilities 0.40, 0.30, 0.15, 0.08, 0.04, 0.03 at temperature 1. With min_p 0.25 then top_p 0.8
# (vLLM) the third token goes: min-p keeps the first three (0.15 >= 0.1), renormalised 0.47, 0.35, 0.18, and top-p
# then cuts 0.18 (<= 0.2). In transformers' order (top_p, then min_p) top-p keeps three and min-p keeps them all.
SIX = torch.tensor([0.40, 0.30, 0.15, 0.08, 0.04, 0.03]).log()
TWELVE = torch.tensor([2.1, 1.7, 1.6, 0.9, 0.5, 0.4, -0.2, -0.6, -1.0, -1.8, -2.5, -3.0])
SETTINGS = {
    "min_p then top_p": (SIX, {"min_p": 0.25, "top_p": 0.8}),
    "temperature, min_p, top_p": (TWELVE, {"temperature": 0.7, "min_p": 0.12, "top_p": 0.85}),
    "min_p, top_k, top_p": (TWELVE, {"temperature": 1.3, "min_p": 0.05, "top_k": 6, "top_p": 0.9}),
    "temperature": (TWELVE, {"temperature": 0.7}),
    "top_k, top_p": (TWELVE, {"temperature": 1.2, "top_k": 5, "top_p": 0.8}),
    "penalty on seen tokens": (TWELVE, {"temperature": 0.9, "repetition_penalty": 1.5, "seen": (0, 3, 9)}),
}


def params_and_seen(settings: dict, rows: int) -> tuple[SamplingParams, torch.Tensor | None]:
    settings = dict(settings)
    seen_ids = settings.pop("seen", ())
    params = SamplingParams(**settings)
    if params.repetition_penalty == 1.0:
        return params, None
    seen = torch.zeros(rows, 12, dtype=torch.bool)
    seen[:, list(seen_ids)] = True
    return params, seen


def test_the_reference_is_vllms_order_not_transformers():
    """The hand-made case by hand: vLLM's order keeps two tokens where transformers' keeps three."""
    expected = torch.tensor([0.4, 0.3]) / 0.7
    reference = vllm_logprobs(SIX, min_p=0.25, top_p=0.8)
    assert torch.isinf(reference[2:]).all()
    assert torch.allclose(reference[:2].exp(), expected.double(), atol=1e-6)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_processed_logits_are_vllms(name):
    logits, settings = SETTINGS[name]
    params, seen = params_and_seen(settings, 1)
    ours = torch.log_softmax(processed_logits(logits.unsqueeze(0), params, logits_processors(params), seen), -1)[0]
    reference = vllm_logprobs(logits, **settings)
    assert torch.equal(torch.isinf(ours), torch.isinf(reference)), name  # the same tokens can be drawn
    kept = ~torch.isinf(reference)
    assert torch.allclose(ours[kept].double(), reference[kept], atol=1e-5), name


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """The p-value of Pearson's chi-square statistic of `counts` against `probs` (the support only): the regularised
    upper incomplete gamma Q(df / 2, chi2 / 2)."""
    expected = probs * counts.sum()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    df = torch.tensor(float(len(probs) - 1), dtype=torch.float64)
    return torch.special.gammaincc(df / 2, chi2 / 2).item()


@pytest.mark.parametrize("name", list(SETTINGS))
def test_the_sampler_draws_vllms_distribution_by_frequency(name):
    """20,000 rows, each with its own seeded generator: no draw outside vLLM's support, Pearson's chi-square on the
    support at p > 1e-4 (seeded: the same draws every run), and each draw's log-prob is vLLM's processed one."""
    logits, settings = SETTINGS[name]
    draws = 20_000
    params, seen = params_and_seen(settings, draws)
    generators = [torch.Generator().manual_seed(row_seed(53, name, row)) for row in range(draws)]
    tokens, logprobs = sample_next(logits.expand(draws, -1), params, generators, None, seen)
    reference = vllm_logprobs(logits, **settings)
    support = ~torch.isinf(reference)
    counts = torch.bincount(tokens, minlength=len(logits)).double()
    assert counts[~support].sum() == 0, f"{name}: drew tokens vLLM cannot draw: {counts.tolist()}"
    assert chi_square_p_value(counts[support], reference[support].exp()) > 1e-4, name
    assert torch.allclose(logprobs.double(), reference[tokens], atol=1e-5)


def test_greedy_is_the_argmax_after_the_penalty_with_its_log_prob_there():
    logits = torch.tensor([[3.0, 2.9, -1.0, 0.5]])
    params = SamplingParams(temperature=0.0, repetition_penalty=2.0)
    seen = torch.tensor([[True, False, False, False]])  # 3.0 -> 1.5: token 1 is the arg-max
    tokens, logprobs = sample_next(logits, params, [], None, seen)
    reference = vllm_logprobs(logits[0], temperature=0, repetition_penalty=2.0, seen=(0,))
    assert tokens.tolist() == [1] and logprobs.item() == pytest.approx(reference[1].item(), abs=1e-6)


# --- exact: the tail a float32 cumulative sum cannot resolve ---------------------------------------------------------

ULP = 2.0**-24  # float32's spacing in [0.5, 1): a float32 cumulative sum's resolution past a large first token
PAIRS = 8192


def tail_logits() -> torch.Tensor:
    """One token of probability ~0.9995, then pairs of tokens of 0.45 and 0.55 float32 spacings each (16,385 tokens,
    not a multiple of 256): a float32 cumulative sum past 0.5 moves by whole spacings, so every pair's first token gets
    width 0 (its 0.45 spacing is rounded away) and its second the whole spacing: 1.8e-4 of the mass never drawn and
    2.2e-4 drawn at 1.8x its probability."""
    tail = torch.tensor([0.45 * ULP, 0.55 * ULP], dtype=torch.float64).repeat(PAIRS)
    probs = torch.cat([1 - tail.sum().unsqueeze(0), tail])
    return probs.log().float()


def drawn_shares(monkeypatch, logits: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    """Each token's share of the uniform numbers under `sample_next`, measured: the inverse CDF's token rises with the
    uniform, so the uniforms that draw token t are [first u drawing >= t, first u drawing >= t + 1), each end found by
    60 halvings in float64 (the row's uniform number replaced by the bisection's)."""
    targets = torch.tensor(tokens + [token + 1 for token in tokens])
    low, high = torch.zeros(len(targets), dtype=torch.float64), torch.ones(len(targets), dtype=torch.float64)
    current = {}
    monkeypatch.setattr(sampler, "draw_uniforms", lambda generators: current["uniforms"])
    for _ in range(60):
        current["uniforms"] = middle = (low + high) / 2
        drawn, _ = sample_next(logits.expand(len(targets), -1), SamplingParams(), [None] * len(targets))
        reached = drawn >= targets
        high, low = torch.where(reached, middle, high), torch.where(reached, low, middle)
    return high[len(tokens) :] - high[: len(tokens)]


def test_every_token_in_the_tail_is_drawn_with_its_exact_share(monkeypatch):
    """The first-of-pair tokens (0.45 spacings) and second-of-pair tokens (0.55) in the first block, the middle and the
    last, partial block: each drawn by a share of the uniforms equal to its probability to 1e-5 (a float32 cumulative
    sum gives them 0 and 1.0 spacing); and the large first token too."""
    logits = tail_logits()
    tokens = [0, 1, 2, 3, 4, 255, 256, 257, 1001, 1002, 8191, 8192, 16381, 16382, 16383]
    probs = torch.softmax(logits, -1).double()  # the float32 probabilities the sampler computes
    expected = probs[tokens] / probs.sum()
    shares = drawn_shares(monkeypatch, logits, tokens)
    assert torch.allclose(shares, expected, rtol=1e-5, atol=0), [
        (token, share, want) for token, share, want in zip(tokens, shares.tolist(), expected.tolist(), strict=True)
    ]


def test_a_token_of_probability_zero_is_never_drawn_even_at_the_uniforms_ends():
    generator = torch.Generator().manual_seed(0)
    probs = torch.rand(64, 1000, generator=generator) * (torch.rand(64, 1000, generator=generator) < 0.05)
    probs[:, -300:] = 0.0  # the last, partial block and the one before it empty
    probs[0, :] = 0.0
    probs[0, 511] = 1.0  # a row with one token
    uniforms = torch.rand(64, generator=generator, dtype=torch.float64)
    uniforms[:3] = torch.tensor([0.0, 1 - 2**-53, 0.5])
    tokens = sampler.inverse_cdf_tokens(probs, uniforms)
    assert (probs.gather(-1, tokens.unsqueeze(-1)) > 0).all() and tokens[0] == 511


# --- the repetition penalty reads a row's own tokens, never its padding ----------------------------------------------


def test_the_penalty_reads_a_rows_own_tokens_never_its_left_padding(tiny_model_path, monkeypatch):
    """A short prompt beside a longer one is left-padded; its first token's processed distribution must be the one it
    has alone (vLLM penalises a row's own prompt and output tokens only). The tiny model's pad token has logit 0,
    which a penalty leaves alone, so the padding id here is the short prompt's likeliest next token not in it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from drgrpo.algorithm.rollout import engine as engine_module
    from drgrpo.algorithm.rollout.engine import GenerationEngine

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    short, long = tokenizer("1+1=")["input_ids"], tokenizer("12+34+56+78=")["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([short])).logits[0, -1]
    pad = int(logits.masked_fill(torch.isin(torch.arange(len(logits)), torch.tensor(short)), -1e9).argmax())
    assert logits[pad] > 0.1 and len(long) > len(short)
    distributions = []
    real = engine_module.sample_next

    def spy(logits, params, generators, processors=None, rows_tokens=None):
        processors = sampler.logits_processors(params) if processors is None else processors
        scores = sampler.processed_logits(logits, params, processors, rows_tokens)
        distributions.append(torch.softmax(scores, -1))
        return real(logits, params, generators, processors, rows_tokens)

    monkeypatch.setattr(engine_module, "sample_next", spy)
    engine = GenerationEngine([tokenizer.eos_token_id], pad, SamplingParams(repetition_penalty=1.5))
    engine.generate(model, [short], [7], [1])
    alone = distributions[-1][0]
    engine.generate(model, [long, short], [3, 7], [1, 1])
    beside = distributions[-1][1]
    assert beside[pad].item() == pytest.approx(alone[pad].item(), rel=1e-4)
    assert torch.allclose(beside, alone, atol=1e-6)
    # And alone is vLLM's: the penalty on the prompt's own tokens only.
    reference = vllm_logprobs(logits, repetition_penalty=1.5, seen=tuple(short)).exp()
    assert torch.allclose(alone.double(), reference, atol=1e-5)


def test_a_penalised_rows_whole_sample_is_the_same_alone_and_beside_others(tiny_model_path):
    """Across tokens, and after the batch drops a row that ended: the row's own tokens are tracked, its neighbours'
    never (float32, where the tiny model's logits do not depend on the batch)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from drgrpo.algorithm.rollout.engine import GenerationEngine

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    short, long = tokenizer("1+1=")["input_ids"], tokenizer("12+34+56+78=")["input_ids"]
    engine = GenerationEngine([tokenizer.eos_token_id], 0, SamplingParams(temperature=0.8, repetition_penalty=1.3))
    alone = engine.generate(model, [short], [11], [12])[0]
    beside = engine.generate(model, [long, short, long], [5, 11, 6], [2, 12, 3])[1]  # the long rows leave early
    assert len(alone.ids) > 3 and beside.ids == alone.ids
    assert beside.logprobs == pytest.approx(alone.logprobs, abs=1e-5)
