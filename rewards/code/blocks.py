"""The program of a completion (its last fenced code block) and the `code_format` check."""

from __future__ import annotations

import re

from rewards.code.testcases import LANGUAGE_ALIASES

# ```lang\n ... ``` : the tag is optional; the body runs to the next fence.
_BLOCK = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)


def _aliases(language: str) -> tuple[str, ...]:
    return LANGUAGE_ALIASES.get(language.lower(), (language.lower(),))


def answer_part(text: str) -> str:
    """The text after the reasoning: what follows the last `</think>`, or everything."""
    return text.rsplit("</think>", 1)[1] if "</think>" in text else text


def extract_program(text: str, language: str = "python") -> str | None:
    """The last closed ```<language> block of the answer (aliases: py, python3), else the last untagged block."""
    blocks = _BLOCK.findall(answer_part(text or ""))
    wanted = _aliases(language)
    tagged = [body for tag, body in blocks if tag.lower() in wanted]
    if tagged:
        return tagged[-1]
    untagged = [body for tag, body in blocks if not tag]
    return untagged[-1] if untagged else None


def code_format_score(text: str, language: str = "python") -> float:
    """1.0 if the answer has exactly one fenced block, closed and tagged with `language`, else 0.0 (as open-r1's
    `code_format` reward, without its <think>/<answer> tags, which the `format` reward checks)."""
    answer = answer_part(text or "")
    if answer.count("```") != 2:
        return 0.0
    blocks = _BLOCK.findall(answer)
    return float(len(blocks) == 1 and blocks[0][0].lower() in _aliases(language) and bool(blocks[0][1].strip()))
