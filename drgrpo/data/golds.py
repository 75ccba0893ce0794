"""Gold readers: each dataset stores its gold answer differently; these bring it to one plain answer string.

One registry, `ANSWER_FORMATS`, serves training's `answer_extraction` (drgrpo.data.sources, the `answer` column the
rewards see, and `--show_prompts`) and evaluation's `--answer_format` (drgrpo.evaluation.problems): the same name is
the same function, so a problem is rewarded against the gold it is evaluated against. Training's names `none` and
`boxed` are the evaluator's `plain` and `last_boxed`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any


def gsm8k_final_answer(text: str) -> str | None:
    """GSM8K's gold: the text after the last `####` of the worked solution, without thousands separators.

    Cobbe et al. (2021), GSM8K (github.com/openai/grade-school-math): every solution ends with `#### <number>`.
    Only separators are dropped (`1,000` -> `1000`); other commas separate items (`3, 5` stays a list).
    """
    if "####" not in text:
        return None
    answer = text.rsplit("####", 1)[1].strip()
    answer = re.sub(r"(?<=\d),(?=\d{3}\b)", "", answer)
    return answer or None


def last_boxed(text: str) -> str | None:
    """The final run of complete `\\boxed{...}` (or `\\fbox{...}`, `\\boxed 5`) in `text` as one answer; None if none.

    How MATH and Minerva-Math mark the final answer inside a worked solution (Hendrycks et al. 2021; Lewkowycz et
    al. 2022). The reward library's extractor (`rewards.extract.last_boxed_group`), so that a gold is read exactly as
    the verifier reads answers: braces nest, an unclosed box is no box, and a final run of boxes (`\\boxed{1} and
    \\boxed{2}`) is one answer listing every box (`1, 2`), never only the last.
    """
    from rewards.extract import last_boxed_group

    parts = [part.strip() for part in last_boxed_group(text, any_words=True)]
    return ", ".join(part for part in parts if part) or None


def _strip_dollars(text: str) -> str:
    text = text.strip()
    while len(text) >= 2 and text.startswith("$") and text.endswith("$"):
        text = text[1:-1].strip()
    return text


def list_answer(value: Any) -> str | None:
    """A list-valued gold (OlympiadBench's `final_answer`, the Dr.GRPO suite's Minerva answers) as one answer string.

    Each element loses surrounding `$...$` and whitespace; several elements (or one element listing several answers
    as `$69$,$84$`) are joined with ", " so math-verify reads them as one set of answers.
    """
    items = value if isinstance(value, (list, tuple)) else [value]
    parts: list[str] = []
    for item in items:
        if item is None:
            continue
        text = str(item).strip()
        # `$69$,$84$`: several math spans in one element are several answers
        spans = re.findall(r"\$([^$]+)\$", text) if text.count("$") >= 4 else []
        if spans:
            parts.extend(span.strip() for span in spans)
        else:
            parts.append(_strip_dollars(text))
    parts = [p for p in parts if p]
    return ", ".join(parts) if parts else None


def number_answer(value: Any) -> str | None:
    """A gold stored as a number (AMC's `27.0`, a csv column's floats) as the shortest exact string: `27`, `0.5`."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    text = str(value).strip()
    try:
        return number_answer(float(text)) if re.fullmatch(r"-?\d+(?:\.\d+)?", text) else (text or None)
    except ValueError:
        return text or None


def plain_answer(value: Any) -> str | None:
    """A gold that already is the answer (MATH-500, AIME): its string, trimmed; numbers as in `number_answer`."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return number_answer(value)
    text = _strip_dollars(str(value))
    return text or None


def auto_answer(value: Any) -> str | None:
    """Guess the gold's shape for a local file: list, number, GSM8K `#### N`, a solution with `\\boxed{}`, or plain."""
    if isinstance(value, (list, tuple)):
        return list_answer(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return number_answer(value)
    if value is None:
        return None
    text = str(value)
    if "####" in text:
        return gsm8k_final_answer(text)
    if re.search(r"\\(?:boxed|fbox)\s*\{", text):
        return last_boxed(text)
    return plain_answer(text)


def _of_text(read: Callable[[str], str | None]) -> Callable[[Any], str | None]:
    return lambda value: None if value is None else read(str(value))


ANSWER_FORMATS: dict[str, Callable[[Any], str | None]] = {
    "auto": auto_answer,
    "plain": plain_answer,
    "none": plain_answer,
    "gsm8k": _of_text(gsm8k_final_answer),
    "last_boxed": _of_text(last_boxed),
    "boxed": _of_text(last_boxed),
    "list": list_answer,
    "number": number_answer,
    # Code problems: the "gold" is the test cases (as JSON), graded by running the program (drgrpo.evaluation.code).
    "code_tests": lambda value: None if value in (None, "") else value if isinstance(value, str) else json.dumps(value),
}
LIST_FORMATS = ("auto", "list", "code_tests")  # the formats that read a list-valued gold (the others: its text)


def gold_shape_problem(value: Any, answer_format: str) -> str | None:
    """Why a gold of this shape cannot be read with `answer_format`, or None: a list or mapping under a format that
    reads text (`['#### 5']` as text is the string "['#### 5']", whose gsm8k answer would be `5']`). One rule for
    training's `answer_extraction` (drgrpo.data.sources, which refuses it) and evaluation's `--answer_format`."""
    if isinstance(value, list | tuple | dict) and answer_format not in LIST_FORMATS:
        return f"a {type(value).__name__} ({value!r:.200}), which {answer_format!r} would read as the text of its repr"
    return None


def check_answer_format(value: str, where: str) -> None:
    """Raise a `ValueError` naming `where` (the key) and every format when `value` is not one of `ANSWER_FORMATS`."""
    if value not in ANSWER_FORMATS:
        raise ValueError(f"{where}={value!r} is unknown. Choose one of: {', '.join(ANSWER_FORMATS)}.")


def normalize_gold(value: Any, answer_format: str) -> str | None:
    """The gold answer string for `value` stored in `answer_format`; None when no answer can be read from it."""
    check_answer_format(answer_format, "answer_format")
    return ANSWER_FORMATS[answer_format](value)
