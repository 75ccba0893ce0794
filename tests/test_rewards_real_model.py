"""What a real small model (SmolLM2-135M-Instruct trained on sums, issue 24) taught the grader: restating the
question's arithmetic is not an answer, an empty box is not a verdict, and plain endings are read.

Each case is a completion of the kind the model wrote, with what a careful human grader credits.
"""

from __future__ import annotations

import pytest

from drgrpo import evaluation as ev
from rewards import RewardArguments, get_grader, get_reward_funcs
from rewards.answer_policy import final_answer_region
from rewards.echoes import question_numbers, question_text
from rewards.extract import last_boxed, last_boxed_group

B = "\\boxed"


def _user(question: str) -> list[dict]:
    return [
        {"role": "system", "content": "You are a helpful assistant, version 2."},
        {"role": "user", "content": question},
    ]


# (gold, completion, prompt or None): an unevaluated expression of the question's numbers. Right answer: 0.
ECHOES: list[tuple[str, str, object]] = [
    ("38", "17 + 21", None),
    ("38", f"The sum is {B}{{17 + 21}}.", None),
    ("38", "The answer is 17 + 21.", _user("What is 17 + 21?")),
    ("13", "5 is indeed 5 + 8.", None),
    ("30", "1 + 29 = 29 + 1", None),  # an equation whose last side is still the question
    ("38", f"{B}{{x = 17 + 21}}", None),
    ("42", f"{B}{{6 \\cdot 7}}", None),
    ("-2", f"{B}{{3 - 5}}", None),
    ("0.75", f"{B}{{\\frac{{1}}{{2}} + \\frac{{1}}{{4}}}}", None),
    ("2/3", "We solve for it: P(A) = (1/2) * (4/3)", None),
    ("10", "Answer \\( (9+1) \\)", None),  # math-verify's own suite credits this one; the rule does not
    # with the question known, powers, roots and factorials of its own numbers are echoes too
    ("1024", f"{B}{{2^{{10}}}}", "What is 2^10?"),
    ("9", f"{B}{{\\sqrt{{81}}}}", _user("What is the square root of 81?")),
    ("120", f"{B}{{5!}}", "Compute 5 factorial."),
    ("1024", "The answer is $2^{10}$.", "What is 2^10?"),
]

# (gold, completion, prompt or None): numbers in a form of their own, and non-numeric golds. Right answer: 1.
CREDITED: list[tuple[str, str, object]] = [
    ("0.5", f"{B}{{\\frac{{1}}{{2}}}}", None),
    ("0.5", f"{B}{{\\frac{{1}}{{2}}}}", "What is 1 divided by 2?"),  # a fraction is a number, even of the question's
    ("0.75", f"{B}{{3/4}}", "3 of 4 marbles are red. What share is red?"),
    ("2/3", "P(A) = 2/3. Therefore, the probability that Alice wins is 2/3.", None),  # plain-text a/b is a fraction
    (
        "\\sqrt{8}",
        f"{B}{{2\\sqrt{{2}}}}",
        "Simplify the square root of 8.",
    ),  # the gold is no number: math-verify decides
    ("38", "17 + 21 = 38", _user("What is 17 + 21?")),  # the work, then the result
    ("38", f"{B}{{17 + 21 = 38}}", None),
    ("7", f"{B}{{a = 3 + 4 = 7}}", None),
    ("16", "Hence, $h + k + a + b = (-3) + 2 + 12 + 5 = 16.$", None),  # a chain (sympy reorders it) ending in 16
    ("-120", "Thus, the product $abc=3\\cdot5\\cdot-8=-120$.", None),
    ("1500", f"{B}{{1.5 \\times 10^{{3}}}}", None),  # scientific notation
    ("1024", f"{B}{{2^{{10}}}}", None),  # a power is a number form; only the question makes it an echo
    ("1024", f"{B}{{2^{{10}}}}", "How many subsets has a set of ten elements?"),
    ("50", f"{B}{{50\\%}}", "What percent of 100 is 50?"),
    ("-0.5", f"{B}{{-\\frac{{1}}{{2}}}}", None),
    ("x + 1", f"{B}{{1 + x}}", None),
    ("3 + \\sqrt{2}", f"{B}{{\\sqrt{{2}} + 3}}", None),
    ("38", "The answer is 38.", _user("What is 17 + 21?")),
]


def _grade(cases, mode="math_verify"):
    grader = get_grader(timeout=5.0, num_workers=2, extraction_mode=mode)
    return grader.grade([c for _, c, _ in cases], [g for g, _, _ in cases], [p for _, _, p in cases])


def test_echoes_of_the_question_score_zero():
    results = _grade(ECHOES)
    credited = [(case, r) for case, r in zip(ECHOES, results, strict=True) if r.verdict is not False]
    assert credited == []
    assert {r.status for r in results} == {"ok"}  # read, compared and refused; not "no answer"


def test_numbers_in_their_own_forms_are_still_credited():
    results = _grade(CREDITED)
    wrong = [(case, r) for case, r in zip(CREDITED, results, strict=True) if r.verdict is not True]
    assert wrong == []


