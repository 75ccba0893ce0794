"""Sampling: one deterministic random stream per sample (Gumbel-max), so samples do not depend on batching."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def sample_seed(seed: int, problem_index: int, sample_index: int) -> int:
    """The random seed of one sample: a hash of (run seed, problem, sample), stable across processes and machines."""
    digest = hashlib.blake2b(f"{seed}:{problem_index}:{sample_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # 63 bits: a valid torch and vLLM seed


def top_p_mask(scores, top_p: float):
    """Boolean mask of the tokens outside the nucleus: the smallest set whose probability reaches `top_p`.

    Holtzman et al. (2020), nucleus sampling; the same cut as transformers' `TopPLogitsWarper` (the most likely
    token always stays).
    """
    import torch

    sorted_scores, order = torch.sort(scores, descending=False, dim=-1)
    cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = cumulative <= (1 - top_p)
    remove_sorted[..., -1] = False
    return remove_sorted.scatter(-1, order, remove_sorted)


class SeededSampling:
    """A transformers logits processor that turns greedy decoding into sampling with one generator per row.

    Gumbel-max trick (Gumbel 1954; Maddison et al. 2014): argmax(logits / T + G) with G ~ Gumbel(0, 1) i.i.d. is
    an exact sample from softmax(logits / T). Each row draws its noise from its own `torch.Generator` seeded by
    `sample_seed(...)`, so a sample does not depend on which other samples share its batch, and a resumed run
    reproduces an uninterrupted one. Temperature is applied first, then top-p, as in transformers and vLLM.
    """

    def __init__(self, row_seeds: Sequence[int], temperature: float, top_p: float = 1.0):
        if temperature <= 0:
            raise ValueError("SeededSampling needs temperature > 0 (temperature 0 is plain greedy decoding).")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
        self.row_seeds = list(row_seeds)
        self.temperature = temperature
        self.top_p = top_p
        self._generators: list | None = None

    def __call__(self, input_ids, scores):
        import torch

        if self._generators is None:
            self._generators = [torch.Generator(device=scores.device).manual_seed(s) for s in self.row_seeds]
        if scores.shape[0] != len(self._generators):
            raise ValueError(f"SeededSampling built for {len(self._generators)} rows, got {scores.shape[0]}.")
        scores = scores.float() / self.temperature
        if self.top_p < 1.0:
            scores = scores.masked_fill(top_p_mask(scores, self.top_p), float("-inf"))
        tiny = torch.finfo(torch.float32).tiny
        noise = torch.stack(
            [
                torch.rand(scores.shape[-1], generator=g, device=scores.device).clamp_(tiny, 1.0 - 1e-7)
                for g in self._generators
            ]
        )
        return scores - torch.log(-torch.log(noise))
