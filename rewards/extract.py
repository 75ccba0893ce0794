"""Finding the final answer in a completion and normalising answer strings: pure, linear-time string functions.

Everything here runs in the trainer process on untrusted model output, so every scan is bounded: a 1 MB completion,
10,000 nested braces or an unclosed `\\boxed{` cost milliseconds, never a hang. Nothing here calls sympy.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

# An answer longer than this is not a final answer (MATH answers are < 100 characters); longer boxed contents are
# treated as "no answer", which also keeps pathological strings away from the LaTeX parser.
MAX_ANSWER_CHARS = 1000
# How many `\boxed` occurrences, from the last one backwards, are tried when the later ones are unclosed or too long.
MAX_BOXED_TRIES = 16

_BOXED_COMMANDS = ("\\boxed", "\\fbox")
# Boxes separated only by connectors (`, `, ` and `, `$ or $`, `\\quad\\text{and}\\quad`, a line break), at most this
# many characters, belong to one answer; any other word between them (`\\boxed{2}, wait, no: \\boxed{1}`) does not.
MAX_BOX_GAP = 40
# Inside math, a `\\text{...}` label (`\\text{ for part (a) and }`) and a name being assigned (`\\) and \\( y_2 =`)
# connect boxes too: a correction is written in prose, not inside the formula.
_BOX_CONNECTOR = re.compile(
    r"(?:\s|[,;$&.]|\\\\|\\[][()]|\\q?quad|\\[,;: ]|\band\b|\bor\b|\\(?:text|mathrm|mbox)\{[^{}$]{0,40}\}"
    r"|[A-Za-z](?:_\{?\w{1,3}\}?)?\s*=)*"
)
_GOLD_BOX_CONNECTOR = re.compile(r"\b(?:and|or)\b|^[^A-Za-z]*$")
_PART_TOKEN = re.compile(r"\\[{}]|\\text\{\s*and\s*\}|\s+and\s+|\\.|[^\\]", re.DOTALL)
_AND = re.compile(r"\\text\{\s*and\s*\}|\s+and\s+")
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)  # an escaped character (`\{`) is not a group brace
_GSM8K_MARK = "####"
_PLAIN_INTEGER = re.compile(r"[-+]?\d+")
_PLAIN_DECIMAL = re.compile(r"[-+]?\d+\.\d+|[-+]?\d+\.?")
# Thousands separators only where they are separators: a leading group of 1-3 digits not starting with 0, then groups
# of exactly 3 (`1,000`, `1 000`, `-12,345.5`); `0,111` and `1,5` are not numbers with separators.
_THOUSANDS = re.compile(r"[-+]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?|[-+]?[1-9]\d{0,2}(?: \d{3})+(?:\.\d+)?")
# A comma between digits that is not a thousands separator separates items (`0,111` is 0 and 111): spelled out with a
# space, except in a lone `a,b` (`3,75`, `0,125`), which can also be a decimal comma (`DECIMAL_COMMA`).
_ITEM_COMMA = re.compile(r"(?<=\d),(?=\d)")
# One number with one comma: a decimal comma or a two-item list (MATH writes the solutions 0 and 1 as `0,1`).
DECIMAL_COMMA = re.compile(r"[-+]?\d+,\d+")
# A bold number written digit by digit (`\mathbf{3 9 2}`, OlympiadBench's style) is one number.
_SPACED_BOLD_DIGITS = re.compile(r"\\mathbf\{\s*(\d(?:\s\d)+)\s*\}")
# Markdown bold (`The sum is **144**.`), as small models write a final answer.
_MARKDOWN_BOLD = re.compile(r"\*\*([^*\n]{1,200}?)\*\*")
# Digits joined by commas or single spaces: a thousands-separated number or a list of items (see `normalize_region`).
_DIGIT_GROUPS = re.compile(
    r"(?<![\d.,])[-+]?\d+(?:,\d+)+(?:\.\d+)?(?![\d,])|(?<![\d.,])[1-9]\d{0,2}(?: \d{3})+(?![\d.,])"
)
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:\s*\{\s*,\s*\}\s*|,\\!|\\,|\\ |\\!|~)(?=\d{3}(?!\d))")
# A LaTeX math span, where a comma between digits separates items, as latex2sympy reads it (`$1,22$` is {1, 22}).
_MATH_SPAN = re.compile(r"\$\$.*?\$\$|\$[^$]*\$|\\\[.*?\\\]|\\\(.*?\\\)", re.DOTALL)
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

    `text` is the normalised answer string; `kind` says how it is parsed: `latex` (the content of a `\\boxed{}`, or
    several boxes joined as one list), `text` (a final-answer region, e.g. an `<answer>` tag's content or the last line,
    read with math-verify's extraction) or `number` (a whole-token number, e.g. after `####`). `context` (lenient mode
    only) is the completion's tail, whose LaTeX spans are read when `text` yields nothing.
    """

    text: str
    kind: str
    context: str | None = None


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


