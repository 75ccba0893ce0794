"""Grading: the reward library's verifier, so that evaluation and training agree."""

from __future__ import annotations

from collections.abc import Sequence

CORRECT, INCORRECT, NO_ANSWER, GOLD_UNPARSABLE = "correct", "incorrect", "no_answer", "gold_unparsable"
GRADING_FAILURES = ("timeout", "error", "crash")  # the verifier gave up on the answer; scored incorrect


def grade_completions(
    completions: Sequence[str],
    golds: Sequence[str | None],
    extraction_mode: str = "math_verify",
    questions: Sequence[str] | None = None,
) -> list[tuple[str, str | None]]:
    """(verdict, extracted answer) of each completion against its gold, with the training verifier.

    `rewards.grade_batch` is what the `accuracy` reward calls: same extraction (`extraction_mode`, the recipe's
    `answer_extraction_mode`), same math-verify comparison, same time limits; `questions` (the problems) give the
    echo rule the question's numbers, as the prompts do in training (`rewards.echoes`). Verdicts: correct,
    incorrect, no_answer (nothing extracted), gold_unparsable, or a grading failure (timeout, error, crash), which the
    reward scores 0 as well.
    """
    from rewards import get_grader, grade_batch

    grader = get_grader(extraction_mode=extraction_mode)
    results = grade_batch(list(completions), list(golds), grader, None if questions is None else list(questions))
    return [(_verdict_name(r.status, r.verdict), r.extracted) for r in results]


def answer_extraction_mode(mode: str | None, recipe: dict) -> str:
    """`mode`, else the recipe's `answer_extraction_mode` (the one its accuracy reward trained with), else the reward
    library's default; a ValueError names an unknown mode."""
    from rewards.answer_policy import DEFAULT_EXTRACTION_MODE, check_extraction_mode

    return check_extraction_mode(mode or recipe.get("answer_extraction_mode") or DEFAULT_EXTRACTION_MODE)


def _verdict_name(status: str, verdict: bool | None) -> str:
    if status == "ok":
        return CORRECT if verdict else INCORRECT
    return status  # no_answer, gold_unparsable, timeout, error, crash


def answers_equivalent(a: str, b: str) -> bool:
    """Math-verify equivalence of two extracted answers, as the reward library decides it (for maj@k)."""
    from rewards import answers_equivalent as reward_answers_equivalent

    return reward_answers_equivalent(a, b)
