"""The math accuracy verifier on (gold, completion, expected) cases written for this project, plus its pure parts.

All cases are graded in one batch by one shared grader (in parallel, in worker processes); each case is then its
own test. Expected values are what a careful human grader says, not what math-verify happens to return.
"""

from __future__ import annotations

import pytest

from rewards import Grader, accuracy, extract_answer, get_grader, grade_answer, normalize_gold
from rewards.extract import Answer, answer_variants, completion_text, fast_numeric_verdict, last_boxed, strip_percent

B = "\\boxed"

# (gold, completion, expected verdict)
CASES: list[tuple[str, str, bool]] = [
    # fractions vs decimals
    ("3/4", f"So the answer is ${B}{{0.75}}$.", True),
    ("0.75", f"{B}{{\\frac{{3}}{{4}}}}", True),
    ("\\frac{3}{4}", f"{B}{{\\dfrac{{3}}{{4}}}}", True),
    ("\\frac{3}{4}", f"{B}{{\\frac34}}", True),
    ("\\frac{3}{4}", f"{B}{{3/4}}", True),
    ("\\frac{3}{4}", f"{B}{{0.7}}", False),
    ("\\frac{1}{3}", f"{B}{{0.3333333}}", True),
    ("\\frac{1}{3}", f"{B}{{0.33}}", False),
    ("0.5", f"{B}{{\\frac{{2}}{{4}}}}", True),
    ("-\\frac{1}{3}", f"{B}{{-1/3}}", True),
    ("\\frac{7}{2}", f"{B}{{3\\frac{{1}}{{2}}}}", True),
    ("2.50", f"{B}{{2.5}}", True),
    # percentages
    ("50", f"{B}{{50\\%}}", True),
    ("50", f"{B}{{50.0\\%}}", True),
    ("50", f"{B}{{50 \\%}}", True),
    ("50\\%", f"{B}{{50}}", True),
    ("0.5", f"{B}{{50\\%}}", True),
    ("50", f"{B}{{40\\%}}", False),
    ("12.5", f"The percentage is {B}{{12.5\\%}}", True),
    ("25\\%", f"{B}{{0.25}}", True),
    # units and text around the answer
    ("5", f"{B}{{5\\text{{ cm}}}}", True),
    ("5", f"{B}{{5 \\text{{ meters}}}}", True),
    ("5", f"{B}{{\\text{{5 apples}}}}", True),
    ("18", f"She makes {B}{{\\$18}} every day.", True),
    ("18", f"{B}{{18 \\text{{ dollars}}}}", True),
    ("6", f"{B}{{7\\text{{ cm}}}}", False),
    ("12", "Each box holds 4, so 3 boxes hold 12 apples.", True),
    ("12", "Each box holds 4 apples; there are 12 boxes, so 48 apples.", False),
    # intervals, sets and tuples
    ("(1,2)", f"{B}{{(1, 2)}}", True),
    ("(1,2)", f"{B}{{(2, 1)}}", False),
    ("[1,2)", f"{B}{{[1,2)}}", True),
    ("[1,2)", f"{B}{{[1,2]}}", False),
    ("(-\\infty, 3]", f"{B}{{(-\\infty,3]}}", True),
    ("(-\\infty, 3]", f"{B}{{(-\\infty,3)}}", False),
    ("\\{1,2\\}", f"{B}{{\\{{2, 1\\}}}}", True),
    ("\\{1,2,3\\}", f"{B}{{\\{{1, 2\\}}}}", False),
    ("(3, -4)", f"The point is {B}{{(3,-4)}}", True),
    ("(3, -4)", f"{B}{{(-4,3)}}", False),
    # equations vs values
    ("3", f"{B}{{x = 3}}", True),
    ("x=3", f"{B}{{3}}", True),
    ("x=3", f"{B}{{x=3}}", True),
    ("3", f"{B}{{x = 4}}", False),
    ("y=2x+3", f"{B}{{y=2x+3}}", True),
    ("y=2x+3", f"{B}{{y=3+2x}}", True),
    ("y=2x+3", f"{B}{{y=3x+2}}", False),
    ("x^2+2x+1", f"{B}{{(x+1)^2}}", True),
    # negative numbers
    ("-5", f"{B}{{-5}}", True),
    ("-5", f"{B}{{5}}", False),
    ("-5", "The temperature drops to -5 degrees.", True),
    ("-0.25", f"{B}{{-\\frac{{1}}{{4}}}}", True),
    # thousands separators
    ("10000", f"{B}{{10{{,}}000}}", True),
    ("10000", f"{B}{{10,000}}", True),
    ("10000", f"{B}{{10\\,000}}", True),
    ("10,000", f"{B}{{10000}}", True),
    ("1234567", f"{B}{{1,234,567}}", True),
    ("10000", "The total is 10,000.", True),
    ("10000", f"{B}{{1,000}}", False),
    # degrees
    ("30", f"{B}{{30^\\circ}}", True),
    ("30", f"{B}{{30^{{\\circ}}}}", True),
    ("30", f"{B}{{30°}}", True),
    ("30^\\circ", f"{B}{{30}}", True),
    ("45", f"{B}{{30^\\circ}}", False),
    # pi and square roots
    ("2\\pi", f"{B}{{2\\pi}}", True),
    ("\\frac{\\pi}{2}", f"{B}{{\\pi/2}}", True),
    ("\\pi", f"{B}{{3.14}}", False),
    ("2\\sqrt{2}", f"{B}{{\\sqrt{{8}}}}", True),
    ("\\sqrt{2}", f"{B}{{2^{{1/2}}}}", True),
    ("\\frac{\\sqrt{3}}{2}", f"{B}{{\\frac{{1}}{{2}}\\sqrt{{3}}}}", True),
    ("\\sqrt{2}", f"{B}{{\\sqrt{{3}}}}", False),
    ("3\\sqrt{2}", f"{B}{{\\sqrt{{18}}}}", True),
    # multiple boxed answers: the last one wins
    ("1", f"First {B}{{2}}, wait, no: {B}{{1}}", True),
    ("2", f"First {B}{{2}}, wait, no: {B}{{1}}", False),
    ("7", f"{B}{{3}} ... {B}{{5}} ... final {B}{{7}}", True),
    ("4", f"{B}{{4}} and then an unclosed {B}{{5", True),
    # answer tags (R1 template)
    ("5", "<think>2+3</think> <answer>5</answer>", True),
    ("5", "<think>2+3</think> <answer>The answer is 5.</answer>", True),
    ("5", "<think>2+3</think> <answer>6</answer>", False),
    ("\\frac{1}{2}", "<think>half</think><answer>$\\frac{1}{2}$</answer>", True),
    ("0.5", f"<think>x</think><answer>{B}{{\\frac12}}</answer>", True),
    # GSM8K golds (#### N) and GSM8K-style completions
    ("Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips.\n#### 72", f"{B}{{72}}", True),
    ("Weng earns 12/60 = 0.2 per minute.\n#### 10", "So she earned 10 dollars.", True),
    ("He pays 1,000 + 200 = 1,200.\n#### 1,200", f"{B}{{1200}}", True),
    ("#### 72", "She sold 48 + 24 = 72 clips.\n#### 72", True),
    ("#### 72", "She sold 48 + 24 = 73 clips.\n#### 73", False),
    # float-stored golds
    ("27.0", f"{B}{{27}}", True),
    ("27.0", "The answer is 27", True),
    ("27.0", f"{B}{{28}}", False),
    ("-3.0", f"{B}{{-3}}", True),
    ("2.5", f"{B}{{\\frac{{5}}{{2}}}}", True),
    # golds that are full solutions with a boxed answer
    ("We have $x = 2$, so the answer is $\\boxed{\\frac{1}{2}}$.", f"{B}{{0.5}}", True),
    ("Hence $\\boxed{3}$ (and not $\\boxed{4}$). Final: $\\boxed{5}$.", f"{B}{{5}}", True),
    # misc: spaces, leading plus, dollars, trailing period, integers written as decimals
    ("42", f"{B}{{ 42 }}", True),
    ("42", f"{B}{{42.}}", True),
    ("42", f"${B}{{42}}$", True),
    ("42", f"{B}{{42.0}}", True),
    ("42", f"{B}{{41.99}}", False),
    ("100", "No final answer here.", False),
]


