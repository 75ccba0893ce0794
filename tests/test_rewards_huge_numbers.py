"""rewards.magnitude: answers whose evaluation would build astronomically large numbers are refused before sympy
evaluates them (a counted grading error, score 0); ordinary powers, factorials and sums still grade right. And
math-verify's own `signal.alarm` timeouts stay off, so they never replace or cancel the grader's deadline.

The bounds are hand-computed: log10 of 2^10 is 10 log10 2 = 3.0103 (1024 has 4 digits); 2^{2^{2^{2^{2}}}} is
2^65536, log10 = 65536 log10 2 = 19728.3 (19,729 digits).
"""

from __future__ import annotations

import math
import signal
import time

import pytest
import sympy
from test_rewards_adversarial import TOWER, run_python

from rewards.equivalence import parse_answer
from rewards.grading import Grader
from rewards.magnitude import MAX_DIGITS, digits_bound, too_large


def parsed(latex: str):
    (value, *_) = parse_answer(latex)
    assert isinstance(value, sympy.Basic), latex
    return value


@pytest.mark.parametrize(
    ("latex", "bound"),
    [
        ("1024", math.log10(1024)),
        ("2^{10}", 10 * math.log10(2)),  # the exponent's own 1 digit is smaller
        ("10^{100}", 100.0),
        ("2^{2^{2^{2^{2}}}}", 65536 * math.log10(2)),
        ("\\frac{1}{2^{10}}", 10 * math.log10(2)),  # a denominator counts as much as a numerator
        ("10!", 10 * math.log10(10)),  # n! <= n^n: 10 digits bound the 7 of 3,628,800
        ("\\sum_{k=1}^{100} k", 2 * (2 + math.log10(2))),  # 100 terms of at most 100: <= 2 * 10^2 * 10^2
    ],
)
def test_digits_bound_hand_checked(latex, bound):
    assert digits_bound(parsed(latex)) == pytest.approx(bound, rel=1e-9)


@pytest.mark.parametrize(
    "latex",
    [
        "10^{10^{10^{10}}}",  # the tower that once held an in-process test for over 15 minutes
        "10^{10^{10}}",
        "(10^{10})!",
        "\\frac{1}{2^{10^{10}}}",
        "10^{-10^{10}}",
        "1.5\\times 10^{10^{10}}",
        "2^{2^{20}}",  # 315,653 digits
        "\\binom{10^{10}}{10^{5}}",
        "\\prod_{k=1}^{10^{10}} k",
        "x^{10^{10}}",
    ],
)
def test_astronomical_values_are_too_large(latex):
    assert too_large(parsed(latex))


@pytest.mark.parametrize(
    "latex",
    [
        "2^{2024}",
        "2^{2^{2^{2^{2}}}}",
        "\\frac{3}{4}",
        "2\\sqrt{2}",
        "x^{2} + 1",
        "e^{x^{2}}",
        "1.5\\times 10^{8}",
        "20!",
    ],
)
def test_ordinary_answers_are_not_too_large(latex):
    assert not too_large(parsed(latex)), digits_bound(parsed(latex))
    assert digits_bound(parsed(latex)) <= MAX_DIGITS


def test_ordinary_powers_still_grade_right():
    grader = Grader(timeout=5, num_workers=0)
    completions = ["\\boxed{2^{10}}", "\\boxed{2^{10}}", "\\boxed{2^{2024}}", "\\boxed{10!}", "\\boxed{2^{10}}"]
    golds = ["1024", "1000", "2^{2024}", "3628800", "2^{10}"]
    results = grader.grade(completions, golds)
    assert [(r.status, r.verdict) for r in results] == [("ok", True), ("ok", False), ("ok", True)] + [("ok", True)] * 2


def test_a_tower_is_refused_fast_in_process_and_counted_as_a_failure():
    # In a child process with a hard limit: if the guard broke, the evaluation could run for hours.
    script = (
        "import time\n"
        "from rewards import RewardArguments, get_reward_funcs\n"
        "(reward,) = get_reward_funcs(['accuracy'], RewardArguments(reward_num_workers=0, reward_timeout=30))\n"
        "from rewards.equivalence import verify_answer\n"
        "verify_answer('\\\\frac{1}{2}', '0.5')  # math-verify's grammar loads outside the timing\n"
        "start = time.monotonic()\n"
        f"scores = reward(completions=[{TOWER!r}, '\\\\boxed{{7}}'], answer=['1', '10^{{10^{{10}}}}'])\n"
        "print(time.monotonic() - start < 5, scores, reward.last_report.failed)\n"
    )
    assert run_python(script)[0] == "True [0.0, 0.0] [True, True]"  # a refused gold fails its pair too


def test_math_verify_never_arms_its_own_alarm(monkeypatch):
    """With a timeout, math-verify's `parse` and `verify` call `signal.alarm`, which would cancel the grader's
    sub-second timer (one SIGALRM timer per process): every call of ours passes None."""
    calls = []
    monkeypatch.setattr(signal, "alarm", lambda seconds: calls.append(seconds) or 0)
    grader = Grader(timeout=5, num_workers=0)
    texts = ["\\boxed{\\frac{1}{2}}", "so the answer is $x = 3$.", "\\boxed{2^{10}}", "\\boxed{(1, 2)}"]
    start = time.monotonic()
    results = grader.grade(texts, ["0.5", "3", "1024", "(1, 2)"])
    assert [r.verdict for r in results] == [True, True, True, True], (results, time.monotonic() - start)
    assert calls == []
