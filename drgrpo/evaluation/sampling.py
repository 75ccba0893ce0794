"""Sampling seeds: one deterministic random stream per sample, so samples do not depend on batching.

The sampler itself is the CPU generation engine's (`drgrpo.algorithm.rollout.sampler`), which training uses too: each
row draws from its own `torch.Generator` seeded by `sample_seed(...)`, so a resumed run reproduces an uninterrupted
one.
"""

from __future__ import annotations

from drgrpo.algorithm.rollout.sampler import row_seed


def sample_seed(seed: int, problem_index: int, sample_index: int) -> int:
    """The random seed of one sample: a hash of (run seed, problem, sample), stable across processes and machines."""
    return row_seed(seed, problem_index, sample_index)
