"""Mixtures: weighted sampling of several sources (largest-remainder apportionment, exact fractions)."""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from fractions import Fraction

from drgrpo.data.sources import Example

logger = logging.getLogger(__name__)


def normalized_weights(weights: Sequence[float]) -> list[Fraction]:
    """Weights as exact fractions summing to 1 (exact, so that the counts below never overshoot a source)."""
    fractions = [Fraction(w) for w in weights]
    total = sum(fractions)
    return [w / total for w in fractions]


def default_mixture_size(sizes: Sequence[int], weights: Sequence[float]) -> int:
    """The largest mixture in which every source i supplies share w_i without repeating rows: min_i floor(n_i / w_i).

    With sizes [100, 50] and weights [1, 1] that is 100 (50 rows from each); with weights [2, 1], 150.
    """
    shares = normalized_weights(weights)
    return min(math.floor(Fraction(size) / share) for size, share in zip(sizes, shares, strict=True))


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Split `total` rows among sources in proportion to `weights`: the largest-remainder (Hamilton) method.

    Each source gets floor(total * w_i); the rows left over go one each to the largest remainders (ties: the earlier
    source). The counts sum to `total`; e.g. apportion(10, [1, 1, 1]) == [4, 3, 3].
    """
    quotas = [total * share for share in normalized_weights(weights)]
    counts = [math.floor(q) for q in quotas]
    by_remainder = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def sample_rows(examples: Sequence[Example], count: int, rng: random.Random) -> list[Example]:
    """`count` rows of `examples` in random order: without repetition up to its size, then whole repeats + a sample."""
    repeats, remainder = divmod(count, len(examples))
    sampled = [example for _ in range(repeats) for example in examples]
    return sampled + rng.sample(list(examples), remainder)


def mix_sources(
    per_source: Sequence[Sequence[Example]],
    weights: Sequence[float] | None,
    size: int | None,
    rng: random.Random,
) -> list[Example]:
    """All rows of every source (`weights` None), or a weighted mixture of `size` rows (None: the default size)."""
    if weights is None:
        return [example for examples in per_source for example in examples]
    sizes = [len(examples) for examples in per_source]
    total = size if size is not None else default_mixture_size(sizes, weights)
    counts = apportion(total, weights)
    mixed = []
    for examples, count in zip(per_source, counts, strict=True):
        label = examples[0].source
        if count > len(examples):
            logger.warning("dataset_mixture: %s repeats rows (%d drawn from %d).", label, count, len(examples))
        logger.info("dataset_mixture: %d rows from %s (%d available).", count, label, len(examples))
        mixed.extend(sample_rows(examples, count, rng))
    return mixed
