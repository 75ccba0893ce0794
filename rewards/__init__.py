"""Verifiable rewards for RLVR: math accuracy, format and length rewards, and the registry that resolves a recipe's
`reward_funcs` list (built-in names, `package.module:function`, `path/to/file.py:function`).

Public API:
- `get_reward_funcs(specs, settings=None, max_completion_length=None, reward_weights=None)`: TRL reward callables.
- `RewardArguments`: the recipe keys of this library (mixed into the train script's `ScriptArguments`).
- `accuracy`: the built-in accuracy reward with default settings (TRL signature: `completions`, `answer`, ...).
- `grade_answer(completion, gold) -> (verdict, extracted)`, `grade_batch`, `answers_equivalent(a, b)`.
- `extract_answer(text, mode)` and `EXTRACTION_MODES` (the `answer_extraction_mode` policy), `normalize_gold`, and
  the formulas `overlong_penalty`, `cosine_scaled`, `r1_format_score`, `boxed_format_score`.

Importing this package is cheap (math-verify loads lazily, worker processes start on first use).
"""

from __future__ import annotations

from rewards.answer_policy import EXTRACTION_MODES, extract_answer
from rewards.extract import normalize_answer, normalize_gold
from rewards.format import boxed_format_score, r1_format_score
from rewards.grading import Grader, GradeResult, answers_equivalent, get_grader, grade_answer, grade_batch
from rewards.length import cosine_scaled, overlong_penalty
from rewards.registry import (
    BUILTINS,
    RewardContractError,
    RewardFunctionError,
    SafeReward,
    get_reward_funcs,
)
from rewards.settings import RewardArguments

accuracy = get_reward_funcs(["accuracy"])[0]

__all__ = [
    "BUILTINS",
    "EXTRACTION_MODES",
    "GradeResult",
    "Grader",
    "RewardArguments",
    "RewardContractError",
    "RewardFunctionError",
    "SafeReward",
    "accuracy",
    "answers_equivalent",
    "boxed_format_score",
    "cosine_scaled",
    "extract_answer",
    "get_grader",
    "get_reward_funcs",
    "grade_answer",
    "grade_batch",
    "normalize_answer",
    "normalize_gold",
    "overlong_penalty",
    "r1_format_score",
]
