"""Is a program's output right? Token-wise comparison with whitespace normalised and a float tolerance, deep
comparison of call results, and the custom checker hook."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_INTEGER = re.compile(r"^[+-]?\d+$")


def numbers_close(a: float, b: float, tolerance: float) -> bool:
    """|a - b| <= tolerance * max(1, |b|): the absolute-or-relative error rule of Codeforces/ICPC checkers (e.g.
    testlib's `doubleCompare`), with `b` the expected value."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= tolerance * max(1.0, abs(b))


def tokens_equal(got: str, expected: str, tolerance: float) -> bool:
    """Equal tokens; or two numbers, not both integers, within `tolerance` (integers must match exactly: a float
    tolerance on 10^18 would accept wrong answers)."""
    if got == expected:
        return True
    if _NUMBER.match(got) and _NUMBER.match(expected):
        if _INTEGER.match(got) and _INTEGER.match(expected):
            return integer_key(got) == integer_key(expected)
        return numbers_close(float(got), float(expected), tolerance)  # float() of a huge token is inf, no error
    return False


def integer_key(token: str) -> str:
    """An integer token in canonical form (no '+', no leading zeros, '0' for '-0'), compared as a string: int() of
    more than 4300 digits raises ValueError (CPython's int_max_str_digits), and a program may print any number."""
    digits = token.lstrip("+-").lstrip("0") or "0"
    return "-" + digits if token.startswith("-") and digits != "0" else digits


def normalized_lines(text: str) -> list[list[str]]:
    """The non-empty lines of `text` as lists of whitespace-separated tokens (\\r\\n, trailing spaces, blank lines
    and runs of spaces make no difference)."""
    return [line.split() for line in text.splitlines() if line.strip()]


def outputs_match(got: str, expected: str, tolerance: float = 1e-6) -> bool:
    """Line by line, token by token (see `normalized_lines`, `tokens_equal`)."""
    got_lines, expected_lines = normalized_lines(got), normalized_lines(expected)
    if len(got_lines) != len(expected_lines):
        return False
    for got_tokens, expected_tokens in zip(got_lines, expected_lines, strict=True):
        if len(got_tokens) != len(expected_tokens):
            return False
        if not all(tokens_equal(g, e, tolerance) for g, e in zip(got_tokens, expected_tokens, strict=True)):
            return False
    return True


def values_equal(got: Any, expected: Any, tolerance: float = 1e-6) -> bool:
    """Deep equality of JSON values; floats within `tolerance`; a bool equals only a bool; tuples came as lists."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return got is expected
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        if isinstance(expected, int) and isinstance(got, int):
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
