"""math-verify on normalised answer strings: the slow, sympy-backed comparison.

These functions run inside the verifier worker processes (or in the trainer process when the pool is off), always
under a deadline set by the caller. They call math-verify with its signal-based timeouts switched off (they only
work on the main thread, in whole seconds) because the caller bounds the time instead.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache

import math_verify.grader
import math_verify.parser
import sympy
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from math_verify.parser import extract_target_from_pred, lazy_expr_regex, lazy_latex_regex

from rewards.echoes import is_echo, is_plain_number
from rewards.extract import answer_variants, same_text
from rewards.magnitude import MAX_DIGITS, AnswerTooLarge, too_large

# The caller enforces the time limit; tell math-verify not to warn that its own is off.
math_verify.parser.TIMEOUT_WARNING_SHOWN = True
math_verify.grader.TIMEOUT_WARNING_SHOWN = True
logging.getLogger("math_verify").setLevel(logging.ERROR)
logger = logging.getLogger(__name__)

# A boxed answer is LaTeX; a bare number or free text gets math-verify's usual extraction (LaTeX, then expressions).
_LATEX = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())
_LATEX_SPANS = LatexExtractionConfig(boxed_match_priority=0)
_EXPRESSIONS = ExprExtractionConfig()
# math-verify's expression patterns end at a number without looking past it (`100m2` reads 100, `x = 3y` reads 3,
# `$-[0, 1)$` reads 1 once its LaTeX fails to parse); this lookahead makes every number or expression it extracts
# from free text a whole token: followed by whitespace, the end, a `$`, sentence punctuation that ends a sentence, a
# currency sign (`1000.99€`) or a squared or cubed length unit (`1000.99m²`), never by letters (`12apples`, `x2b`).
_WHOLE_TOKEN_END = r"(?=\s|$|\$|[.,;:!?](?!\d)|[€£¥₹]|(?:[cmk]?m|km|cm)[²³](?!\w))"


# A LaTeX math span. A plain-text number inside one that math-verify could not parse as LaTeX is a fragment of that
# expression (`\begin{pmatrix} 1 \\ 2 \end{pmatrix}` is not 2), so expression patterns skip spans.
_MATH_SPAN = re.compile(r"\$\$.*?\$\$|\$[^$]*\$|\\\[.*?\\\]|\\\(.*?\\\)", re.DOTALL)


class _OutsideMathSpans:
    """An expression pattern whose matches overlapping a LaTeX math span are dropped (duck-types the `finditer` that
    math-verify's `extract_target_from_pred` calls)."""

    def __init__(self, pattern: re.Pattern) -> None:
        self.pattern = pattern

    def finditer(self, text: str):
        spans = [(m.start(), m.end()) for m in _MATH_SPAN.finditer(text)]
        for match in self.pattern.finditer(text):
            if not any(start < match.end() and match.start() < end for start, end in spans):
                yield match


def _free_text_patterns() -> list:
    """math-verify's extraction patterns for free text, its expression patterns made whole-token and kept outside
    LaTeX math spans (those are read as LaTeX)."""
    expressions = [
        (_OutsideMathSpans(re.compile(p.pattern + _WHOLE_TOKEN_END, p.flags)), priority)
        for p, priority in lazy_expr_regex(_EXPRESSIONS)
    ]
    return [(lazy_latex_regex(_LATEX_SPANS), _LATEX_SPANS), (expressions, _EXPRESSIONS)]


_FREE_TEXT = _free_text_patterns()
_LATEX_ONLY = [(lazy_latex_regex(_LATEX_SPANS), _LATEX_SPANS)]


def parse_answer(text: str, kind: str = "latex") -> list:
    """math-verify's parse of one answer string (`kind` as in `rewards.extract.Answer`); [] if nothing parses.

    `latex`: the string is a box's content. `text`/`number`: free text, read by math-verify's own priorities (boxed,
    "final answer is", "answer:", then the last LaTeX span or expression), numbers only as whole tokens.
    """
    if kind == "latex":
        return parse("\\boxed{" + text + "}", list(_LATEX), parsing_timeout=None)
    return _extract(text, _FREE_TEXT)


def parse_latex_spans(text: str) -> list:
    """The last LaTeX span of `text` that math-verify parses (lenient mode's wider reading); never a bare number."""
    return _extract(text, _LATEX_ONLY)


def _extract(text: str, patterns: list) -> list:
    """math-verify's extraction with our patterns; [] when its parsing raises, as its own `parse` does."""
    try:
        return extract_target_from_pred(text, patterns, fallback_mode="no_fallback", extraction_mode="any_match")
    except Exception:  # noqa: BLE001 - an unparsable answer is no answer (the deadline is a BaseException)
        logger.debug("math-verify could not read %r", text[:200], exc_info=True)
        return []


@lru_cache(maxsize=4096)
def parsed_gold(gold: str) -> tuple[list, ...] | None:
    """Every reading of a normalised gold answer, parsed once per process (the G completions of a group share it).

    None if no reading parses: such a gold cannot grade anything.
    """
    readings = tuple(parse_answer(variant) for variant in answer_variants(gold))
    if not any(readings):  # e.g. an unbalanced brace: read it as math-verify reads free text
        readings = (parse_answer(gold, "text"),)
    return readings if any(readings) else None


def verify_answer(
    gold: str, answer: str, kind: str = "latex", context: str | None = None, question: tuple[str, ...] = ()
) -> bool | None:
    """True if `answer` equals `gold` under math-verify in any of their readings (`50\\%` is also read as `50`).

    None if the gold cannot be parsed. Both strings are normalised (`rewards.extract`). `context` (lenient mode): a
    completion tail whose last LaTeX span is read when `answer` yields nothing. `question`: the numbers of the
    question (`rewards.echoes.question_numbers`), for the echo rule.
    """
    return verify_reading(gold, answer, kind, context, question)[0]


def verify_reading(
    gold: str, answer: str, kind: str = "latex", context: str | None = None, question: tuple[str, ...] = ()
) -> tuple[bool | None, str | None]:
    """`(verdict, reading)`: `verify_answer`'s verdict, and for free text (`kind` `text`/`number`) the answer that
    math-verify read in it, as LaTeX ("" if it read none: the completion has no answer); None for a boxed answer.

    Against a gold that is a number, an answer that restates arithmetic instead of its result (`17 + 21`, and with
    `question` known, a power or root of the question's own numbers) is not credited: `rewards.echoes`.

    Raises `AnswerTooLarge` (a counted grading error, score 0) before any evaluation when the gold or the answer
    would build a number of more than `MAX_DIGITS` digits (`10^{10^{10^{10}}}`): `rewards.magnitude`."""
    golds = parsed_gold(gold)
    if golds is None:
        return (True, _identity_reading(answer, kind)) if same_text(gold, answer, kind) else (None, None)
    targets = [parse_answer(variant, kind) for variant in _readings(answer, kind)]
    if not any(targets) and context:
        targets = [parse_latex_spans(variant) for variant in _readings(context, "text")]
    _refuse_huge(golds, "gold")
    _refuse_huge(targets, "answer")
    if not any(map(_is_math, golds)) and not any(map(_is_math, targets)) and same_text(gold, answer, kind):
        return True, _identity_reading(answer, kind)
    numeric_gold = any(g and is_plain_number(g[0]) for g in golds)
    verdict = any(
        target
        and not (numeric_gold and is_echo(target[0], question))
        and any(verify(g, target, timeout_seconds=None) for g in golds if g)
        for target in targets
    )
    if kind == "latex":
        return verdict, None
    return verdict, next((_as_latex(target[0], answer) for target in targets if target), "")


def _refuse_huge(readings: list | tuple, which: str) -> None:
    """Raise `AnswerTooLarge` if any parsed value of `readings` is too large to evaluate (`rewards.magnitude`)."""
    for reading in readings:
        for value in reading or ():
            if isinstance(value, sympy.Basic) and too_large(value):
                raise AnswerTooLarge(
                    f"the {which} would evaluate to a number of more than {MAX_DIGITS:,} digits: refused unevaluated"
                )


def _is_math(reading: list) -> bool:
    """Whether a parse is a finite mathematical value: not empty, not math-verify's string fallback, not `zoo` or
    `nan` (`12:00` parses as 12/0)."""
    value = reading[0] if reading else None
    return isinstance(value, sympy.Basic) and not value.has(sympy.zoo, sympy.nan)


def _identity_reading(answer: str, kind: str) -> str | None:
    return None if kind == "latex" else answer


def _as_latex(value, fallback: str) -> str:
    """`value` as LaTeX, else as text, else `fallback`: printing a parsed answer can recurse without end."""
    for printer in (sympy.latex, str):
        try:
            return printer(value)
        except Exception:  # noqa: BLE001 - a printing failure must not lose the verdict
            continue
    return fallback


def _readings(answer: str, kind: str) -> list[str]:
    """A boxed answer's percent readings (`answer_variants`); free text also without its percent signs."""
    if kind == "latex":
        return answer_variants(answer)
    without = re.sub(r"\s*\\?%", "", answer)
    return [answer] if without == answer else [answer, without]


def equivalent(a: str, b: str) -> bool:
    """Whether two normalised answer strings are the same answer (`a` read as the reference)."""
    verdict = verify_answer(a, b)
    return a.strip() == b.strip() if verdict is None else verdict