def _boxes_backwards(text: str, max_chars: int) -> Iterator[tuple[int, int, str]]:
    """`(start, end, content)` of the complete boxes of `text`, last first; at most `MAX_BOXED_TRIES` occurrences."""
    end = len(text)
    for _ in range(MAX_BOXED_TRIES):
        start, command = max((text.rfind(c, 0, end), c) for c in _BOXED_COMMANDS)
        if start < 0:
            return
        end = start
        i = start + len(command)
        if i < len(text) and text[i].isalpha():  # another macro, e.g. \boxedx
            continue
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            content = _braced_content(text, i, max_chars)
            stop = i + len(content or "") + 2
        elif i > start + len(command) and i < len(text):  # `\boxed 5`: one token after a space
            content = re.match(r"[^\s$]*", text[i : i + max_chars]).group() or None
            stop = i + len(content or "")
        else:
            content = None
        if content is not None and content.strip():  # an empty box (`\\boxed{}`) is no answer, and no verdict
            yield start, stop, content


def last_boxed(text: str, max_chars: int = MAX_ANSWER_CHARS) -> str | None:
    """The content of the last complete `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed 5`) in `text`.

    Empty boxes (`\\boxed{}`, `\\boxed{ }`) are skipped as if absent: `7 + 5 = 12. The answer is \\boxed{}.` is
    read without its box, so a right unboxed answer is not cancelled. Unclosed or over-long groups are skipped, so a
    completion truncated inside `\\boxed{` falls back to its previous boxed answer. At most `MAX_BOXED_TRIES`
    occurrences are examined, each within a `max_chars` window.
    """
    return next((content for _, _, content in _boxes_backwards(text, max_chars)), None)


def last_boxed_end(text: str, max_chars: int = MAX_ANSWER_CHARS) -> int:
    """Where the last complete non-empty box of `text` ends (the index after its closing brace); -1 if none."""
    return next((stop for _, stop, _ in _boxes_backwards(text, max_chars)), -1)


