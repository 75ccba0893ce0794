"""Code benchmarks: pass@k of programs run on their problems' test cases in the training reward's sandbox.

A benchmark is a code benchmark when its gold format is `code_tests`: the answer column holds the test cases in any
format the `code` reward reads (open-r1/PrimeIntellect `verification_info`, APPS/TACO `input_output`, a list of
`{input, output}`). A sample is correct when its last ```python block passes *every* test case (`code_scoring:
all`, the pass@k of Chen et al. 2021), judged by `rewards.code.CodeReward` itself: same extraction, sandbox,
limits and comparison as training. maj@k has no meaning for programs and is not reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drgrpo.evaluation.verdicts import CORRECT, GOLD_UNPARSABLE, INCORRECT, NO_ANSWER

CODE_TESTS = "code_tests"  # the answer format of code benchmarks (drgrpo.data.golds)


def code_settings(recipe: dict | None = None) -> Any:
    """The code reward's settings for an evaluation: the training recipe's `code_*` keys, else the defaults."""
    from rewards import RewardArguments

    keys = set(RewardArguments.__dataclass_fields__)
    return RewardArguments(**{k: v for k, v in (recipe or {}).items() if k.startswith("code_") and k in keys})


def grade_code_completions(
    completions: Sequence[str], golds: Sequence[str | None], settings: Any = None
) -> list[tuple[str, str | None]]:
    """(verdict, None) per completion: correct when the program passes every test; no_answer without a code block;
    gold_unparsable when the tests cannot be read; `error` when the sandbox itself failed.

    `settings` is a `rewards.RewardArguments`-like object with the code keys (None: their defaults).
    """
    from dataclasses import replace

    from rewards import RewardArguments
    from rewards.code import code_reward
    from rewards.report import RewardReport

    settings = replace(settings or RewardArguments(), code_scoring="all")
    reward = _reward(settings, code_reward)
    report = RewardReport(len(completions))
    scores = reward(list(completions), report=report, verification_info=[g if g is not None else "" for g in golds])
    verdicts = []
    for score, detail, failed in zip(scores, report.details, report.failed, strict=True):
        if failed:
            verdicts.append(("error", None))
        elif score is None:
            verdicts.append((GOLD_UNPARSABLE, None))
        elif detail == "no code block":
            verdicts.append((NO_ANSWER, None))
        else:
            verdicts.append((CORRECT if score == 1.0 else INCORRECT, None))
    return verdicts


_REWARDS: dict = {}


def _reward(settings, factory):
    """One `CodeReward` per settings (its sandbox runners are started once per evaluation process)."""
    from dataclasses import replace

    key = repr(replace(settings, tests_column="verification_info"))
    if key not in _REWARDS:
        _REWARDS[key] = factory(replace(settings, tests_column="verification_info"))
    return _REWARDS[key]
