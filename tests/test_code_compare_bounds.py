"""Comparing a program's output is linear and bounded (issue 52, the fifth red team's A09): the trainer compares what
a program printed, anything up to the sandbox's output limit (1 MiB), and before the fix the number pattern
backtracked quadratically on a run of digits followed by a letter (20,000 digits: 11-21 s; a 600 KB output held a
step for hours), and nothing bounded the comparison of one completion.

The long-output checks run in a child process under a guard of GUARD_S, thousands of times what they take now: on
the code before the fix a 1 MiB token takes hours, so the guard, not the machine's speed, decides that they fail.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rewards.code import compare

ROOT = Path(__file__).resolve().parents[1]
GUARD_S = 60  # each child below finishes in well under a second now; before the fix, in hours

ONE_MIB_TOKENS = """
import json
from rewards.code.compare import outputs_match
digits = "1" * (1 << 20)
print(json.dumps([
    outputs_match(digits + "x", "5"),                  # A09: a run of digits, then a letter
    outputs_match(digits + "x", digits + "x"),         # the same text: equal
    outputs_match("7 " + digits + "x", "7 5"),         # the token count matches, the long token is the second
    outputs_match("0" + digits, digits),               # longer than MAX_NUMBER_CHARS: a string, exactly
    outputs_match("9" * (600 << 10) + "a", "1.5"),     # 600 KB, against an expected float
]))
"""

# The code reward as the trainer calls it, its sandbox replaced by a program that printed one 1 MiB token per test.
REWARD = """
import json
from rewards.code import CodeRewardArguments
from rewards.code.reward import CodeReward
from rewards.code.sandbox import RunResult
from rewards.report import RewardReport

def score(output, completions, tests, checker=None, **settings):
    reward = CodeReward(CodeRewardArguments(**settings), checker)
    reward.sandbox.run_many = lambda jobs: [RunResult("ok", 0, output, b"", 0.1) for _ in jobs]
    report = RewardReport(completions)
    texts = ["```python\\nprint(5)\\n```"] * completions
    scores = reward(texts, report=report, verification_info=[tests] * completions)
    counters = report.counters
    return {"scores": scores, "check_timeouts": counters["check_timeouts"], "errors": counters["check_errors"]}
"""
THROUGH_THE_REWARD = (
    REWARD
    + """
tests = [{"input": "", "output": "5"}, {"input": "", "output": "7"}]
print(json.dumps(score(b"1" * (1 << 20) + b"x", 1, tests)))
"""
)


def run_guarded(code: str) -> str:
    """`code`'s standard output, run in a child process importing this tree; fails the test past GUARD_S."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=GUARD_S,
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"comparing a 1 MiB output did not finish within {GUARD_S} s: it is not linear in its length")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_a_1_mib_token_is_compared_in_linear_time():
    assert run_guarded(ONE_MIB_TOKENS) == "[false, true, false, false, false]"


def test_the_code_reward_compares_a_1_mib_output_without_stalling():
    assert run_guarded(THROUGH_THE_REWARD) == '{"scores": [0.0], "check_timeouts": 0, "errors": 0}'


def test_the_number_rules_hold_up_to_the_length_where_tokens_become_strings():
    tokens_equal = compare.tokens_equal
    assert tokens_equal("007", "7", 1e-6) and tokens_equal("7.000", "7", 1e-6) and tokens_equal(".5", "0.50", 1e-6)
    assert not tokens_equal("7e0", "7", 1e-6) and not tokens_equal("1.2.3", "1.2", 1e-6)
    assert not tokens_equal("12x", "12", 1e-6) and not tokens_equal("1" * 50 + "x", "1" * 50, 1e-6)
    long = "1" * (compare.MAX_NUMBER_CHARS - 1)
    assert tokens_equal("0" + long, long, 1e-6)  # at the limit: still a number, leading zero and all
    assert not tokens_equal("00" + long, "1" + long, 1e-6)  # past it: compared as the strings they are
    assert tokens_equal("1" + long, "1" + long, 1e-6)


def test_a_comparison_past_its_deadline_raises_instead_of_going_on():
    text = "\n".join(["3.0"] * 1000)
    assert compare.outputs_match(text, "\n".join(["3"] * 1000), deadline=time.monotonic() + 60)
    with pytest.raises(compare.ComparisonTimeout):
        compare.outputs_match(text, "\n".join(["3"] * 1000), deadline=time.monotonic() - 1)


SLOW_CHECKER = (
    REWARD
    + """
import threading

def spin(test_input, expected, output):  # a checker that never returns (trusted code, reading untrusted output)
    while True:
        pass

tests = [{"input": "", "output": "5"}] * 3
on_main_thread = score(b"5", 2, tests, spin, code_check_timeout=0.5)
box = []
worker = threading.Thread(target=lambda: box.append(score(b"5", 2, tests, spin, code_check_timeout=0.5)))
worker.start()
worker.join()
print(json.dumps([on_main_thread, box[0]]))
"""
)


def test_a_comparison_past_code_check_timeout_is_a_counted_failure_not_a_stalled_step():
    """A custom checker that never returns, on the trainer's main thread (cut by an alarm) and off it (abandoned):
    each completion's comparison stops at code_check_timeout, its tests fail, and each counts once."""
    expected = {"scores": [0.0, 0.0], "check_timeouts": 2, "errors": 0}
    assert run_guarded(SLOW_CHECKER) == str([expected, expected]).replace("'", '"')
