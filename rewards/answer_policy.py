"""The answer-extraction policy (`answer_extraction_mode`): which part of a completion is read as its final answer.

| mode          | reads, in this order                                                                            |
|---------------|-------------------------------------------------------------------------------------------------|
| `boxed_only`  | the final `\\boxed{}` (a run of boxes as one list when the gold has several parts); nothing else |
| `math_verify` | boxes; else the `<answer>` tag; else the number after `####`; else the final-answer region      |
|               | (from the last "answer" phrase to the end, or the last line with math) read by math-verify's   |
|               | extraction: "final answer is", "answer:", the last LaTeX span or expression; whole-token numbers |
| `lenient`     | `math_verify`; and when the region yields nothing, the last LaTeX span anywhere in the          |
|               | completion's tail (never a bare number outside the region)                                      |

Everything here is linear-time string work in the trainer process; the region is read by math-verify in the
verifier processes (`rewards.equivalence`), under their deadline.
"""

from __future__ import annotations

import re

from rewards.extract import (
    MAX_ANSWER_CHARS,
    Answer,
    last_boxed,
    last_boxed_end,
    last_boxed_group,
    normalize_answer,
    normalize_region,
)

EXTRACTION_MODES = ("boxed_only", "math_verify", "lenient")
DEFAULT_EXTRACTION_MODE = "math_verify"
# "The final answer is X. I hope it is correct.": math-verify's first-priority pattern, read even before a box.
_HOPE_STATEMENT = re.compile(r"final answer is:?\s*.{1,200}?\.?\s?I hope", re.IGNORECASE | re.DOTALL)
# Lenient mode reads LaTeX spans in at most this many final characters of a completion.
MAX_CONTEXT_CHARS = 4000
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_GSM8K_MARK = "####"
# A number as a whole token: not glued to letters, digits or a decimal point on either side (`AZYUK2A` has none).
_WHOLE_NUMBER = re.compile(r"(?<![\w.\\])[-+]?\d(?:[\d,]*\d)?(?:\.\d+)?(?:/\d+)?(?![\w]|\.\d)")
_ANSWER_PHRASE = re.compile(r"answer", re.IGNORECASE)
# A region that states one plain number and nothing else: math-verify reads that number, so it is taken here.
_PLAIN_STATEMENT = re.compile(
    r"(?:(?:final )?answer(?: is)?:?\s*)?\$?(?P<number>[-+]?\d+(?:\.\d+)?)\$?\s*\.?", re.IGNORECASE
)
# Sentence punctuation just inside a closing math delimiter (`$120^\circ.$`, `x = 6.\]`): latex2sympy rejects it.
_TRAILING_PUNCTUATION = re.compile(r"([.,;:])(\s*)$")
_PUNCTUATION_BEFORE_CLOSER = re.compile(r"([.,;:])(\s*)(\\[\])])")
_DOLLARS = re.compile(r"\$\$|\$")
# A math span holding one bare symbol or name (`$n$`, `$\theta$`, `$ABCDEFGH$`): a name, not an answer, unless it is
# the only span and no number follows it.
_BARE_SYMBOL = re.compile(r"\s*(\\[A-Za-z]+|[A-Za-z]+)\s*")
_WHOLE_DIGIT = re.compile(r"(?<![\w.])\d")
# The end of an environment whose rows are equations (a derivation's last row holds its result).
_END_ALIGNED = re.compile(r"\\end\{(?:align|aligned|alignat|eqnarray|gather|gathered|split)\*?\}")
# An equals sign that separates the steps of a derivation (not <=, >=, !=, \leq, ...).
_ROW_EQUALS = re.compile(r"(?<![<>!\\])=")
# An empty box or math span states nothing (`The answer is \\boxed{}.`): dropped before the region is chosen.
_EMPTY_BOX = re.compile(r"(?P<open>\$\$|\$)?\s*\\(?:boxed|fbox)\s*\{\s*\}\s*(?(open)(?P=open))")
_EMPTY_SPAN = re.compile(r"\\\(\s*\\\)|\\\[\s*\\\]")
# Where a sentence begins: after sentence punctuation followed by a space, or after a line break.
_SENTENCE_START = re.compile(r"[.!?]\s+|\n")
# A line that can hold a final answer: a digit or a math delimiter.
_MATH_LINE = re.compile(r"\d|\$|\\[([\])]|\\frac|\\sqrt|\\pi|\\infty")


