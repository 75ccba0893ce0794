"""Gold answers the accuracy reward cannot parse: found with the reward's own grader, counted and reported."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from drgrpo.data.sources import Example

# Grading any extractable answer against a gold makes the reward parse that gold. `?` is extracted but is no number,
# so the grader skips its numeric fast path and parses the gold, and comparing with it costs no sympy simplification.
GOLD_PROBE = "\\boxed{?}"


def reward_gold_check(args: Any = None) -> Callable[[list[str]], list[bool]]:
    """Whether each gold answer is usable by the accuracy reward, decided by the reward's own grader.

    A probe answer is graded against every gold with `rewards.grading` (the accuracy reward's code path: the same
    gold normalisation, math-verify parsing, time limit and verifier processes), so "unparseable" here means exactly
    "the accuracy reward scores None for it". A gold whose parsing times out or crashes counts as unusable too.
    The grader settings are the recipe's `reward_timeout`, `reward_num_workers` and `reward_worker_memory_mb` when
    `args` is the train script's `ScriptArguments` (which mixes in `rewards.RewardArguments`), else the defaults.
    """
    from rewards.grading import FAILURES, GOLD_UNPARSABLE, get_grader, grade_batch

    grader = get_grader(
        timeout=getattr(args, "reward_timeout", 5.0),
        num_workers=getattr(args, "reward_num_workers", None),
        memory_mb=getattr(args, "reward_worker_memory_mb", 2048),
    )

    def usable(golds: list[str]) -> list[bool]:
        results = grade_batch([GOLD_PROBE] * len(golds), golds, grader)
        return [r.status != GOLD_UNPARSABLE and r.status not in FAILURES for r in results]

    return usable


def unparseable_indices(answers: Sequence[str], usable: Callable[[list[str]], list[bool]]) -> list[int]:
    """Indices of the answers that `usable` rejects; each distinct answer is checked once, in one batch."""
    distinct = list(dict.fromkeys(answers))
    verdicts = dict(zip(distinct, usable(distinct), strict=True))
    return [i for i, answer in enumerate(answers) if not verdicts[answer]]


def report_unparseable(examples: Sequence[Example], bad: Sequence[int], which: str) -> str:
    """The start-up message for the rows whose gold answer cannot be parsed: how many, and three examples."""
    shown = "; ".join(f"{examples[i].source} row {examples[i].row}: answer {examples[i].answer!r:.80}" for i in bad[:3])
    return (
        f"{len(bad)} of {len(examples)} {which} rows have a gold answer the accuracy reward cannot parse (they can "
        f"never be rewarded), e.g. {shown}. Check answer_column/answer_extraction, or set "
        "drop_unparseable_answers: true."
    )
