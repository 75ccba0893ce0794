"""Finding the final answer in a completion and normalising answer strings: pure, linear-time string functions.

Everything here runs in the trainer process on untrusted model output, so every scan is bounded: a 1 MB completion,
10,000 nested braces or an unclosed `\\boxed{` cost milliseconds, never a hang. Nothing here calls sympy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

# An answer longer than this is not a final answer (MATH answers are < 100 characters); longer boxed contents are
# treated as "no answer", which also keeps pathological strings away from the LaTeX parser.
MAX_ANSWER_CHARS = 1000
# How many `\boxed` occurrences, from the last one backwards, are tried when the later ones are unclosed or too long.
MAX_BOXED_TRIES = 16

_BOXED_COMMANDS = ("\\boxed", "\\fbox")
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)  # an escaped character (`\{`) is not a group brace
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_GSM8K_MARK = "####"
# A final number: thousands-separated (1,234,567.5) or plain (-12.5), or a simple fraction (3/4).
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")
_PLAIN_INTEGER = re.compile(r"[-+]?\d+")
_PLAIN_DECIMAL = re.compile(r"[-+]?\d+\.\d+|[-+]?\d+\.?")
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:\{,\}|\\,|\\ |\\!|~)(?=\d{3}(?!\d))")
_FLOAT_STORED_INTEGER = re.compile(r"([-+]?\d+)\.0+")
_PERCENT = re.compile(r"\s*(?:\\%|%|\\text\{\s*\\?%\s*\}|\\mbox\{\s*\\?%\s*\}|\\?\s*percent)\s*$")
_DEGREES = re.compile(r"\s*(?:\^\s*\{?\s*\\circ\s*\}?|°|\\degree)\s*$")
_ENCLOSING_DOLLARS = re.compile(r"^\$+(.*?)\$+$", re.DOTALL)
_ENCLOSING_TEXT = re.compile(r"^\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}$")
# The largest integer compared exactly without math-verify: Python refuses str->int beyond 4300 digits.
_MAX_FAST_DIGITS = 1000
# math-verify compares floats after rounding to 6 decimals; two decimals closer than this may round equal.
_FLOAT_ROUNDING_TOLERANCE = Fraction(1, 10**6)


@dataclass(frozen=True)
class Answer:
    """A final answer found in a completion.

    `text` is the normalised answer string; `kind` says how it is parsed: `latex` (the content of a `\\boxed{}`),
    `text` (the content of an `<answer>` tag, parsed with math-verify's free-text extraction) or `number` (a bare final
    number found by the fallback).
    """

    text: str
    kind: str


def completion_text(completion: Any) -> str:
    """The text of one completion, conversational (`[{"role": "assistant", "content": ...}]`) or plain.

    `None` content, a missing key, an empty message list and non-string content all give "" rather than an error.
    Structured content (a list of `{"type": "text", "text": ...}` parts) is joined.
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)):
        if not completion:
            return ""
        message = completion[-1]
        content = message.get("content") if isinstance(message, dict) else message
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        if isinstance(content, (list, tuple)):
            parts = [p.get("text") or "" if isinstance(p, dict) else str(p) for p in content]
            return "".join(parts)
        return str(content)
    return str(completion)


def _braced_content(text: str, open_index: int, max_chars: int) -> str | None:
    """The content of the `{...}` group opening at `open_index`, or None if it does not close within `max_chars`."""
    window = text[open_index : open_index + max_chars + 2]
    depth = 0
    for match in _BRACE_TOKEN.finditer(window):
        token = match.group()
        if token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
            if depth == 0:
                return window[1 : match.start()]
    return None


def last_boxed(text: str, max_chars: int = MAX_ANSWER_CHARS) -> str | None:
    """The content of the last complete `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed 5`) in `text`.

    Unclosed or over-long groups are skipped, so a completion truncated inside `\\boxed{` falls back to its previous
    boxed answer. At most `MAX_BOXED_TRIES` occurrences are examined, each within a `max_chars` window.
    """
    end = len(text)
    for _ in range(MAX_BOXED_TRIES):
        start, command = max((text.rfind(c, 0, end), c) for c in _BOXED_COMMANDS)
        if start < 0:
            return None
        end = start
        i = start + len(command)
        if i < len(text) and (text[i].isalpha()):  # another macro, e.g. \boxedx
            continue
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            content = _braced_content(text, i, max_chars)
        elif i > start + len(command) and i < len(text):  # `\boxed 5`: one token after a space
            content = re.match(r"[^\s$]*", text[i : i + max_chars]).group() or None
        else:
            content = None
        if content is not None:
            return content
    return None


