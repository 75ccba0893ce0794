"""The `accuracy` reward: 1.0 if the completion's final answer equals the gold answer under math-verify, else 0.0."""

from __future__ import annotations

from typing import Any

from rewards.grading import GOLD_UNPARSABLE, Grader, GradeResult
from rewards.report import RewardReport


def missing_column_error(reward: str, column: str, received: dict[str, Any]) -> ValueError:
    columns = sorted(k for k in received if k not in ("trainer_state", "log_extra", "log_metric"))
    return ValueError(
        f"The {reward!r} reward needs the dataset column {column!r} (TRL passes every dataset column to rewards as "
        f"a keyword list); it received {columns}. Map your dataset's gold-answer column onto 'answer' with "
        f"answer_column: <name> in the recipe."
    )


def record_grades(grader: Grader, results: list[GradeResult], golds: list[Any], report: RewardReport) -> None:
    """Failures, unparsable golds (counted once per prompt: distinct golds of the batch) and details into `report`."""
    unparsable = set()
    for i, (result, gold) in enumerate(zip(results, golds, strict=True)):
        report.details[i] = result.extracted if result.status in ("ok", "no_answer") else result.status
        if result.failed:
            report.fail(i, f"{result.status} (answer {result.extracted!r})")
        if result.status == GOLD_UNPARSABLE:
            unparsable.add(str(gold))
            grader.warn_unparsable_gold(gold)
    report.counters["unparsable_golds"] = len(unparsable)


class AccuracyReward:
    """Outcome reward of R1-Zero-style RLVR (DeepSeek-R1, arXiv 2501.12948; Dr.GRPO, arXiv 2503.20783, "reward 1 if
    Math-Verify finds the right final answer, else 0").

    The final answer is read under the grader's `answer_extraction_mode` (`rewards.answer_policy`: the final box,
    else the `<answer>` tag, `####`, or the final-answer region read by math-verify); the gold comes as the keyword
    list `answer`, the prompts as `prompts` (the echo rule reads the question's numbers: `rewards.echoes`). Scores:
    1.0 correct, 0.0 wrong or no answer; 0.0 also when the
    verification timed out or failed (counted in `rewards/accuracy/failures`); None when the gold itself cannot be
    parsed (counted in `rewards/accuracy/unparsable_golds` and warned about once per gold), so that a broken gold
    never trains the policy on a fake 0.
    """

    reward_range = (0.0, 1.0)  # lowest and highest score (zero_reward_for_truncated reads it)

    def __init__(self, grader: Grader) -> None:
        self.grader = grader

    def __call__(
        self,
        texts: list[str],
        *,
        report: RewardReport,
        answer: list | None = None,
        prompts: list | None = None,
        **kwargs,
    ):
        if answer is None:
            raise missing_column_error("accuracy", "answer", kwargs)
        results = self.grader.grade(texts, answer, prompts)
        record_grades(self.grader, results, list(answer), report)
        return [None if r.verdict is None else float(r.verdict) for r in results]
