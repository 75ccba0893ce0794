"""Answer extraction (`answer_extraction_mode`): every kind of failure issue 15 lists, as cases written for this
project, graded under each mode.

Each case says what a careful human grader credits. `FRAGMENTS` are false positives of a "last number in the text"
reader: they must score 0 under every mode. Cases are graded in one batch per mode by a shared grader.
"""

from __future__ import annotations

import pytest

from rewards import EXTRACTION_MODES, RewardArguments, get_grader, get_reward_funcs
from rewards.answer_policy import check_extraction_mode, extract_answer, final_answer_region, tidy_math_spans
from rewards.extract import Answer, last_boxed_group, normalize_gold, normalize_region, top_level_parts

B = "\\boxed"

# (gold, completion): a number or expression read from a fragment of something else. Right answer: 0, every mode.
FRAGMENTS: list[tuple[str, str]] = [
    ("9", "The answer is $\\frac{10}{9}$"),
    ("3", "$x=\\sqrt3$"),
    ("2", "$\\frac{1+\\sqrt{5}}{2}$"),
    ("1", "$-[0,1)$"),
    ("1", "So the set is $-[0, 1)$."),
    ("2", "AZYUK2A"),
    ("7", "The answer is 17."),
    ("3", "Solving, we find x = 3y."),
    ("12", "The serial number is X12B."),
    ("4", "The area is $4\\pi$."),
    ("5", "First I found 5 apples; then 3 + 4 = 7.\n\nSo the total is seven."),  # an earlier number
    ("111", f"{B}{{0,111}}"),  # a leading 0 is no thousands group (0,111 is 0.111 or the items 0 and 111)
    ("15", f"The ratio is {B}{{1,5}}."),
    ("\\boxed{1}\\boxed{2}", f"{B}{{2}}"),  # a two-part gold is not its last box
    ("(2, 2), (6, 2)", f"{B}{{(6, 2)}}"),
    ("1, 2", f"{B}{{1}}, {B}{{2}}, {B}{{3}}"),  # boxing extra candidates is not the set
    ("5", "<answer>15</answer>"),
    ("10", "She sold 48 + 24 = 72 clips.\n#### 710"),
]

# (gold, completion): an answer stated without a box, that math_verify and lenient credit and boxed_only does not.
UNBOXED: list[tuple[str, str]] = [
    ("10/9", "\\frac{10}{9}"),
    ("$x >= 5$", "Therefore $x \\geq 5$ is the solution."),
    ("$(1,\\frac{9}{2})$", "$(1,4.5)$"),
    ("\\begin{pmatrix}1&0\\\\0&1\\end{pmatrix}", "The matrix is $\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}$."),
    ("$\\text{E}$", "$E$"),
    ("14916", "Adding the parts, the final answer is $14{,}916$"),
    ("\\frac{1}{2}", "Hence the probability is \\(\\frac{1}{2}\\)."),
    ("72", "The answer is 72."),
    ("-3", "Final answer: $-3$"),
    ("6", "Dividing both sides by 2, we get\n\\[\nx = 6\n\\]"),
    ("1000", "The total is 1 000."),
    ("10000", "So the final answer is $10\\,000$."),
    ("50", "The answer is $50\\%$."),
    ("5", "<think>2+3</think> <answer>The answer is 5.</answer>"),
    ("72", "She sold 48 + 24 = 72 clips.\n#### 72"),
    ("12", "Each box holds 4, so 3 boxes hold 12 apples.\n\nI hope this helps!"),
    ("7", "Listing the factors, we have $7$ possible values of $n$."),  # the answer, not the variable named after it
    ("120", "Hence the smallest such $\\theta$ is $120^\\circ.$"),  # a period inside the closing dollar
    ("\\frac{243}{625}", "We get\n$$\n\\frac{3^5}{5^4} = \\frac{243}{625}.\n$$"),
    # the last row of a derivation
    ("90", "\\begin{align*}\n\\angle A &= 50^\\circ + 40^\\circ \\\\\n&= 90^\\circ.\n\\end{align*}"),
]

# (gold, completion, expected): boxes, several boxes and number formats, the same under every mode.
BOXED: list[tuple[str, str, bool]] = [
    ("(2, 2), (6, 2)", f"{B}{{(2, 2)}} \\quad\\text{{and}}\\quad {B}{{(6, 2)}}", True),
    ("(2, 2), (6, 2)", f"{B}{{(6, 2)}} and {B}{{(2, 2)}}", True),
    ("(2, 2), (6, 2)", f"{B}{{(2, 2), (6, 2)}}", True),
    ("\\boxed{1}\\boxed{2}", f"${B}{{1}}$, ${B}{{2}}$", True),
    ("\\boxed{1}\\boxed{2}", f"{B}{{2}} or {B}{{1}}", True),
    ("1", f"First {B}{{2}}, wait, no: {B}{{1}}", True),  # a one-part gold: the last box
    ("2", f"First {B}{{2}}, wait, no: {B}{{1}}", False),
    ("1000", f"{B}{{1 000}}", True),
    ("1000", f"{B}{{1,000}}", True),
    ("10000", f"{B}{{10{{,}}000}}", True),
    ("10000", f"{B}{{10\\,000}}", True),
    ("10080", f"{B}{{10,\\!080}}", True),
    ("[1,100]", f"{B}{{[1, 100]}}", True),  # commas inside brackets separate items
    ("\\boxed{\\frac{1}{2}", f"{B}{{0.5}}", True),  # a gold whose box never closes, read as math-verify reads it
    ("50", f"{B}{{50\\%}}", True),
    ("27.0", f"{B}{{27}}", True),
]