def check_extraction_mode(mode: str) -> str:
    """`mode` if it is one of `EXTRACTION_MODES`, else a ValueError naming the setting and the choices."""
    if mode not in EXTRACTION_MODES:
        raise ValueError(
            f"answer_extraction_mode={mode!r} is not a mode; choose one of {', '.join(EXTRACTION_MODES)} "
            "(see docs/grading.md)."
        )
    return mode


def extract_answer(text: str, mode: str = DEFAULT_EXTRACTION_MODE, multipart: bool = False) -> Answer | None:
    """The final answer of a completion under `mode` (see the module table), or None if it has none.

    `multipart`: the gold has several parts (`rewards.extract.top_level_parts`), so the final run of boxes is read as
    one list (`\\boxed{(2, 2)} and \\boxed{(6, 2)}`) instead of its last box.
    """
    check_extraction_mode(mode)
    if not text:
        return None
    decimal_comma = not multipart  # several parts: `1,2` lists them
    if mode != "boxed_only":
        closing = _closing_statement(text)
        if closing is not None:
            return Answer(tidy_math_spans(normalize_region(closing, decimal_comma)), "text")
    boxes = last_boxed_group(text) if multipart else []
    if len(boxes) > 1:
        joined = ", ".join(b for b in (normalize_answer(box) for box in boxes) if b)
        return Answer(joined, "latex") if joined else None
    boxed = boxes[0] if boxes else last_boxed(text)
    if boxed is not None:
        boxed = normalize_answer(boxed)
        return Answer(boxed, "latex") if boxed else None
    if mode == "boxed_only":
        return None
    tag_start = text.rfind("<answer>")
    if tag_start >= 0:
        match = _ANSWER_TAG.match(text, tag_start)
        if match and len(match.group(1)) <= MAX_ANSWER_CHARS:
            content = tidy_math_spans(normalize_region(match.group(1), decimal_comma))
            return Answer(content, "text") if content else None
    mark = text.rfind(_GSM8K_MARK)
    if mark >= 0:
        number = _WHOLE_NUMBER.search(text, mark + len(_GSM8K_MARK), mark + 64)
        if number:
            return Answer(normalize_answer(number.group()), "number")
    region = final_answer_region(text)
    if region is None:
        return None
    region = tidy_math_spans(normalize_region(region, decimal_comma))
    plain = _PLAIN_STATEMENT.fullmatch(region)
    if plain:  # "answer is 72." or a bare "72": what math-verify reads there, compared without sympy
        return Answer(normalize_answer(plain.group("number")), "number")
    context = text[-MAX_CONTEXT_CHARS:]
    context = tidy_math_spans(normalize_region(context, decimal_comma)) if mode == "lenient" else None
    return Answer(region, "text", context)


def _closing_statement(text: str) -> str | None:
    """The last `final answer is X. I hope it is correct.` of the completion's tail (the Minerva / lighteval answer
    format, which math-verify reads before anything else), when no box follows it; None otherwise."""
    tail_start = max(0, len(text) - MAX_CONTEXT_CHARS)
    statement = None
    for statement in _HOPE_STATEMENT.finditer(text, tail_start):  # noqa: B007 - only the last match is wanted
        pass
    if statement is None or last_boxed_end(text) > statement.start():
        return None
    return statement.group()


def aligned_row(line: str) -> str | None:
    """The last row of an `align`/`eqnarray`/`gather` environment as display math holding the row's final value:
    `&= 50^\\circ + 40^\\circ \\\\ &= 90^\\circ.` -> `\\[90^\\circ\\]` (its last row, alignment marks dropped, the part
    after its last `=`, which in a derivation is the value reached)."""
    row = line.rstrip().removesuffix("\\\\").rstrip(" .,;")
    row = row.rsplit("\\\\", 1)[-1].replace("&", " ")
    value = _ROW_EQUALS.split(row)[-1].strip(" .,;")
    return f"\\[{value}\\]" if value else None