def unclosed_boxed(text: str, max_chars: int = MAX_ANSWER_CHARS) -> str | None:
    """What follows the last `\\boxed{` when that box never closes (`\\boxed{\\frac{1}{2}` -> `\\frac{1}{2}`), if its
    own braces balance; else None. For golds only: math-verify reads such a gold, so it must not become unparsable."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    rest = text[start + len("\\boxed{") :].strip().rstrip("$.").strip()
    if "}" not in rest or len(rest) > max_chars:  # math-verify's own box pattern needs a closing brace too
        return None
    depth = 0
    for match in _BRACE_TOKEN.finditer(rest):
        depth += 1 if match.group() == "{" else -1 if match.group() == "}" else 0
        if depth < 0:
            return None
    return rest if depth == 0 else None


def last_boxed_group(text: str, max_gap: int = MAX_BOX_GAP, any_words: bool = False) -> list[str]:
    """The contents of the final run of boxes: the last box and the boxes before it that only connectors separate
    from it (`, `, ` and `, `\\quad\\text{and}\\quad`; at most `max_gap` characters, no blank line).

    `\\boxed{(2, 2)} \\quad\\text{and}\\quad \\boxed{(6, 2)}` gives both; `\\boxed{2}, wait, no: \\boxed{1}` (a first
    attempt, then a correction) gives only the last. `any_words` (golds, which do not correct themselves): words of
    at most `max_gap` characters connect too when they hold a conjunction or no letters at all (`\\boxed{1} papers
    and \\boxed{2} bins` and `\\boxed{35 cm} ++++ \\boxed{4}` give both; `\\boxed{1} no no no \\boxed{2}` only 2).
    """
    spans = list(_boxes_backwards(text, MAX_ANSWER_CHARS))[::-1]
    if not spans:
        return []
    group = [spans[-1]]
    for span in reversed(spans[:-1]):
        gap = text[span[1] : group[0][0]]
        connected = _BOX_CONNECTOR.fullmatch(gap) or (any_words and _GOLD_BOX_CONNECTOR.search(gap))
        if len(gap) > max_gap or "\n\n" in gap or not connected:
            break
        group.insert(0, span)
    return [content for _, _, content in group]


def top_level_parts(text: str) -> list[str]:
    """`text` split at its top-level commas and semicolons (outside (), [], {} and `\\{ \\}`), and at ` and `.

    A gold with several parts (`(2, 2), (6, 2)`, `1 and 2`, `\\{1, 2\\}` or `{1,2,3}` read as its elements) is
    compared with every box of the completion's final group as one set.
    """
    inner = text.strip()
    for opening, closing in (("\\{", "\\}"), ("\\left\\{", "\\right\\}")):
        if inner.startswith(opening) and inner.endswith(closing):
            inner = inner[len(opening) : -len(closing)]
    if inner.startswith("{") and _braced_content(inner, 0, len(inner)) == inner[1:-1]:  # `{1,2,3}`: a set
        inner = inner[1:-1]
    parts, depth, current = [], 0, []
    for token in _PART_TOKEN.findall(inner):
        if token in ("(", "[", "{", "\\{"):
            depth += 1
        elif token in (")", "]", "}", "\\}"):
            depth -= 1
        if depth == 0 and (token in (",", ";") or _AND.fullmatch(token)):
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(token)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def normalize_answer(text: str) -> str:
    """Normalise an answer string where math-verify's own normalisation falls short.

    Strips whitespace, enclosing `$...$`, a trailing period and a trailing degree sign; turns thousands separators
    (`10,000`, `1 000`, `10{,}000`, `14 {, }916`, `10\\,000`) into plain digits, and any other comma between digits
    into an item separator (`1,2,3` -> `1, 2, 3`), except in a lone `a,b` (`3,75`): a decimal comma or a list, both
    read by `answer_variants`; `\\dfrac`/`\\tfrac` into `\\frac`; a float-stored integer (`27.0`) into `27`. Percent
    signs are kept: `answer_variants` handles them.
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
        text = text.replace(",", "").replace(" ", "")
    if not DECIMAL_COMMA.fullmatch(text):
        text = _ITEM_COMMA.sub(", ", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    match = _FLOAT_STORED_INTEGER.fullmatch(text)
    if match:
        text = match.group(1)
    return text


def normalize_region(text: str, decimal_comma: bool = True) -> str:
    """Normalise free text (a final-answer line, an `<answer>` tag) before math-verify reads it.

    Markdown bold loses its stars (`**144**` is 144: a number glued to `**` is no whole token). `\\mathbf{3 9 2}`
    becomes `392`. Thousands separators become plain digits where they are separators (`1,000`, `1 000`, `10{,}000`,
    `10\\,000`), except right inside brackets (`[1,100]` is an interval). A lone `a,b` in prose, outside math spans
    and brackets, is a decimal comma (`environ 4,5 €` is 4.5, `0,125` is 0.125) unless `decimal_comma` is off (the
    gold has several parts: a list context); every other comma between digits separates items (`$x = 0,5$`,
    `1,2,3` -> `0, 5`, `1, 2, 3`), as latex2sympy reads them.
    """
    text = _MARKDOWN_BOLD.sub(r"\1", _LATEX_THOUSANDS.sub("", text.strip()))
    text = _SPACED_BOLD_DIGITS.sub(lambda m: re.sub(r"\s+", "", m.group(1)), text)
    spans = [(m.start(), m.end()) for m in _MATH_SPAN.finditer(text)] if decimal_comma else []
    return _DIGIT_GROUPS.sub(lambda m: _digit_group(m, decimal_comma, spans), text)


def _digit_group(match: re.Match, decimal_comma: bool, spans: list[tuple[int, int]]) -> str:
    token = match.group()
    inside_brackets = match.start() > 0 and match.string[match.start() - 1] in "([{"
    if _THOUSANDS.fullmatch(token) and not inside_brackets:
        return token.replace(",", "").replace(" ", "")
    in_math = any(start < match.start() < end for start, end in spans)
    if decimal_comma and not inside_brackets and not in_math and DECIMAL_COMMA.fullmatch(token):
        return token.replace(",", ".")
    return token.replace(",", ", ")


def strip_percent(text: str) -> str | None:
    """`text` without a trailing percent sign (`50\\%` -> `50`), or None if it has none."""
    match = _PERCENT.search(text)
    if match is None or match.start() == 0:
        return None
    return text[: match.start()].strip()


def answer_variants(text: str) -> list[str]:
    """The readings of an answer that count as the same answer: itself; for `50\\%`, `50`; for a lone `3,75`, `3.75`.

    math-verify reads `50\\%` as 0.5 and `50.0\\%` as 0.5 too, so a boxed `50\\%` would not match a gold `50`;
    trying the number without its percent sign as well accepts it (and still accepts gold `0.5`). `a,b` (one comma,
    not a thousands group: `1,22`, `0,111`, `3,75`) is a decimal comma in much of the world and a two-item list in
    MATH (`0,1`): both readings are tried, so `1.22` matches a gold `1,22` and `\\{0, 1\\}` a gold `0,1`.
    """
    variants = [text]
    if DECIMAL_COMMA.fullmatch(text) and not _THOUSANDS.fullmatch(text):
        variants.append(text.replace(",", "."))
    stripped = strip_percent(text)
    return variants if stripped is None else [*variants, stripped]


def normalize_gold(gold: Any) -> str | None:
    """The gold answer as an answer string, or None if there is none.

    Accepts a plain value (`3/4`, `0.75`, `\\frac{3}{4}`), a number stored as a float (`27.0`), a GSM8K solution
    ending in `#### 72` (`#### 1,000` too), and a full solution containing `\\boxed{...}`: its final group of boxes
    counts, several boxes as one list (`\\boxed{1}\\boxed{2}` -> `1, 2`, never just the last). A box that never
    closes (`\\boxed{\\frac{1}{2}`) is read up to the end, as math-verify reads it.
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
        boxes = [normalize_answer(box) for box in last_boxed_group(text, any_words=True)]
        if not boxes:
            boxes = [unclosed_boxed(text) or ""]
        text = ", ".join(box for box in boxes if box)
    text = normalize_answer(text)
    return text or None


_SPACES = re.compile(r"\s+")
_LAST_SPAN = re.compile(r"\$+([^$]+)\$+[^$]*$")


def _bare(text: str) -> str:
    text = _SPACES.sub("", text).strip("$")
    for opening, closing in (("\\(", "\\)"), ("\\[", "\\]")):
        if text.startswith(opening) and text.endswith(closing):
            text = text[len(opening) : -len(closing)]
    return text


def same_text(gold: str, answer: str, kind: str = "latex") -> bool:
    """Normalised string identity, for answers that neither side can parse as mathematics (a clock time `12:00`
    against `$12:00$`, `1 - \\frac{1}{\\mathrm{e}}` itself): whitespace and enclosing `$`, `\\(...\\)`, `\\[...\\]`
    are ignored; free text is also compared by its last math span."""
    bare_gold = _bare(gold)
    if not bare_gold:
        return False
    if _bare(answer) == bare_gold:
        return True
    span = _LAST_SPAN.search(answer) if kind != "latex" else None
    return span is not None and _bare(span.group(1)) == bare_gold


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
