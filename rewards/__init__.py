"""Verifiable reward functions and the registry that resolves a recipe's `reward_funcs` list.

(Foundation version: the built-in `accuracy` only; the reward-library issue extends this module.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from math_verify import parse, verify

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _text(completion) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return completion[-1].get("content") or ""
    return completion or ""


def accuracy(completions: list, answer: list, **kwargs) -> list[float | None]:
    """1.0 if the completion's final answer equals the gold `answer` under math-verify, else 0.0."""
    scores: list[float | None] = []
    for completion, gold in zip(completions, answer, strict=True):
        gold_parsed = parse(str(gold))
        if not gold_parsed:
            scores.append(None)
            continue
        text = _text(completion)
        numbers = _NUMBER.findall(text)
        candidate = numbers[-1] if numbers else text
        scores.append(1.0 if verify(gold_parsed, parse(candidate)) else 0.0)
    return scores


@dataclass
class RewardArguments:
    """Which reward functions a recipe uses (their weights are TRL's `reward_weights`)."""

    reward_funcs: list[str] = field(
        default_factory=lambda: ["accuracy"],
        metadata={
            "help": "Reward functions: built-in names (see rewards/), 'package.module:function' or "
            "'path/to/file.py:function'. Weights go in reward_weights, aligned with this list."
        },
    )


REGISTRY: dict[str, Callable] = {"accuracy": accuracy}


def get_reward_funcs(specs: list[str]) -> list[Callable]:
    """Resolve reward specs (built-in names) to callables."""
    funcs = []
    for spec in specs:
        if spec not in REGISTRY:
            raise ValueError(f"Unknown reward {spec!r}. Available: {', '.join(sorted(REGISTRY))}")
        funcs.append(REGISTRY[spec])
    return funcs
