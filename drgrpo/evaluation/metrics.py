"""Evaluation metrics (pure functions): unbiased pass@k and majority voting (maj@k)."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from `c` correct answers among `n` samples: 1 - C(n-c, k) / C(n, k).

    Chen et al. (2021), "Evaluating Large Language Models Trained on Code", eq. 1 and its numerically stable product
    form 1 - prod_{i=n-c+1}^{n} (1 - k / i), which never forms the huge binomial coefficients.
    """
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError(f"pass_at_k takes integers, got n={n!r}, c={c!r}, k={k!r}.")
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}.")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def pass_at_k_values(n: int) -> list[int]:
    """The k reported for n samples: powers of two up to n, and n itself (1, 2, 4, ..., n)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}.")
    ks = [1 << i for i in range(n.bit_length()) if (1 << i) <= n]
    return ks if ks[-1] == n else [*ks, n]


def majority_vote(
    answers: Sequence[str | None], correct: Sequence[bool], equivalent: Callable[[str, str], bool]
) -> bool:
    """maj@k: whether the most frequent answer among the samples is correct.

    Answers are grouped by `equivalent` (math-verify equivalence, so `0.5`, `1/2` and `\\frac{1}{2}` are one vote),
    not by string equality; each answer joins the first earlier group whose first answer it is equivalent to.
    Samples with no extracted answer do not vote. The largest group wins; a tie goes to the group whose first answer
    came first, so the result never depends on dict or set order. The winning group is scored by its first answer's
    verdict. No answer at all scores False. (Majority voting as self-consistency, Wang et al. 2022.)
    """
    if len(answers) != len(correct):
        raise ValueError(f"majority_vote: {len(answers)} answers but {len(correct)} verdicts.")
    groups: list[list[int]] = []  # indices of the samples in each group, in order of first appearance
    for i, answer in enumerate(answers):
        if answer is None:
            continue
        for group in groups:
            first = answers[group[0]]
            if answer == first or equivalent(first, answer):
                group.append(i)
                break
        else:
            groups.append([i])
    if not groups:
        return False
    best = max(groups, key=lambda group: (len(group), -group[0]))
    return bool(correct[best[0]])
