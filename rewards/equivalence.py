"""math-verify on normalised answer strings: the slow, sympy-backed comparison.

These functions run inside the verifier worker processes (or in the trainer process when the pool is off), always
under a deadline set by the caller. They call math-verify with its signal-based timeouts switched off (they only
work on the main thread, in whole seconds) because the caller bounds the time instead.
"""

from __future__ import annotations

import logging
from functools import lru_cache

import math_verify.grader
import math_verify.parser
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from rewards.extract import answer_variants

# The caller enforces the time limit; tell math-verify not to warn that its own is off.
math_verify.parser.TIMEOUT_WARNING_SHOWN = True
math_verify.grader.TIMEOUT_WARNING_SHOWN = True
logging.getLogger("math_verify").setLevel(logging.ERROR)

# A boxed answer is LaTeX; a bare number or free text gets math-verify's usual extraction (LaTeX, then expressions).
_LATEX = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())
_TEXT = (LatexExtractionConfig(), ExprExtractionConfig())


def parse_answer(text: str, kind: str = "latex") -> list:
    """math-verify's parse of one answer string (`kind` as in `rewards.extract.Answer`); [] if nothing parses."""
    if kind == "latex":
        return parse("\\boxed{" + text + "}", list(_LATEX), parsing_timeout=None)
    return parse(text, list(_TEXT), parsing_timeout=None)


@lru_cache(maxsize=4096)
def parsed_gold(gold: str) -> tuple[list, ...] | None:
    """Every reading of a normalised gold answer, parsed once per process (the G completions of a group share it).

    None if no reading parses: such a gold cannot grade anything.
    """
    readings = tuple(parse_answer(variant) for variant in answer_variants(gold))
    return readings if any(readings) else None


def verify_answer(gold: str, answer: str, kind: str = "latex") -> bool | None:
    """True if `answer` equals `gold` under math-verify in any of their readings (`50\\%` is also read as `50`).

    None if the gold cannot be parsed. Both strings are normalised (`rewards.extract.normalize_answer`).
    """
    golds = parsed_gold(gold)
    if golds is None:
        return None
    for variant in answer_variants(answer):
        target = parse_answer(variant, kind)
        if target and any(verify(g, target, timeout_seconds=None) for g in golds if g):
            return True
    return False


def equivalent(a: str, b: str) -> bool:
    """Whether two normalised answer strings are the same answer (`a` read as the reference)."""
    verdict = verify_answer(a, b)
    return a.strip() == b.strip() if verdict is None else verdict