def _grade(mode: str, cases: list[tuple[str, str]]) -> list:
    grader = get_grader(timeout=5.0, num_workers=2, extraction_mode=mode)  # shares the reward tests' workers
    return grader.grade([c for _, c in cases], [g for g, _ in cases])


@pytest.fixture(scope="module", params=EXTRACTION_MODES)
def mode(request) -> str:
    return request.param


def test_fragments_score_zero_under_every_mode(mode):
    results = _grade(mode, FRAGMENTS)
    credited = [(case, r) for case, r in zip(FRAGMENTS, results, strict=True) if r.verdict is not False]
    assert credited == []


def test_unboxed_answers_are_read_unless_only_boxes_count(mode):
    results = _grade(mode, UNBOXED)
    expected = mode != "boxed_only"
    wrong = [(case, r) for case, r in zip(UNBOXED, results, strict=True) if r.verdict is not expected]
    assert wrong == []
    if mode == "boxed_only":
        assert {r.status for r in results} == {"no_answer"}


def test_boxes_and_number_formats_grade_the_same_under_every_mode(mode):
    results = _grade(mode, [(g, c) for g, c, _ in BOXED])
    wrong = [(case, r) for case, r in zip(BOXED, results, strict=True) if r.verdict is not case[2]]
    assert wrong == []


def test_unparsable_gold_still_scores_none():
    (result,) = get_grader(num_workers=2).grade([f"{B}{{3}}"], ["\\boxed{unclosed"])
    assert (result.verdict, result.status) == (None, "gold_unparsable")


def test_the_extracted_answer_of_free_text_is_what_math_verify_read():
    results = get_grader(num_workers=2).grade(["So $x = \\frac{3}{4}$ here.", "Nothing to read."], ["3/4", "1"])
    assert [(r.verdict, r.extracted, r.status) for r in results] == [
        (True, "x = \\frac{3}{4}", "ok"),
        (False, None, "no_answer"),
    ]


def test_lenient_reads_a_latex_span_before_the_last_math_line():
    completion = "We obtain $y = \\frac{7}{3}$.\nFor the check, see eq. (3b)."  # the last math line reads nothing
    by_mode = {m: _grade(m, [("\\frac{7}{3}", completion)])[0].verdict for m in EXTRACTION_MODES}
    assert by_mode == {"boxed_only": False, "math_verify": False, "lenient": True}


def test_the_mode_is_a_reward_setting_and_a_bad_one_is_named():
    (reward,) = get_reward_funcs(
        ["accuracy"], RewardArguments(answer_extraction_mode="boxed_only", reward_num_workers=2)
    )
    assert reward(completions=["The answer is 4.", f"{B}{{4}}"], answer=["4", "4"]) == [0.0, 1.0]
    assert RewardArguments().answer_extraction_mode == "math_verify"
    with pytest.raises(ValueError, match="answer_extraction_mode='boxed'.*boxed_only, math_verify, lenient"):
        check_extraction_mode("boxed")


# -- pure parts --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "mode", "expected"),
    [
        ("So \\boxed{5}.", "boxed_only", Answer("5", "latex")),
        ("The answer is 5.", "boxed_only", None),
        ("<answer>5</answer>", "boxed_only", None),
        ("The answer is 5.", "math_verify", Answer("5", "number")),
        ("x = 3\n#### 1,234", "math_verify", Answer("1234", "number")),
        ("<answer> $\\frac{1}{2}$ </answer>", "math_verify", Answer("$\\frac{1}{2}$", "text")),
        ("Thus $x = 0,5$.\nThanks!", "math_verify", Answer("Thus $x = 0, 5$.", "text")),
        ("no math at all", "math_verify", None),
        ("Thus $y=2$.", "lenient", Answer("Thus $y=2$.", "text", "Thus $y=2$.")),
    ],
)
def test_extract_answer_by_mode(text, mode, expected):
    assert extract_answer(text, mode) == expected