def test_the_accuracy_reward_reads_the_question_from_trls_prompts():
    (reward,) = get_reward_funcs(["accuracy"], RewardArguments(reward_num_workers=2))
    completions = [f"{B}{{2^{{10}}}}", f"{B}{{1024}}", f"{B}{{2^{{10}}}}"]
    prompts = [_user("What is 2^10?"), _user("What is 2^10?"), _user("How many subsets of ten things?")]
    assert reward(completions=completions, answer=["1024"] * 3, prompts=prompts) == [0.0, 1.0, 1.0]
    assert reward(completions=completions, answer=["1024"] * 3) == [1.0, 1.0, 1.0]  # no question: a power counts


def test_the_evaluator_passes_the_problem_as_the_question():
    verdicts = ev.grade_completions([f"{B}{{2^{{10}}}}", "17 + 21"], ["1024", "38"], questions=["2^10?", "17+21?"])
    assert [v for v, _ in verdicts] == [ev.INCORRECT, ev.INCORRECT]


@pytest.mark.parametrize(
    ("prompt", "numbers"),
    [
        ("What is 17 + 21?", ("17", "21")),
        (_user("Add 1,000 and 2.50, then 17+21."), ("1000", "17", "21", "5/2")),  # the system prompt's 2 is not read
        ("H2O has x2 atoms and 3 bonds.", ("3",)),  # digits of a word are no numbers
        (None, ()),
        ([], ()),
    ],
)
def test_question_numbers(prompt, numbers):
    assert question_numbers(prompt) == numbers


def test_question_text_takes_the_user_messages():
    assert question_text(_user("q?")) == "q?"
    assert question_text("plain prompt 5") == "plain prompt 5"


# (gold, completion, expected): empty boxes state nothing, so they neither answer nor cancel an answer.
EMPTY_BOXES: list[tuple[str, str, bool]] = [
    ("12", f"7 + 5 = 12\nThe answer is {B}{{}}.", True),
    ("12", f"7 + 5 = 12\nThe answer is ${B}{{}}$.", True),
    ("12", f"7 + 5 = 12. The answer is {B}{{ }}.", True),
    ("12", f"So {B}{{12}}. Final answer: {B}{{}}", True),  # an earlier box still counts
    ("12", f"The answer is {B}{{}}.", False),  # nothing else: no answer
]


@pytest.mark.parametrize("mode", ["math_verify", "lenient"])
def test_an_empty_box_is_ignored_not_a_verdict(mode):
    results = _grade([(g, c, None) for g, c, _ in EMPTY_BOXES], mode)
    assert [r.verdict for r in results] == [expected for _, _, expected in EMPTY_BOXES]
    assert results[-1].status == "no_answer"


def test_an_empty_box_under_boxed_only_falls_back_to_an_earlier_box_only():
    results = _grade([(g, c, None) for g, c, _ in EMPTY_BOXES], "boxed_only")
    assert [r.verdict for r in results] == [False, False, False, True, False]


def test_box_readers_skip_empty_boxes():
    assert last_boxed(f"{B}{{5}} then {B}{{}}") == "5"
    assert last_boxed(f"{B}{{ }}") is None
    assert last_boxed_group(f"{B}{{1}}, {B}{{2}}, {B}{{}}") == ["1", "2"]


# (gold, completion): plain endings a small model writes. Right answer: 1 under math_verify and lenient.
ENDINGS: list[tuple[str, str]] = [
    ("22", "22 + 0 = 22\n\nThis is the correct answer because adding zero does not change a number."),
    ("22", "The sum of 22 and 0 is:\n22 + 0 = 22\nSo that is the answer to the question."),
    ("22", "22 + 0 = 22\nThe answer is the sum of the two numbers."),
    ("141", "We add 120 and 21, which is 141. 141 is indeed the answer."),
    ("144", "The sum is **144**."),
    ("144", "Let me compute: 100 + 44 = **144**"),  # not 44
    ("144", "The final answer is **144**."),
    ("3", "Hence $y = 3$ is the answer."),
]


@pytest.mark.parametrize("mode", ["math_verify", "lenient"])
def test_plain_endings_are_read(mode):
    results = _grade([(g, c, None) for g, c in ENDINGS], mode)
    wrong = [(case, r) for case, r in zip(ENDINGS, results, strict=True) if r.verdict is not True]
    assert wrong == []


def test_endings_are_not_read_under_boxed_only():
    results = _grade([(g, c, None) for g, c in ENDINGS], "boxed_only")
    assert {r.status for r in results} == {"no_answer"}


@pytest.mark.parametrize(
    ("text", "region"),
    [
        ("which is 141. 141 is indeed the answer.", "141 is indeed the answer."),
        ("22 + 0 = 22\nThat is the answer, since zero adds nothing.", "22 + 0 = 22"),
        (f"7 + 5 = 12\nThe answer is {B}{{}}.", "7 + 5 = 12"),
        ("So the answer is $7$.", "answer is $7$."),  # a phrase with math keeps its region
        ("The answer is forty-two.", None),  # no digit anywhere: nothing to read
    ],
)
def test_final_answer_region_of_plain_endings(text, region):
    assert final_answer_region(text) == region
