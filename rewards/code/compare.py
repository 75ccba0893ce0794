"""Is a program's output right? Token-wise comparison with whitespace normalised and a float tolerance, deep
comparison of call results, and the custom checker hook.

The tolerance applies only where the EXPECTED value is a float (a token with a decimal point or an exponent; a
JSON float). An expected integer is matched exactly, by an integer (`042` is 42), or by a decimal whose fraction is
all zeros and whose value is exactly that integer (`42.0`, `42.000`: what `print(a / b)` writes for a right answer;
it can never be a different integer). An exponent form (`1e18`, `1.234568e+17`) or any other fraction never matches
an integer: a float tolerance on 10^18 accepts answers that are off by thousands, and a policy under RL finds that
on any problem with large integer answers. Call results follow the same rule: an expected int is matched by an
equal int, or by a float that is exactly that integer (`42.0` for 42, never `1e18` for 1000000000000000007 nor
`3.0000029` for 3).

The output is the program's, so anything up to the sandbox's output limit (1 MiB by default), and it is compared in
the trainer: every step here is linear in its length (issue 52). The number patterns are matched whole
(`fullmatch`) and their alternatives can never match the same text two ways, so a failing match gives back each
character once (before, a run of 20,000 digits followed by a letter took 11-21 s, quadratic, and a 600 KB output
held a training step for hours); a token longer than `MAX_NUMBER_CHARS` is compared as a string, exactly; and
`outputs_match` takes a deadline, past which it raises `ComparisonTimeout` (the code reward counts it and fails
the rest of that completion's tests).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from typing import Any

# Matched with `fullmatch`. A number is digits with an optional fraction (`12`, `12.`, `12.5`) or a bare fraction
# (`.5`), then an optional exponent: `\d+` is followed by a point, an exponent or the end, never a digit, so no digit
# can be taken by two parts (the old `\d+\.?\d*` split a run of n digits n ways, and tried each on a failure).
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER = re.compile(r"[+-]?\d+")
# A decimal with an all-zero fraction and no exponent (`42.0`, `-7.`, `0.000`): exactly the integer before its point.
_INTEGRAL_DECIMAL = re.compile(r"([+-]?\d+)\.0*")
# Tokens longer than this are compared as strings only: no number a problem expects is written with more characters
# (an expected integer of 10,000 digits still matches the same digits), and nothing superlinear can hide in parsing.
MAX_NUMBER_CHARS = 10_000


class ComparisonTimeout(TimeoutError):
    """The comparison of a program's output ran past its deadline (`outputs_match(..., deadline=...)`)."""


def numbers_close(a: float, b: float, tolerance: float) -> bool:
    """|a - b| <= tolerance * max(1, |b|): the absolute-or-relative error rule of Codeforces/ICPC checkers (e.g.
    testlib's `doubleCompare`), with `b` the expected value."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= tolerance * max(1.0, abs(b))


def tokens_equal(got: str, expected: str, tolerance: float) -> bool:
    """Equal tokens; against an expected integer, the same integer (`integer_token`: `007`, `7.0`; never `7e0` or
    `7.0000001`); against an expected float, any number within `tolerance` (see the module docstring)."""
    if got == expected:
        return True
    if len(got) > MAX_NUMBER_CHARS or len(expected) > MAX_NUMBER_CHARS:
        return False
    if not (_NUMBER.fullmatch(got) and _NUMBER.fullmatch(expected)):
        return False
    if _INTEGER.fullmatch(expected):
        integer = integer_token(got)
        return integer is not None and integer_key(integer) == integer_key(expected)
    return numbers_close(float(got), float(expected), tolerance)  # float() of a huge token is inf, no error


def integer_token(token: str) -> str | None:
    """The integer a number token writes exactly, as digits: itself for an integer, `42` for `42.0`; None for a
    fraction or an exponent form, which can only approximate an integer."""
    if _INTEGER.fullmatch(token):
        return token
    match = _INTEGRAL_DECIMAL.fullmatch(token)
    return match.group(1) if match else None


def integer_key(token: str) -> str:
    """An integer token in canonical form (no '+', no leading zeros, '0' for '-0'), compared as a string: int() of
    more than 4300 digits raises ValueError (CPython's int_max_str_digits), and a program may print any number."""
    digits = token.lstrip("+-").lstrip("0") or "0"
    return "-" + digits if token.startswith("-") and digits != "0" else digits


def normalized_lines(text: str) -> list[list[str]]:
    """The non-empty lines of `text` as lists of whitespace-separated tokens (\\r\\n, trailing spaces, blank lines
    and runs of spaces make no difference)."""
    return [line.split() for line in text.splitlines() if line.strip()]


def outputs_match(got: str, expected: str, tolerance: float = 1e-6, deadline: float | None = None) -> bool:
    """Line by line, token by token (see `normalized_lines`, `tokens_equal`), in time linear in the outputs' length.
    `deadline`: a `time.monotonic()` value past which `ComparisonTimeout` is raised (checked line by line).

    The work done token by token is bounded by the expected output: an output with another number of tokens is
    refused after one `split()` (in C), before any Python-level loop over what the program printed."""
    expected_lines = normalized_lines(expected)
    if len(got.split()) != sum(len(tokens) for tokens in expected_lines):
        return False
    got_lines = normalized_lines(got)
    if len(got_lines) != len(expected_lines):
        return False
    for got_tokens, expected_tokens in zip(got_lines, expected_lines, strict=True):
        if deadline is not None and time.monotonic() > deadline:
            raise ComparisonTimeout("the comparison of the program's output ran past its deadline")
        if got_tokens == expected_tokens:
            continue
        if len(got_tokens) != len(expected_tokens):
            return False
        if not all(tokens_equal(g, e, tolerance) for g, e in zip(got_tokens, expected_tokens, strict=True)):
            return False
    return True


def values_equal(got: Any, expected: Any, tolerance: float = 1e-6) -> bool:
    """Deep equality of JSON values; an expected int exactly (an equal int, or a float that is exactly it), an
    expected float within `tolerance`; a bool equals only a bool; tuples came as lists."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return got is expected
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        if isinstance(expected, int):
            if isinstance(got, float):
                return math.isfinite(got) and got.is_integer() and int(got) == expected
            return got == expected
        try:
            return numbers_close(float(got), float(expected), tolerance)
        except OverflowError:  # an int beyond float range is no float's neighbour
            return False
    if isinstance(expected, list) and isinstance(got, list):
        pairs = zip(got, expected, strict=False)
        return len(got) == len(expected) and all(values_equal(g, e, tolerance) for g, e in pairs)
    if isinstance(expected, dict) and isinstance(got, dict):
        return got.keys() == expected.keys() and all(values_equal(got[k], expected[k], tolerance) for k in expected)
    return got == expected


def call_matches(got: Any, expected: Any, tolerance: float = 1e-6) -> bool:
    """A call's result against the expected value, or against the one element APPS wraps its expected values in."""
    if values_equal(got, expected, tolerance):
        return True
    return isinstance(expected, list) and len(expected) == 1 and values_equal(got, expected[0], tolerance)


Checker = Callable[[str, str, str], Any]
