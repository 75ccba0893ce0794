"""One gold reader (issue 44): a solution read by training's data pipeline (`load_prompt_dataset`: the `answer` column
the rewards see and `--show_prompts` prints) and by evaluation's (`resolve_benchmark`: the problems' golds) gives the
same gold, under every format name and under training's and evaluation's names for one reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drgrpo.data import DataArguments, load_prompt_dataset
from drgrpo.evaluation import ANSWER_FORMATS, EvalArguments, resolve_benchmark

# Worked solutions as datasets store them, each with its gold under the boxed reading (None: no gold).
BOXED = {
    "So $(x, y) = \\boxed{(2, 2)} \\quad\\text{and}\\quad \\boxed{(6, 2)}$.": "(2, 2), (6, 2)",  # several boxes
    "\\boxed{1} and \\boxed{2}": "1, 2",
    "first \\boxed{1}, then after checking \\boxed{2}": "2",  # a correction: the last box only
    "The answer is \\fbox{7}.": "7",
    "$\\boxed{\\frac{1}{\\sqrt{2}}}$": "\\frac{1}{\\sqrt{2}}",  # nested braces whole
    "It is \\boxed{(3, 5]}, not \\boxed{4": "(3, 5]",  # an unclosed box is no box
    "unclosed \\boxed{1": None,
    "no box here": None,
}
# GSM8K solutions with their gold under the gsm8k reading: a separator goes, an item comma stays.
GSM8K = {"She picks 3 and 5.\n#### 3, 5": "3, 5", "#### 1,000": "1000", "Natalia sold 72.\n#### 72": "72"}
SOLUTIONS = [*BOXED, *GSM8K, "$42$", "  x+1 "]


def training_golds(path: Path, answer_extraction: str) -> dict[str, str]:
    """question -> gold as training reads it (the pipeline keeps "" where no gold can be read)."""
    args = DataArguments(
        dataset_path=str(path),
        prompt_column="question",
        answer_extraction=answer_extraction,
        prompt_template="plain",
        check_gold_answers=False,
    )
    train, _ = load_prompt_dataset(args)
    return dict(zip(train["prompt"], train["answer"], strict=True))


def evaluation_golds(path: Path, answer_format: str) -> dict[str, str]:
    """question -> gold as evaluation reads it ("" where it reads none: the problem's gold is None)."""
    bench = resolve_benchmark(EvalArguments(model_name_or_path="m", data=str(path), answer_format=answer_format))
    return {problem.question: problem.gold or "" for problem in bench.problems}


@pytest.fixture(scope="module")
def solutions(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("golds") / "solutions.jsonl"
    path.write_text("".join(json.dumps({"question": f"q{i}", "answer": s}) + "\n" for i, s in enumerate(SOLUTIONS)))
    return path


def test_the_same_name_reads_the_same_gold_in_training_and_evaluation(solutions):
    assert {"none", "boxed", "gsm8k", "plain", "last_boxed", "auto"} <= set(ANSWER_FORMATS)
    for name in ANSWER_FORMATS:
        assert training_golds(solutions, name) == evaluation_golds(solutions, name), name


@pytest.mark.parametrize(("training", "evaluation"), [("boxed", "last_boxed"), ("none", "plain")])
def test_trainings_names_read_the_evaluators_gold(solutions, training, evaluation):
    assert training_golds(solutions, training) == evaluation_golds(solutions, evaluation)


def test_several_boxes_and_item_commas_are_one_gold_in_both(solutions):
    """The issue's three examples: `(2, 2), (6, 2)` (not `(6, 2)`), `1, 2` (not `2`), `3, 5` (not `3 5`)."""
    index = {solution: f"q{i}" for i, solution in enumerate(SOLUTIONS)}
    for read in (training_golds, evaluation_golds):
        boxed, gsm8k = read(solutions, "boxed"), read(solutions, "gsm8k")
        assert {s: boxed[index[s]] for s in BOXED} == {s: gold or "" for s, gold in BOXED.items()}, read.__name__
        assert {s: gsm8k[index[s]] for s in GSM8K} == GSM8K, read.__name__


def test_a_list_valued_gold_is_read_by_list_and_auto_in_both(tmp_path):
    rows = [{"question": "q0", "answer": ["$69$", "$84$"]}, {"question": "q1", "answer": ["$69$,$84$"]}]
    path = tmp_path / "lists.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    for name in ("list", "auto"):
        assert training_golds(path, name) == evaluation_golds(path, name) == {"q0": "69, 84", "q1": "69, 84"}
    with pytest.raises(ValueError, match="has a list in answer column 'answer'.*answer_extraction: list"):
        training_golds(path, "none")


def test_evaluation_refuses_a_list_gold_under_a_text_format_as_training_does(tmp_path, tiny_model_path, run_script):
    """Issue 54, item 14: `['#### 5']` with `--answer_format gsm8k` became the gold `5']` (the text of the list's repr)
    and every answer was graded wrong, without a word; training refuses that gold. Now the evaluation refuses it too,
    in one line naming the row, the column and the fix, before any model loads."""
    path = tmp_path / "golds.jsonl"
    path.write_text(json.dumps({"question": "What is 2 + 3?", "answer": ["#### 5"]}) + "\n")
    with pytest.raises(ValueError, match="has a list in answer column 'answer'"):
        training_golds(path, "gsm8k")
    result = run_script(
        "scripts/evaluate.py", "--model_name_or_path", str(tiny_model_path), "--data", str(path), "--answer_format",
        "gsm8k", "--max_new_tokens", "2", "--output_dir", str(tmp_path / "eval"),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert errors[0].startswith(
        "error: Row 0 of " + str(path) + ": answer column 'answer' holds a list (['#### 5']), which 'gsm8k' would "
        "read as the text of its repr: every answer would be graded wrong. Use --answer_format list (or auto)"
    ), errors[0]
    assert not (tmp_path / "eval" / "samples.jsonl").exists()
