"""The kinds of answer Math-Verify's own regression suite credits and the reward used to miss (issue 24, item 1):
decimal commas, several boxes against one set (both ways), strings that parse as no mathematics, and final answers
stated in prose. Each case is written for this project; a careful human grader credits the first list of each kind
and refuses the second. `benchmarks/math_verify_suite.py` measures the suite itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewards import get_grader
from rewards.extract import answer_variants, last_boxed_group, normalize_gold, same_text, top_level_parts

B = "\\boxed"
ROOT = Path(__file__).resolve().parents[1]

# (gold, completion, credited)
DECIMAL_COMMAS: list[tuple[str, str, bool]] = [
    ("3.75", "Le prix est de 3,75 euros.", True),
    ("0.125", "La probabilité vaut 0,125.", True),
    ("4.5", "Il faut environ 4,5 € par personne.", True),
    ("1000.99", "Der Betrag ist 1000,99", True),
    ("1000.99", "so the number is not 10, it is 1,000.99€", True),  # a currency sign after a number is no fragment
    ("1000.99", "the area is 1,000.99m²", True),
    ("3.75", f"{B}{{3,75}}", True),
    ("1.5", f"The ratio is {B}{{1,5}}.", True),
    ("0.111", f"{B}{{0,111}}", True),
    ("1,22", "1.22", True),  # a gold with a decimal comma
    ("0,111", "The answer is 0.111.", True),
    ("0,1", f"{B}{{0, 1}}", True),  # MATH's `0,1` is also the two solutions 0 and 1
    # a list context: several commas, a bracket, a math span, a several-part gold
    ("1.2", "The roots are 1,2,3.", False),
    ("1.5", f"{B}{{[1,5]}}", False),
    ("1.5", "So $x = 1,5$.", False),
    ("15", f"{B}{{1,5}}", False),
    ("1.5", "We need 1,500 of them.", False),  # a thousands group
    ("3.75", "It costs 3,75apples", False),  # no whole token
]

# (gold, completion, credited): a gold that is one set against several boxes, and several gold boxes against one
SEVERAL_BOXES: list[tuple[str, str, bool]] = [
    ("\\{2, 7\\}", f"{B}{{2}}, {B}{{7}}", True),
    ("{1,2,3}", f"{B}{{1}} and {B}{{2}} and {B}{{3}}", True),
    ("{1,2,3}", f"{B}{{1}},{B}{{2}},{B}{{3}}", True),
    ("(3, 3), (1, 1)", f"$${B}{{(3, 3)}} \\text{{ for part (a) and }} {B}{{(1, 1)}}$$", True),
    ("y = 2x + 1, z = 3", f"\\( y = {B}{{2x + 1}} \\) and \\( z = {B}{{3}} \\)", True),
    (f"{B}{{1}} papers and {B}{{2}} bins", f"${B}{{1,2}}$", True),
    (f"{B}{{3}} cm and {B}{{4}} cm", f"{B}{{3, 4}}", True),
    (f"{B}{{35}} ++++ {B}{{4}}", f"{B}{{4, 35}}", True),
    # a correction in prose still ends the run, in completions and golds
    ("\\{1, 2\\}", f"{B}{{1}}, wait, no: {B}{{2}}", False),
    (f"{B}{{1}} no no no {B}{{2}}", f"{B}{{1,2}}", False),
    ("{1,2,3}", f"{B}{{1}} and {B}{{2}}", False),
]

# (gold, completion, credited): neither side parses as mathematics, so their normalised strings are compared
STRINGS: list[tuple[str, str, bool]] = [
    ("$12:00$", "$12:00$", True),  # 12:00 parses as 12/0
    ("12:00", f"{B}{{12:00}}", True),
    ("12:00", "The shop opens at $12:00$.", True),
    ("$1 - \\frac{1}{\\mathrm{e}}$", "$1 - \\frac{1}{\\mathrm{e}}$", True),
    ("$12:00$", "$1:00$", False),
    ("$1 - \\frac{1}{\\mathrm{e}}$", "$1 + \\frac{1}{\\mathrm{e}}$", False),
    ("\\boxed{unclosed", f"{B}{{unclosed}}", False),  # an unparsable gold still scores None unless the text matches
]

# (gold, completion, credited): final answers in prose, as math-verify reads them
PROSE: list[tuple[str, str, bool]] = [
    ("34", "Final Answer: The largest $n$ is 34.", True),
    ("120", "Final Answer: The volume of $ABCDEFGH$ is 120. I hope it is correct.", True),
    ("x >= 3", "Hence $x >= 3$ is the answer.", True),
    (
        "10455",
        f"So {B}{{200}} and then {B}{{255}}. Final Answer: The final answer is $10,455$. I hope it is correct.",
        True,
    ),
    (
        "14916",
        "Final Answer: The final answer is $14 {, }916$. I hope it is correct. " + "Note: check your work. " * 80,
        True,
    ),
    ("18", "Each gets 6, and three get 18. So the answer to the question is 18 apples.", True),
    # words between two spans are no span (`$42!$ has $9$`), and a span may open on an earlier line
    ("9", "This gives $8+1=9$ times the factor $5$, so $42!$ has $9$ zeroes at the end.", True),
    ("13535", "Since $0 < y^6 < 1,$ the greatest integer less than $x^6$ is $13535.$", True),
    ("-1, 2, -2", "Therefore, $x=-1$ or $x=2$ or $x=-2$. We can check each by substitution.", True),
    ("11", "the value of $x$ is $\\left(120 -\nk^2\\right)^2$, so the $11$ values of $x$ are distinct.", True),
    # a box after the closing statement, or a statement with nothing in it, still counts as before
    ("5", f"The final answer is $4$. I hope it is correct. Correction: {B}{{5}}", True),
    ("4", f"The final answer is $4$. I hope it is correct. Correction: {B}{{5}}", False),
    ("34", "The largest $n$ is unknown.", False),
    ("2", "The largest $n$ is 34.", False),
]


def _grade(cases):
    grader = get_grader(timeout=5.0, num_workers=2)
    return grader.grade([c for _, c, _ in cases], [g for g, _, _ in cases])


@pytest.mark.parametrize(
    "cases", [DECIMAL_COMMAS, SEVERAL_BOXES, STRINGS, PROSE], ids=["decimal", "boxes", "str", "prose"]
)
def test_each_kind_is_credited_where_a_grader_credits_it(cases):
    results = _grade(cases)
    wrong = [(case, r) for case, r in zip(cases, results, strict=True) if bool(r.verdict) is not case[2]]
    assert wrong == []


def test_decimal_comma_readings():
    assert answer_variants("3,75") == ["3,75", "3.75"]
    assert answer_variants("1,000") == ["1,000"]  # normalize_answer has made it 1000 before; never 1.000
    assert answer_variants("1,2,3") == ["1,2,3"]
    assert normalize_gold("$3,75$") == "3,75"


def test_gold_boxes_and_sets():
    assert normalize_gold(f"{B}{{1}} papers and {B}{{2}} bins") == "1, 2"
    assert normalize_gold(f"{B}{{1}} no no no {B}{{2}}") == "2"
    assert last_boxed_group(f"{B}{{1}} papers and {B}{{2}}") == ["2"]  # a completion's words still end the run
    assert last_boxed_group(f"$y = {B}{{1}}$ and $z = {B}{{2}}$") == ["1", "2"]
    assert len(top_level_parts("{1,2,3}")) == 3
    assert len(top_level_parts("{1,2}x")) == 1


def test_same_text():
    assert same_text("12:00", "$ 12:00 $")
    assert same_text("12:00", "It is $12:00$ now.", "text")
    assert not same_text("12:00", "It is $12:00$ now.", "latex")
    assert not same_text("", "")


def test_the_shipped_math_verify_suite_agrees_on_at_least_252_of_255_with_at_most_one_false_positive():
    rows = [json.loads(line) for line in (ROOT / "benchmarks/data/math_verify_suite.jsonl").read_text().splitlines()]
    assert len(rows) == 255
    results = get_grader(timeout=5.0, num_workers=2).grade([r["pred"] for r in rows], [r["gold"] for r in rows])
    verdicts = [bool(r.verdict) for r in results]
    agree = sum(v == bool(row["expected"]) for v, row in zip(verdicts, rows, strict=True))
    false_positives = sum(v and not row["expected"] for v, row in zip(verdicts, rows, strict=True))
    assert (agree >= 252, false_positives <= 1) == (True, True), (agree, false_positives)
