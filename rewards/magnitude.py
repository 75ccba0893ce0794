"""A cheap bound on how many digits evaluating a parsed answer can produce, so that a power tower is refused before
sympy evaluates it.

math-verify parses `10^{10^{10^{10}}}` lazily, then its comparison calls `doit()`, and sympy evaluates
`Integer ** Integer` exactly: `10^{10^{10}}` alone has 10^10 digits (4 GB). A deadline stops that only where the
interpreter gets a chance to run the alarm's handler; the worker pool's hard kill covers the rest, but with the pool
off (`reward_num_workers: 0`, tests, scoring on a laptop) one such answer can hold the process for as long as the
big-integer arithmetic takes. `digits_bound` walks the unevaluated tree (microseconds) and returns an upper bound on
the decimal digits of any number the evaluation builds (numerators and denominators: `10^{-10^{10}}` is as big);
`rewards.equivalence` refuses a pair whose gold or answer exceeds `MAX_DIGITS`, as a counted grading error.
"""

from __future__ import annotations

import math
from typing import Any

# Far above any competition answer (2^{2024} has 610 digits), far below what costs time: one big-integer operation on
# 100,000 digits takes milliseconds, so the deadline's alarm gets its turn between operations.
MAX_DIGITS = 100_000
# A symbol (or pi, e, i) counts as about 3 (log10 3 ~ 0.5); inside a sum or product its bound variable counts as
# large as its limits.
_ATOM_DIGITS = 0.5
_LOG10_2 = math.log10(2)
_LOG10_E = math.log10(math.e)
# 10 ** 300 digits is already "infinitely many": stop before floats overflow.
_HUGE = 300.0


class AnswerTooLarge(ValueError):
    """An answer (or gold) whose evaluation would build a number of more than `MAX_DIGITS` digits."""


def _count_digits(count: float) -> float:
    """`10 ** digits`: a bound on a value from a bound on its digits; inf when that is astronomically large."""
    return math.inf if count > _HUGE else 10.0**count


def _integer_digits(value: int) -> float:
    """log10 |value| (exact for big integers too: `math.log10` reads them whole); 0 for 0."""
    value = abs(int(value))
    return math.log10(value) if value else 0.0


def digits_bound(expr: Any, bound_symbols: dict | None = None) -> float:
    """An upper bound on log10 of the largest numerator or denominator that evaluating `expr` (a sympy value, as
    math-verify parses it, unevaluated) builds, every subexpression included; inf when it is astronomically large.

    Rules, each an upper bound: an integer or rational its digits; a float its exponent; a sum the largest term plus
    log10 of the number of terms; a product the sum of its factors; `b ** e` at most |e| times the digits of b (and
    the digits of e itself, which is evaluated first); `n!` at most n log10 n; `binomial(n, k)` at most n log10 2;
    `exp(x)` as e ** x; a sum or product over k = a..b as (b - a + 1) terms with k as large as its limits; anything
    else the largest of its arguments.
    """
    env = bound_symbols or {}
    if getattr(expr, "is_Rational", False):  # integers too
        return max(_integer_digits(expr.p), _integer_digits(expr.q))
    if getattr(expr, "is_Float", False):  # mantissa * 2**exponent, the mantissa `bits` long (0 for inf and nan)
        _, mantissa, exponent, bits = expr._mpf_
        return abs(exponent + bits) * _LOG10_2 + 1 if mantissa else 1.0
    if getattr(expr, "is_Symbol", False):
        return env.get(expr, _ATOM_DIGITS)
    args = getattr(expr, "args", None)
    if args is None and hasattr(expr, "__iter__") and not isinstance(expr, str):  # a matrix
        args = tuple(expr)
    if not args:
        return _ATOM_DIGITS if getattr(expr, "is_number", False) or getattr(expr, "is_Atom", False) else 0.0
    name = type(expr).__name__
    if getattr(expr, "is_Pow", False) and len(args) == 2:
        exponent_digits = digits_bound(args[1], env)
        return max(exponent_digits, _count_digits(exponent_digits) * max(digits_bound(args[0], env), _LOG10_2))
    if name == "exp":
        return _count_digits(digits_bound(args[0], env)) * _LOG10_E
    if name in ("factorial", "factorial2", "subfactorial", "gamma", "RisingFactorial", "FallingFactorial"):
        n = _count_digits(max(digits_bound(a, env) for a in args))
        return n * math.log10(max(n, 2.0))
    if name == "binomial":
        return _count_digits(digits_bound(args[0], env)) * _LOG10_2 + 1
    if name in ("Sum", "Product") and len(args) >= 2:
        return _sum_or_product_bound(name, args, env)
    terms = [digits_bound(a, env) for a in args]
    if getattr(expr, "is_Add", False):
        return max(terms) + math.log10(len(terms))
    if getattr(expr, "is_Mul", False):
        return sum(terms)
    return max(terms)


def _sum_or_product_bound(name: str, args: tuple, env: dict) -> float:
    """`Sum(term, (k, a, b), ...)` / `Product(...)`: k counts as large as its limits, (b - a + 1) <= 2 * 10^digits
    terms."""
    inner, count = dict(env), 0.0
    for limit in args[1:]:
        parts = getattr(limit, "args", ())
        if len(parts) != 3:
            return math.inf
        size = max(digits_bound(parts[1], env), digits_bound(parts[2], env))
        inner[parts[0]] = size
        count += size + _LOG10_2
    term = digits_bound(args[0], inner)
    if name == "Sum":
        return max(term, count) + count
    return max(count, _count_digits(count) * term)


def too_large(expr: Any, limit: float = MAX_DIGITS) -> bool:
    """Whether evaluating `expr` may build a number of more than `limit` digits (`digits_bound`); a tree too deep to
    walk counts as too large."""
    try:
        return digits_bound(expr) > limit
    except RecursionError:
        return True
