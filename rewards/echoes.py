"""Echoes: an answer that restates the question's arithmetic instead of doing it is not credited.

math-verify evaluates what it reads, so `17 + 21` equals a gold 38 and `5 is indeed 5 + 8.` equals 13: a policy is
paid for copying the sum it was asked to compute (SmolLM2-135M-Instruct learned it on one-digit sums: 10 of 59
credited samples were echoes). The rule, applied when the gold is a number (it parses to an integer, a fraction or a
decimal: `38`, `0.5`, `\\frac{1}{2}`), to the value an answer states:

- the values an answer states are itself or, for an equation or a chain `a = b = c`, its sides without a variable;
  one of them that is a number is an answer: `17 + 21 = 38` and `h + k = (-3) + 2 = -1` state a number (credited),
  `1 + 29 = 29 + 1` and `x = 17 + 21` do not;
- a value that is a sum or difference (of anything without a variable), or a product of numbers that is more
  than one fraction, is an unevaluated expression, not a number: `17 + 21`, `5 + 8`, `(9+1)`, `6 \\cdot 7`,
  `(1/2) * (4/3)`, `\\frac{1}{2} + \\frac{1}{4}` score 0. A number in a standard form of its own is not: a fraction
  (`\\frac{1}{2}`, `3/4`, `2/3`, `17 \\div 21`, even unreduced: one number over another), a negative number, a
  percentage, scientific notation `1.5 \\times 10^{3}`, a power or a root, and a product with at most one plain
  number (`2\\sqrt{2}`);
- when the question is known (the `prompts` TRL passes to rewards, the evaluator's problem), a value that is not a
  plain number and is built only from the question's own numbers is an echo too: `2^{10}` for "What is 2^10?",
  `\\sqrt{81}` for "the square root of 81", `5!` for "5 factorial". The first rule needs no question.

A gold that is not a number (`\\sqrt{8}`, `2^{10}`, `x + 1`) is compared as math-verify compares it: `2\\sqrt{2}`
still equals `\\sqrt{8}`. `question_numbers` is string work for the trainer process; `is_echo` reads the sympy value
math-verify parsed and runs in the verifier processes (`rewards.equivalence`).
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from typing import Any

# A number in a question as a whole token (`17`, `-3`, `2.5`, `1,000`), not the digits of a word (`x2`, `H2O`).
_QUESTION_NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?![\w]|\.\d)")
# At most this many characters of a question are read: a prompt is short; a pathological one must stay cheap.
_MAX_QUESTION_CHARS = 20000


def question_text(prompt: Any) -> str:
    """The question inside a prompt: a text prompt as it is, a conversational one as its user messages (a system
    prompt's numbers are not the question's)."""
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, dict):
        prompt = [prompt]
    if isinstance(prompt, (list, tuple)):
        parts = []
        for message in prompt:
            if isinstance(message, dict) and message.get("role", "user") == "user":
                content = message.get("content")
                parts.append(content if isinstance(content, str) else str(content or ""))
        return "\n".join(parts)
    return str(prompt)


def question_numbers(prompt: Any) -> tuple[str, ...]:
    """The distinct numbers of a prompt's question as exact decimal strings, sorted (`What is 17 + 21?` -> `('17',
    '21')`); () when there is no question. Hashable and small: it travels with each job to the verifier processes."""
    text = question_text(prompt)[:_MAX_QUESTION_CHARS]
    numbers = {str(Fraction(m.group().replace(",", ""))) for m in _QUESTION_NUMBER.finditer(text)}
    return tuple(sorted(numbers))


def is_plain_number(value: Any) -> bool:
    """Whether a sympy value is one number (integer, rational or float): what a numeric gold parses to."""
    return bool(getattr(value, "is_Number", False))


def stated_values(value: Any) -> list[Any]:
    """The values an answer states: itself, or the sides of an equation or of a chain of equations that hold no
    variable (`x = 17 + 21` states `17 + 21`; `a + b = 3 + 4 = 7` states `3 + 4` and 7). A chain parses as
    And(Eq(a, b), Eq(b, c)) with its equations in sympy's order, not the text's, so every side counts."""
    sides, stack, budget = [], [value], 256
    while stack and budget:
        budget -= 1
        node = stack.pop()
        args = getattr(node, "args", ())
        if (getattr(node, "is_Relational", False) and len(args) == 2) or (type(node).__name__ == "And" and args):
            stack.extend(args)
        elif not getattr(node, "free_symbols", None):
            sides.append(node)
    return sides


def _is_reciprocal(term: Any) -> bool:
    """The reciprocal of a plain number: how sympy keeps the divisor of an unevaluated quotient (`2/3` is
    Mul(2, Pow(3, -1)))."""
    args = getattr(term, "args", ())
    return bool(getattr(term, "is_Pow", False) and is_plain_number(args[0]) and args[1] == -1)


def is_unevaluated_arithmetic(value: Any) -> bool:
    """A sum or difference of anything without a variable, or a product of numbers that is more than one fraction:
    `17 + 21`, `3 - 5`, `6 \\cdot 7`, `(1/2) * (4/3)`, `\\frac{1}{2} + \\frac{1}{3}`. Not `2/3` (one number over
    another is a fraction), `2\\sqrt{2}`, `1.5 \\times 10^{3}` or `50\\%` (one number times something else)."""
    if getattr(value, "free_symbols", None):
        return False
    if getattr(value, "is_Add", False):
        return True
    if getattr(value, "is_Mul", False):
        numbers = sum(is_plain_number(term) for term in value.args)
        reciprocals = sum(_is_reciprocal(term) for term in value.args)
        return numbers >= 2 or reciprocals >= 2 or numbers + reciprocals >= 3
    return False


@lru_cache(maxsize=1024)
def _question_values(numbers: tuple[str, ...]) -> frozenset:
    return frozenset(Fraction(n) for n in numbers)


def _numbers_in(value: Any) -> set[Fraction] | None:
    """The absolute values of the plain numbers a sympy value is built from; a root's index (`\\sqrt{9}`: the 1/2 of
    9**(1/2)) is not one of them. None when a number cannot be read exactly."""
    found: set[Fraction] = set()
    stack = [value]
    while stack:
        node = stack.pop()
        if is_plain_number(node):
            try:
                found.add(abs(Fraction(str(node))))
            except (ValueError, ZeroDivisionError):
                return None
            continue
        args = getattr(node, "args", ())
        if getattr(node, "is_Pow", False) and len(args) == 2:
            exponent = args[1]
            stack.append(args[0])
            if not (getattr(exponent, "is_Rational", False) and getattr(exponent, "p", 0) == 1):
                stack.append(exponent)
            continue
        stack.extend(args)
    return found


def is_echo(value: Any, question: tuple[str, ...] = ()) -> bool:
    """Whether an answer whose parsed value is `value` restates instead of answering, against a numeric gold (see the
    module docstring): every value it states (`stated_values`) is unevaluated arithmetic, or, with the question's
    numbers known, a non-number built only from them. One stated number is an answer: `17 + 21 = 38` states 38."""
    stated = stated_values(value)
    return bool(stated) and all(_restates(side, question) for side in stated)


def _restates(stated: Any, question: tuple[str, ...]) -> bool:
    if is_plain_number(stated):
        return False
    if is_unevaluated_arithmetic(stated):
        return True
    if not question or getattr(stated, "free_symbols", None):
        return False
    numbers = _numbers_in(stated)
    return bool(numbers) and numbers <= _question_values(question)
