"""Integer answers cannot be faked with floats (issue 24, item 3): the float tolerance applies only when the expected
value is a float, in stdin/stdout tests, call-based (`fn_name`) tests, `make eval` and `make score` alike; every
correct float within the tolerance still passes."""

from __future__ import annotations

import pytest
from conftest import skip_unless_required

from drgrpo.evaluation.code import grade_code_completions
from rewards import RewardArguments, get_reward_funcs
from rewards.code import NamespacesUnavailable
from rewards.code.compare import integer_token, outputs_match, tokens_equal, values_equal
from rewards.scoring import score_rows

PRODUCT = 999999937 * 999999929  # 999999866000004473, 18 digits, beyond float precision
TOL = 1e-6

# (got, expected): a wrong integer in float or exponent form, against an expected integer. All misses.
FAKE_INTEGERS = [
    (repr(float(PRODUCT)), str(PRODUCT)),  # the product computed in floating point: '9.999998660000045e+17'
    (f"{float(PRODUCT):.1f}", str(PRODUCT)),  # the same, printed without exponent: off by 4473 - 4608
    (f"{PRODUCT:.7g}", str(PRODUCT)),  # seven significant digits in exponent form
    (f"{PRODUCT:e}", str(PRODUCT)),
    ("987654000.0", "987654321"),  # a 9-digit answer off by 321, printed with .0 (within 1e-6 relative)
    ("1e18", "1000000000000000007"),
    ("1e18", "1000000000000000000"),  # an exponent form never matches an integer, even when equal
    ("3.0000029", "3"),
    ("3.0000001", "3"),
    ("2.9999999", "3"),
]

# (got, expected): right answers. All matches.
RIGHT = [
    (str(PRODUCT), str(PRODUCT)),
    ("0" + str(PRODUCT), "+" + str(PRODUCT)),
    ("42.0", "42"),  # the documented choice: a decimal that is exactly the integer
    ("42.000", "42"),
    ("-0.0", "0"),
    ("3.0000001", "3.0"),  # an expected float: within tolerance
    ("0.333333", "0.3333333333"),
    ("1000001.0", "1000000.0"),  # relative: |d| = 1 <= 1e-6 * 1e6
    ("1e18", "1000000000000000000.0"),
    ("2", "2.0"),
    ("2.5e-7", "0.00000025"),
]


@pytest.mark.parametrize(("got", "expected"), FAKE_INTEGERS)
def test_a_float_form_of_a_wrong_integer_is_a_miss(got, expected):
    assert not tokens_equal(got, expected, TOL)
    assert not outputs_match(f"{got}\n", f"{expected}\n", TOL)


@pytest.mark.parametrize(("got", "expected"), RIGHT)
def test_right_answers_still_match(got, expected):
    assert tokens_equal(got, expected, TOL)


def test_integer_token():
    assert [integer_token(t) for t in ("42", "42.0", "-7.", "4.2e1", "42.5", "+0.000")] == [
        "42",
        "42",
        "-7",
        None,
        None,
        "+0",
    ]


def test_call_results_follow_the_same_rule():
    assert not values_equal(1e18, 1000000000000000007)
    assert not values_equal(float(PRODUCT), PRODUCT)
    assert not values_equal(3.0000029, 3)
    assert not values_equal([1, 2.5], [1, 2])
    assert not values_equal(float("inf"), 10**400) and not values_equal(float("nan"), 3)
    assert values_equal(42.0, 42) and values_equal(PRODUCT, PRODUCT) and values_equal(1e18, 10**18)
    assert values_equal(3.0000001, 3.0) and values_equal(3, 3.0000001) and values_equal([0.1 + 0.2], [0.3])


PROGRAM = "```python\n{}\n```"
STDIN_TESTS = {"inputs": ["999999937 999999929\n", "2 21\n"], "outputs": [f"{PRODUCT}\n", "42\n"]}
STDIN_COMPLETIONS = [
    PROGRAM.format("a, b = map(int, input().split())\nprint(a * b)"),  # exact
    PROGRAM.format("a, b = map(float, input().split())\nprint(a * b)"),  # floating point, exponent form
    PROGRAM.format("a, b = map(float, input().split())\nprint(f'{a * b:.1f}')"),  # floating point, no exponent
    PROGRAM.format("a, b = map(int, input().split())\nprint(f'{a * b:.7g}')"),
    PROGRAM.format("a, b = map(int, input().split())\nprint(a * b / 1)"),  # 42.0 for 42 passes; the big one does not
]
CALL_TESTS = {"fn_name": "product", "inputs": [[999999937, 999999929], [2, 21]], "outputs": [[PRODUCT], [42]]}
CALL_COMPLETIONS = [
    PROGRAM.format("def product(a, b):\n    return a * b"),
    PROGRAM.format("def product(a, b):\n    return float(a) * b"),
    PROGRAM.format("def product(a, b):\n    return a * b + 0.0000029"),
    PROGRAM.format("def product(a, b):\n    return 1e18 if a > 100 else 42"),
]
FLOAT_TESTS = {"inputs": ["1 3\n"], "outputs": ["0.3333333333\n"]}
FLOAT_COMPLETIONS = [
    PROGRAM.format("a, b = map(int, input().split())\nprint(a / b)"),
    PROGRAM.format("a, b = map(int, input().split())\nprint(round(a / b, 6))"),
    PROGRAM.format("print('3.333333e-01')"),
    PROGRAM.format("print(0.3334)"),  # outside the tolerance
]


@pytest.fixture(scope="module")
def settings() -> RewardArguments:
    return RewardArguments(code_timeout=5.0, code_num_workers=2, code_scoring="all")


@pytest.fixture(scope="module")
def code_reward(settings):
    try:
        (reward,) = get_reward_funcs(["code"], settings)
    except NamespacesUnavailable as exc:
        skip_unless_required("namespaces", f"no namespaces on this kernel: {exc}")
    return reward


def test_the_code_reward_refuses_fake_integers_in_both_test_formats(code_reward):
    stdin = code_reward(completions=STDIN_COMPLETIONS, verification_info=[STDIN_TESTS] * len(STDIN_COMPLETIONS))
    assert stdin == [1.0, 0.0, 0.0, 0.0, 0.0]
    calls = code_reward(completions=CALL_COMPLETIONS, verification_info=[CALL_TESTS] * len(CALL_COMPLETIONS))
    assert calls == [1.0, 0.0, 0.0, 0.0]
    floats = code_reward(completions=FLOAT_COMPLETIONS, verification_info=[FLOAT_TESTS] * len(FLOAT_COMPLETIONS))
    assert floats == [1.0, 1.0, 1.0, 0.0]


def test_make_eval_and_make_score_judge_the_same_way(code_reward, settings):
    verdicts = [v for v, _ in grade_code_completions(STDIN_COMPLETIONS[:2], [STDIN_TESTS] * 2, settings)]
    assert verdicts == ["correct", "incorrect"]
    rows = [{"completion": c, "verification_info": CALL_TESTS} for c in CALL_COMPLETIONS]
    results = score_rows(rows, [code_reward], answer_column="verification_info")
    assert [r["code"] for r in results] == [1.0, 0.0, 0.0, 0.0]
