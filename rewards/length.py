"""Length-aware rewards on completion token lengths: DAPO's soft overlong punishment and the cosine length reward."""

from __future__ import annotations

import math
from typing import Any

from rewards.accuracy import missing_column_error, record_grades
from rewards.grading import Grader
from rewards.report import RewardReport


def overlong_penalty(length: int, max_length: int, buffer_length: int) -> float:
    """DAPO's soft overlong punishment (Yu et al., arXiv 2503.14476, eq. 13) of one length, by TRL's own formula
    (`trl.rewards.get_soft_overlong_punishment`, which reads only each completion's length).

    0 if `length <= max_length - buffer_length`; `((max_length - buffer_length) - length) / buffer_length` inside
    the buffer (linear from 0 to -1); -1 beyond `max_length`.
    """
    from trl.rewards import get_soft_overlong_punishment  # here: importing `rewards` stays cheap

    return get_soft_overlong_punishment(max_length, buffer_length)([range(length)])[0]


def cosine_scaled(
    length: int,
    correct: bool,
    max_length: int,
    min_value_correct: float = 0.5,
    max_value_correct: float = 1.0,
    min_value_wrong: float = -1.0,
    max_value_wrong: float = -0.5,
) -> float:
    """Cosine length-scaled correctness reward (Yeo et al., "Demystifying Long Chain-of-Thought Reasoning in LLMs",
    arXiv 2502.03373, eq. 1; defaults of open-r1's `get_cosine_scaled_reward`).

    `r = lo + (hi - lo) * (1 + cos(pi * t / T)) / 2` with `t = min(length, T)`. Correct: from `max_value_correct` at
    length 0 down to `min_value_correct` at T (shorter correct answers are better). Wrong: from `min_value_wrong` at
    length 0 up to `max_value_wrong` at T (a short wrong answer is penalised most, encouraging more thinking).
    """
    progress = min(max(length, 0), max_length) / max_length
    cosine = math.cos(progress * math.pi)
    if correct:
        low, high = min_value_correct, max_value_correct
    else:  # swapped: the wrong-answer reward rises with length
        low, high = max_value_wrong, min_value_wrong
    return low + 0.5 * (high - low) * (1.0 + cosine)


def token_lengths(reward: str, completion_ids: list | None, received: dict[str, Any]) -> list[int]:
    if completion_ids is None:
        raise ValueError(
            f"The {reward!r} reward needs token lengths: TRL passes them as completion_ids; scripts/score.py needs "
            "--tokenizer PATH to compute them."
        )
    return [len(ids) for ids in completion_ids]


def _resolve_length(value: int | None, fallback: int | None, key: str) -> int:
    length = value if value is not None else fallback
    if length is None or length <= 0:
        raise ValueError(f"{key} must be a positive number of tokens (or set the trainer's max_completion_length).")
    return int(length)


class OverlongReward:
    """`overlong_penalty` (TRL's formula) of each completion's token length, with our range checks. Under the Python
    tool `DrGRPOTrainer._calculate_rewards` passes the policy's own ids: the tool's output never counts."""

    reward_range = (-1.0, 0.0)

    def __init__(self, max_length: int | None, buffer_length: int | None, max_completion_length: int | None) -> None:
        self.max_length = _resolve_length(max_length, max_completion_length, "overlong_max_length")
        self.buffer_length = buffer_length if buffer_length is not None else max(1, self.max_length // 5)
        if not 0 < self.buffer_length <= self.max_length:
            raise ValueError(
                f"overlong_buffer_length must be in (0, overlong_max_length={self.max_length}], "
                f"got {self.buffer_length}."
            )

    def __call__(self, texts: list[str], *, report: RewardReport, completion_ids: list | None = None, **kwargs):
        lengths = token_lengths("overlong", completion_ids, kwargs)
        return [overlong_penalty(n, self.max_length, self.buffer_length) for n in lengths]


class CosineLengthReward:
    """`cosine_scaled` of each completion's token length and its correctness (graded as by `accuracy`).

    None when the gold cannot be parsed; a verification failure counts as wrong (and in `failures`).
    """

    def __init__(self, grader: Grader, max_length: int | None, max_completion_length: int | None, values: dict):
        self.grader = grader
        self.max_length = _resolve_length(max_length, max_completion_length, "cosine_max_length")
        self.values = values
        # The cosine's end points: the lowest and highest score it can give, correct or wrong.
        self.reward_range = (min(values.values()), max(values.values()))

    def __call__(
        self,
        texts: list[str],
        *,
        report: RewardReport,
        answer: list | None = None,
        completion_ids: list | None = None,
        prompts: list | None = None,
        **kwargs,
    ):
        if answer is None:
            raise missing_column_error("cosine_length", "answer", kwargs)
        lengths = token_lengths("cosine_length", completion_ids, kwargs)
        results = self.grader.grade(texts, answer, prompts)
        record_grades(self.grader, results, list(answer), report)
        return [
            None if r.verdict is None else cosine_scaled(n, r.verdict, self.max_length, **self.values)
            for r, n in zip(results, lengths, strict=True)
        ]