@pytest.fixture(scope="module")
def grader() -> Grader:
    return get_grader(timeout=5.0, num_workers=2)  # shares its worker processes with the other reward tests


@pytest.fixture(scope="module")
def graded(grader) -> list:
    return grader.grade([c for _, c, _ in CASES], [g for g, _, _ in CASES])


def test_there_are_at_least_80_cases():
    assert len(CASES) >= 80
    assert len({(g, c) for g, c, _ in CASES}) == len(CASES)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{g[:20]}|{c[-24:]}" for g, c, _ in CASES])
def test_case(graded, index):
    gold, completion, expected = CASES[index]
    result = graded[index]
    assert result.status in ("ok", "no_answer"), result
    assert result.verdict is expected, f"gold={gold!r} completion={completion!r} -> {result}"


def test_in_process_grading_agrees_with_the_pool(graded):
    subset = [i for i, (g, _, _) in enumerate(CASES) if len(g) < 8][:12]
    local = Grader(timeout=5.0, num_workers=0).grade([CASES[i][1] for i in subset], [CASES[i][0] for i in subset])
    assert [r.verdict for r in local] == [graded[i].verdict for i in subset]


def test_accuracy_reward_scores_plain_and_conversational_completions():
    completions = ["\\boxed{4}", [{"role": "assistant", "content": "2+2 = \\boxed{4}"}], "\\boxed{5}", ""]
    logged = {}
    scores = accuracy(
        completions=completions, answer=["4"] * 4, log_metric=lambda name, value: logged.setdefault(name, value)
    )
    assert scores == [1.0, 1.0, 0.0, 0.0]
    assert logged == {"rewards/accuracy/failures": 0.0, "rewards/accuracy/unparsable_golds": 0.0}