def extract_answer(text: str) -> Answer | None:
    """The final answer of a completion, or None if it has none.

    Order: the last complete `\\boxed{}`; else the last `<answer>...</answer>` (R1 template); else the number after
    the last GSM8K `####`; else the last number in the text (GSM8K-style fallback).
    """
    if not text:
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return _nonempty(boxed, "latex")
    tag_start = text.rfind("<answer>")
    if tag_start >= 0:
        match = _ANSWER_TAG.match(text, tag_start)
        if match and len(match.group(1)) <= MAX_ANSWER_CHARS:
            return _nonempty(match.group(1), "text")
    mark = text.rfind(_GSM8K_MARK)
    if mark >= 0:
        number = _NUMBER.search(text, mark, mark + 64)
        if number:
            return _nonempty(number.group(), "number")
    last = None
    for last in _NUMBER.finditer(text):  # noqa: B007 - only the last match is wanted
        pass
    if last is not None and len(last.group()) <= MAX_ANSWER_CHARS:
        return _nonempty(last.group(), "number")
    return None


def _nonempty(text: str, kind: str) -> Answer | None:
    text = normalize_answer(text)
    return Answer(text, kind) if text else None


def normalize_answer(text: str) -> str:
    """Normalise an answer string where math-verify's own normalisation falls short.

    Strips whitespace, enclosing `$...$`, a trailing period and a trailing degree sign; turns thousands separators
    (`10,000`, `10{,}000`, `10\\,000`) into plain digits; `\\dfrac`/`\\tfrac` into `\\frac`; a float-stored integer
    (`27.0`) into `27`. Percent signs are kept: `answer_variants` handles them.
    """
    text = text.strip()
    match = _ENCLOSING_DOLLARS.match(text)
    if match:
        text = match.group(1).strip()
    match = _ENCLOSING_TEXT.match(text)
    if match:  # \text{5 apples}: the words are read as units around the number
        text = match.group(1).strip()
    text = text.rstrip(".").strip()
    text = _DEGREES.sub("", text)
    text = _LATEX_THOUSANDS.sub("", text)
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    match = _FLOAT_STORED_INTEGER.fullmatch(text)
    if match:
        text = match.group(1)
    return text


def strip_percent(text: str) -> str | None:
    """`text` without a trailing percent sign (`50\\%` -> `50`), or None if it has none."""
    match = _PERCENT.search(text)
    if match is None or match.start() == 0:
        return None
    return text[: match.start()].strip()


def answer_variants(text: str) -> list[str]:
    """The readings of an answer that count as the same answer: itself and, for `50\\%`, `50`.

    math-verify reads `50\\%` as 0.5 and `50.0\\%` as 0.5 too, so a boxed `50\\%` would not match a gold `50`;
    trying the number without its percent sign as well accepts it (and still accepts gold `0.5`).
    """
    stripped = strip_percent(text)
    return [text] if stripped is None else [text, stripped]


def normalize_gold(gold: Any) -> str | None:
    """The gold answer as an answer string, or None if there is none.

    Accepts a plain value (`3/4`, `0.75`, `\\frac{3}{4}`), a number stored as a float (`27.0`), a GSM8K solution
    ending in `#### 72` (`#### 1,000` too), and a full solution containing `\\boxed{...}` (the last one counts).
    """
    if gold is None:
        return None
    if isinstance(gold, bool):
        return None
    if isinstance(gold, float):
        if gold != gold or gold in (float("inf"), float("-inf")):
            return None
        gold = repr(gold)
    text = str(gold).strip()
    if not text:
        return None
    if _GSM8K_MARK in text:
        text = text[text.rfind(_GSM8K_MARK) + len(_GSM8K_MARK) :]
    elif "\\boxed" in text or "\\fbox" in text:
        boxed = last_boxed(text)
        if boxed is None:
            return None
        text = boxed
    text = normalize_answer(text)
    return text or None


def fast_numeric_verdict(gold: str, answer: str) -> bool | None:
    """Compare two plain numbers without sympy, or None when math-verify has to decide.

    Integers compare exactly, as math-verify does. Decimals: equal values are equal; values further apart than
    1e-6 cannot become equal under math-verify's rounding to 6 decimals, so they differ; anything closer is left to
    math-verify. Very long numbers are left to math-verify as well.
    """
    if len(gold) > _MAX_FAST_DIGITS or len(answer) > _MAX_FAST_DIGITS:
        return None
    if _PLAIN_INTEGER.fullmatch(gold) and _PLAIN_INTEGER.fullmatch(answer):
        return int(gold) == int(answer)
    if _PLAIN_DECIMAL.fullmatch(gold) and _PLAIN_DECIMAL.fullmatch(answer):
        if len(gold.lstrip("+-")) > 16 or len(answer.lstrip("+-")) > 16:  # beyond float precision: math-verify's call
            return None
        a, b = Fraction(gold.rstrip(".")), Fraction(answer.rstrip("."))
        if a == b:
            return True
        if abs(a - b) > _FLOAT_ROUNDING_TOLERANCE:
            return False
    return None
