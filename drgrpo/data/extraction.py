"""Gold answers out of worked solutions: `answer_extraction` ('none', 'boxed', 'gsm8k')."""

from __future__ import annotations

from typing import Any

ANSWER_EXTRACTIONS = ("none", "boxed", "gsm8k")


def check_answer_extraction(value: str, where: str) -> None:
    if value not in ANSWER_EXTRACTIONS:
        raise ValueError(f"{where}={value!r} is unknown. Choose one of: {', '.join(ANSWER_EXTRACTIONS)}.")


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed x`) in `text`, or None.

    Braces are matched, so nested groups such as `\\boxed{\\frac{1}{2}}` come out whole. Follows the MATH benchmark's
    `last_boxed_only_string` + `remove_boxed` (Hendrycks et al. 2021, github.com/hendrycks/math, math_equivalence).
    """
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    command = "\\boxed" if text.startswith("\\boxed", start) else "\\fbox"
    rest = text[start + len(command) :]
    if rest.startswith(" "):  # `\boxed 5`: the answer runs to the next `$` or the end
        answer = rest[1:].split("$")[0].strip()
        return answer or None
    rest = rest.lstrip()
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, char in enumerate(rest):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return rest[1:i].strip()
    return None  # unbalanced braces


def gsm8k_final_answer(text: str) -> str | None:
    """The final answer of a GSM8K solution: the text after the last `####`, thousands commas removed, or None.

    GSM8K (Cobbe et al. 2021, github.com/openai/grade-school-math) ends each solution with `#### <number>`.
    """
    if "####" not in text:
        return None
    answer = text.rsplit("####", 1)[1].strip().replace(",", "")
    return answer or None


def extract_answer(value: Any, extraction: str) -> str:
    """The gold answer string of a raw answer-column value; "" when there is none (it is then reported)."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # csv/parquet readers turn integer answers with gaps into floats: 72.0 -> "72"
    text = str(value).strip()
    if extraction == "boxed":
        return last_boxed(text) or ""
    if extraction == "gsm8k":
        return gsm8k_final_answer(text) or ""
    return text
