"""Format rewards: the R1 `<think>...</think><answer>...</answer>` structure and a single final `\\boxed{}`."""

from __future__ import annotations

import re
from typing import Any

from rewards.extract import last_boxed
from rewards.report import RewardReport

_R1_STRUCTURE = re.compile(r"\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*", re.DOTALL)
_TAGS = ("<think>", "</think>", "<answer>", "</answer>")


def prompt_opens_think(prompt: Any) -> bool | None:
    """True if a text prompt ends inside an open `<think>` (R1 template, thinking chat templates), False if it does
    not, None for a conversational prompt (the chat template, unseen here, decides)."""
    if isinstance(prompt, str):
        tail = prompt.rstrip()
        return tail.endswith("<think>")
    return None


def r1_format_score(completion: str, opens_think: bool | None = False) -> float:
    """1.0 if `completion` is exactly `<think>reasoning</think><answer>answer</answer>` (whitespace around the
    blocks allowed, each tag exactly once, a non-blank answer), else 0.0.

    Source: the format reward of DeepSeek-R1-Zero (arXiv 2501.12948, section 2.2.2), as in open-r1's
    `format_reward`. When the prompt already ends with `<think>` (`opens_think=True`) the completion starts inside
    the thinking block, so the opening tag is supplied; with `None` (conversational prompt) both forms are accepted.
    """
    text = completion
    if opens_think or (opens_think is None and not completion.lstrip().startswith("<think>")):
        text = "<think>" + completion
    if any(text.count(tag) != 1 for tag in _TAGS):
        return 0.0
    match = _R1_STRUCTURE.fullmatch(text)
    return 1.0 if match and match.group(2).strip() else 0.0


def boxed_format_score(completion: str) -> float:
    """1.0 if the completion contains exactly one `\\boxed{...}` (or `\\fbox{...}`), closed and non-empty, else 0.0.

    Source: the Qwen-Math prompt's instruction "put your final answer within \\boxed{}" (Dr.GRPO, arXiv 2503.20783,
    section 3); several boxes (hedging between answers) or an unclosed one do not count.
    """
    if completion.count("\\boxed") + completion.count("\\fbox") != 1:
        return 0.0
    content = last_boxed(completion)
    return 1.0 if content is not None and content.strip() else 0.0


class FormatReward:
    """The R1 format reward (`r1_format_score`) on each completion, given its prompt."""

    reward_range = (0.0, 1.0)

    def __call__(self, texts: list[str], *, report: RewardReport, prompts: list | None = None, **kwargs):
        prompts = prompts if prompts is not None else [""] * len(texts)
        return [r1_format_score(t, prompt_opens_think(p)) for t, p in zip(texts, prompts, strict=True)]


class BoxedFormatReward:
    """`boxed_format_score` on each completion."""

    reward_range = (0.0, 1.0)

    def __call__(self, texts: list[str], *, report: RewardReport, **kwargs):
        return [boxed_format_score(t) for t in texts]