def tidy_math_spans(text: str) -> str:
    """Free text made readable for math-verify's rightmost-span rule, which would otherwise read `$7$ values of $n$`
    as n, `The largest $n$ is 34.` as n, and fail on `$120^\\circ.$`: sentence punctuation moves out of closing `$`,
    `$$`, `\\]`, `\\)`, and a span holding one bare symbol or name loses its dollars when another span precedes it,
    or when no span but a number follows it (`The volume of $ABCDEFGH$ is 120.`)."""
    text = _move_punctuation_out(text)
    spans = _single_dollar_spans(text)
    pieces, last = [], 0
    for index, (start, end) in enumerate(spans):
        symbol = _BARE_SYMBOL.fullmatch(text, start + 1, end - 1)
        if symbol is None:
            continue
        named_then_number = index == len(spans) - 1 and _WHOLE_DIGIT.search(text, end) is not None
        if index > 0 or named_then_number:
            pieces += [text[last:start], symbol.group(1)]
            last = end
    return "".join(pieces) + text[last:] if pieces else text


def _single_dollar_spans(text: str) -> list[tuple[int, int]]:
    """`(start, end)` of the `$...$` spans of `text`, dollars paired in order (`$$` displays are skipped whole)."""
    spans, opened = [], None
    for match in _DOLLARS.finditer(text):
        if match.group() == "$$":
            if opened is None:
                continue
            opened = None  # a `$$` inside an open span: not a pairing we can trust
            continue
        if opened is None:
            opened = match.start()
        else:
            spans.append((opened, match.end()))
            opened = None
    return spans


def _move_punctuation_out(text: str) -> str:
    pieces, inside, last = [], False, 0
    for match in _DOLLARS.finditer(text):
        if inside:  # a closing delimiter: trailing punctuation of the span goes after it
            content = text[last : match.start()]
            trailing = _TRAILING_PUNCTUATION.search(content)
            if trailing:
                content = content[: trailing.start()] + trailing.group(2) + match.group() + trailing.group(1)
                pieces.append(content)
            else:
                pieces.append(content + match.group())
        else:
            pieces.append(text[last : match.start()] + match.group())
        inside, last = not inside, match.end()
    pieces.append(text[last:])
    return _PUNCTUATION_BEFORE_CLOSER.sub(r"\2\3\1", "".join(pieces))


def final_answer_region(text: str, max_chars: int = MAX_ANSWER_CHARS) -> str | None:
    """Where a completion without a box states its answer, or None if no line holds a digit or math.

    - From its last "answer" phrase to the end, when that is at most `max_chars` long and holds a digit or math.
    - Else, when the phrase's sentence states the answer before the phrase (`141 is indeed the answer.`, `Thus
      $x <= 2$ is our answer.`), that sentence.
    - Else (no phrase, or a phrase with nothing to read: `The answer is \\boxed{}.`, `that is the answer because
      adding zero changes nothing.`), its last line holding a digit or math (with the display-math block or the
      inline span it closes),
      cut to its last `max_chars` characters; the last row of an `align`-like environment as a display
      (`aligned_row`).

    Empty boxes and empty math spans are dropped first: they state nothing.
    """
    text = _EMPTY_SPAN.sub("", _EMPTY_BOX.sub("", text[-4 * max_chars :]))
    tail = text[-(max_chars + 64) :]
    phrase = None
    for phrase in _ANSWER_PHRASE.finditer(tail):  # noqa: B007 - only the last match is wanted
        pass
    if phrase is not None and len(tail) - phrase.start() <= max_chars:
        region = tail[phrase.start() :].strip()
        if _MATH_LINE.search(region):
            return region
        sentence_start = 0
        for sentence_start in _SENTENCE_START.finditer(tail, 0, phrase.start()):  # noqa: B007 - the last one
            pass
        start = sentence_start.end() if sentence_start else 0
        if _MATH_LINE.search(tail, start, phrase.start()):
            return tail[start:].strip()
    lines = text.rstrip().split("\n")
    for index in range(len(lines) - 1, -1, -1):
        if not _MATH_LINE.search(lines[index]):
            continue
        if index + 1 < len(lines) and _END_ALIGNED.match(lines[index + 1].strip()):
            return aligned_row(lines[index])
        region = lines[index]
        opened = index
        while opened > 0 and (
            region.count("$$") % 2 == 1
            or region.count("\\]") > region.count("\\[")
            or region.replace("$$", "").count("$") % 2 == 1  # an inline span that opened on an earlier line
        ):
            opened -= 1
            region = lines[opened] + "\n" + region
        return region[-max_chars:].strip() or None
    return None
