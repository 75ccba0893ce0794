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
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_INTEGER = re.compile(r"^[+-]?\d+$")
# A decimal with an all-zero fraction and no exponent (`42.0`, `-7.`, `0.000`): exactly the integer before its point.
_INTEGRAL_DECIMAL = re.compile(r"^([+-]?\d+)\.0*$")


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
    if not (_NUMBER.match(got) and _NUMBER.match(expected)):
        return False
    if _INTEGER.match(expected):
        integer = integer_token(got)
        return integer is not None and integer_key(integer) == integer_key(expected)
    return numbers_close(float(got), float(expected), tolerance)  # float() of a huge token is inf, no error


def integer_token(token: str) -> str | None:
    """The integer a number token writes exactly, as digits: itself for an integer, `42` for `42.0`; None for a
    fraction or an exponent form, which can only approximate an integer."""
    if _INTEGER.match(token):
        return token
    match = _INTEGRAL_DECIMAL.match(token)
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