def test_grade_answer_returns_verdict_and_extracted_answer():
    assert grade_answer("so \\boxed{10{,}000}", "10000") == (True, "10000")
    assert grade_answer("no answer", "3") == (False, None)
    assert grade_answer("\\boxed{3}", "") == (None, "3")


# -- pure parts --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{1} then \\boxed{\\frac{1}{2}}", Answer("\\frac{1}{2}", "latex")),
        ("\\fbox{7}", Answer("7", "latex")),
        ("\\boxed 5 is it", Answer("5", "latex")),
        ("\\boxed{\\{1,2\\}}", Answer("\\{1, 2\\}", "latex")),
        ("<answer> 12 </answer>", Answer("12", "text")),
        ("blah #### 1,234 more 5", Answer("1234", "number")),
        ("3 apples and 4 pears make 7.", Answer("3 apples and 4 pears make 7.", "text")),  # math-verify reads it
        ("", None),
        ("no digits", None),
        ("\\boxed{}", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_last_boxed_skips_unclosed_and_overlong_groups():
    assert last_boxed("\\boxed{1} \\boxed{2") == "1"
    assert last_boxed("\\boxed{a{b}c}") == "a{b}c"
    assert last_boxed("\\boxed{" + "{" * 10_000 + "}" * 10_000 + "}") is None  # 20,000 chars > MAX_ANSWER_CHARS
    assert last_boxed("\\boxedx{1}") is None


@pytest.mark.parametrize(
    ("gold", "expected"),
    [
        ("27.0", "27"),
        (27.0, "27"),
        (72, "72"),
        ("#### 1,234", "1234"),
        ("The answer is $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("  \\dfrac{3}{4} ", "\\frac{3}{4}"),
        ("", None),
        (None, None),
        (float("nan"), None),
        ("\\boxed{unclosed", None),
    ],
)
def test_normalize_gold(gold, expected):
    assert normalize_gold(gold) == expected


def test_percent_readings():
    assert strip_percent("50\\%") == "50"
    assert strip_percent("50 percent") == "50"
    assert strip_percent("\\%") is None
    assert answer_variants("12.5\\%") == ["12.5\\%", "12.5"]
    assert answer_variants("12.5") == ["12.5"]


@pytest.mark.parametrize(
    ("gold", "answer", "expected"),
    [
        ("72", "72", True),
        ("72", "072", True),
        ("72", "73", False),
        ("27", "27.0", True),
        ("0.5", "0.50", True),
        ("0.1", "0.2", False),
        ("0.3333333", "0.33333333", None),  # within math-verify's rounding: its call
        ("1/2", "0.5", None),
        ("9" * 2000, "9" * 2000, None),  # too long for the fast path
    ],
)
def test_fast_numeric_verdict(gold, answer, expected):
    assert fast_numeric_verdict(gold, answer) is expected


def test_completion_text_handles_every_shape():
    assert completion_text([{"role": "assistant", "content": None}]) == ""
    assert completion_text([]) == ""
    assert completion_text(None) == ""
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"text": "b"}]}]) == "ab"
    assert completion_text({"content": "x"}) == "x"