def test_several_boxes_are_one_answer_only_for_a_several_part_gold():
    text = f"{B}{{(2, 2)}} \\quad\\text{{and}}\\quad {B}{{(6, 2)}}"
    assert extract_answer(text, multipart=True) == Answer("(2, 2), (6, 2)", "latex")
    assert extract_answer(text, multipart=False) == Answer("(6, 2)", "latex")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"{B}{{1}}{B}{{2}}", ["1", "2"]),
        (f"${B}{{1}}$ and ${B}{{2}}$.", ["1", "2"]),
        (f"{B}{{1}}, then later {B}{{2}}", ["2"]),
        (f"{B}{{1}}\n\n{B}{{2}}", ["2"]),  # a blank line ends the group
        ("no box", []),
    ],
)
def test_last_boxed_group(text, expected):
    assert last_boxed_group(text) == expected


@pytest.mark.parametrize(
    ("gold", "parts"),
    [
        ("(2, 2), (6, 2)", 2),
        ("1 and 2", 2),
        ("\\{1, 2, 3\\}", 3),
        ("(1, 2)", 1),
        ("[0, 1)", 1),
        ("\\frac{1}{2}", 1),
        ("x^{2,3}", 1),
    ],
)
def test_top_level_parts(gold, parts):
    assert len(top_level_parts(gold)) == parts


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("We have 1,000 and 1 000 and 10{,}000 and 10\\,000.", "We have 1000 and 1000 and 10000 and 10000."),
        ("0,111 and 1,5 and 12,34", "0.111 and 1.5 and 12.34"),  # lone a,b in prose: decimal commas
        ("$x = 0,5$ and 1,2,3", "$x = 0, 5$ and 1, 2, 3"),  # inside math, or several commas: items
        ("$[1,100]$ and $(2,500)$", "$[1, 100]$ and $(2, 500)$"),
        ("-12,345.5", "-12345.5"),
    ],
)
def test_normalize_region_separators(text, expected):
    assert normalize_region(text) == expected


@pytest.mark.parametrize(
    ("gold", "expected"),
    [
        ("\\boxed{1}\\boxed{2}", "1, 2"),
        ("First $\\boxed{3}$, not $\\boxed{4}$. Final: $\\boxed{5}$.", "5"),
        ("\\boxed{\\frac{1}{2}", "\\frac{1}{2}"),
        ("0,111", "0,111"),  # kept whole: read as 0.111 and as the items 0 and 111 (`answer_variants`)
        ("1 000", "1000"),
        ("#### 1 000", "1000"),
    ],
)
def test_normalize_gold_keeps_every_part(gold, expected):
    assert normalize_gold(gold) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Work 1 2 3.\nSo the answer is $7$.\nGood luck!", "answer is $7$.\nGood luck!"),
        ("Step 1: 3 + 4 = 7.\nThat is all, folks.", "Step 1: 3 + 4 = 7."),
        ("We get\n$$\nx = 6\n$$", "$$\nx = 6\n$$"),
        ("So\n\\[\nx = 6\n\\]", "\\[\nx = 6\n\\]"),
        ("\\begin{align*}\n2y &= 14 \\\\\ny &= 7.\n\\end{align*}\nDone.", "\\[7\\]"),
        ("\\begin{align*}\nx &= 1+2 \\\\ &= 3 \\\\\n\\end{align*}", "\\[3\\]"),
        ("words only", None),
    ],
)
def test_final_answer_region(text, expected):
    assert final_answer_region(text) == expected


def test_free_text_whose_reading_cannot_be_printed_still_gets_its_verdict():
    # math-verify parses this span into an expression that sympy cannot print (RecursionError in latex() and str()).
    completion = "$1+\\sum_{n=1}^{16}\\left(\\begin{array}{c}16 \\\\ n-1\\end{array}\\right) \\cdot \\frac{1}{n}$"
    (result,) = get_grader(num_workers=2).grade([completion], ["7711"])
    assert (result.verdict, result.status, result.extracted) == (False, "ok", completion)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("is $120^\\circ.$", "is $120^\\circ$."),
        ("So $x = 6,$ and \\[y = 2.\\]", "So $x = 6$, and \\[y = 2\\]."),
        ("$$\n= \\frac{1}{2}.\n$$", "$$\n= \\frac{1}{2}\n$$."),
        ("we have $7$ values of $n$.", "we have $7$ values of n."),
        ("$\\theta$ is $30$.", "$\\theta$ is $30$."),  # the first span keeps its dollars
        ("The answer is $E$.", "The answer is $E$."),  # the only span
        ("She pays $5 and gets $3.", "She pays $5 and gets $3."),  # currency, not math: untouched
    ],
)
def test_tidy_math_spans(text, expected):
    assert tidy_math_spans(text) == expected


def test_numbers_inside_latex_that_does_not_parse_are_not_read_as_plain_text():
    # `\bold` is no LaTeX math-verify knows: the span does not parse, and its 2 is a fragment of a matrix.
    completion = "Equality occurs for $\\bold{v} = \\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix} \\oops{$"
    (result,) = get_grader(num_workers=2).grade([completion], ["2"])
    assert result.verdict is False
