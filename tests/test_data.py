"""The prompt-data pipeline: local formats, column mapping, filters, mixtures, held-out sets, token limits, the gold
check, `--show_prompts`, and every error they raise."""

from __future__ import annotations

import json
import logging
import random
import runpy
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest
from conftest import ROOT
from datasets import Dataset

from drgrpo.data import (
    DataArguments,
    Example,
    apportion,
    condition_holds,
    default_mixture_size,
    format_prompts,
    gsm8k_final_answer,
    last_boxed,
    load_prompt_dataset,
    mix_sources,
    normalize_gold,
    normalized_weights,
    parse_filter,
    reward_gold_check,
    sample_rows,
    unparseable_indices,
)
from drgrpo.data.templates import render_prompt
from drgrpo.experiments.tiny import build_tokenizer
from drgrpo.recipe.cli import parse_recipe

# Rows shaped like MATH (hendrycks/competition_math, as in DigitalLearningGmbH/MATH-lighteval): no answer column,
# the gold answer is the last \boxed{} of the solution, and `level` is a string "Level N".
MATH_ROWS = [
    {"problem": "What is $1+1$?", "level": "Level 1", "type": "Algebra", "solution": "It is $\\boxed{2}$."},
    {"problem": "Compute $2^3$.", "level": "Level 2", "type": "Algebra", "solution": "$2^3=\\boxed{8}$"},
    {"problem": "Halve $1$.", "level": "Level 3", "type": "Prealgebra", "solution": "$\\boxed{\\frac{1}{2}}$"},
    {"problem": "Solve $x^2=9$, $x>0$.", "level": "Level 4", "type": "Algebra", "solution": "So $x=\\boxed{3}$."},
    {"problem": "What is $7 \\cdot 6$?", "level": "Level 5", "type": "Number Theory", "solution": "\\boxed{42}"},
    {"problem": "Count to $5$.", "level": "Level 5", "type": "Counting", "solution": "First 4, then \\boxed{5}."},
    {"problem": "Is it odd?", "level": "Level ?", "type": "Algebra", "solution": "no box here"},
]
LEVEL_3_TO_5 = {"level": ["Level 3", "Level 4", "Level 5"]}


def no_gold_check(golds: list[str]) -> list[bool]:
    return [True] * len(golds)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def args(**kwargs) -> DataArguments:
    defaults = {"prompt_column": "question", "answer_column": "answer", "prompt_template": "plain"}
    return DataArguments(**{**defaults, **kwargs})


def load(data_args: DataArguments, **kwargs) -> tuple[Dataset, Dataset | None]:
    kwargs.setdefault("gold_check", no_gold_check)
    return load_prompt_dataset(data_args, **kwargs)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture
def math_file(tmp_path) -> Path:
    return write_jsonl(tmp_path / "math.jsonl", MATH_ROWS)


@pytest.fixture
def addition_rows() -> list[dict]:
    return [{"question": f"{a}+{b}=", "answer": str(a + b)} for a in range(6) for b in range(6)]


# --------------------------------------------------------------------------------------------------------------
# Local formats


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet", ".csv"])
def test_local_file_formats_load_the_same_rows(tmp_path, addition_rows, suffix):
    path = tmp_path / f"data{suffix}"
    table = Dataset.from_list(addition_rows)
    {".jsonl": table.to_json, ".json": table.to_json, ".parquet": table.to_parquet, ".csv": table.to_csv}[suffix](
        str(path)
    )
    train, held_out = load(args(dataset_path=str(path)))
    assert held_out is None
    assert train.column_names == ["prompt", "answer"]
    assert sorted(zip(train["prompt"], train["answer"], strict=True)) == sorted(
        (row["question"], row["answer"]) for row in addition_rows
    )


def test_folder_of_files_loads_all_of_them(tmp_path, addition_rows):
    folder = tmp_path / "parts"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", addition_rows[:10])
    write_jsonl(folder / "b.jsonl", addition_rows[10:])
    (folder / "notes.txt").write_text("ignored: not a data file")
    train, _ = load(args(dataset_path=str(folder)))
    assert sorted(train["prompt"]) == sorted(row["question"] for row in addition_rows)


def test_numeric_answers_become_strings(tmp_path):
    path = tmp_path / "numbers.csv"
    path.write_text("question,answer\n1+1=,2\n2+2=,4\n")
    train, _ = load(args(dataset_path=str(path)))
    assert sorted(train["answer"]) == ["2", "4"]


def test_missing_path_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load(args(dataset_path=str(tmp_path / "nope.jsonl")))


def test_folder_without_data_files_is_an_error(tmp_path):
    (tmp_path / "readme.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match="no .jsonl/.json/.parquet/.csv file"):
        load(args(dataset_path=str(tmp_path)))


def test_folder_with_mixed_formats_is_an_error(tmp_path, addition_rows):
    write_jsonl(tmp_path / "a.jsonl", addition_rows)
    Dataset.from_list(addition_rows).to_csv(str(tmp_path / "b.csv"))
    with pytest.raises(ValueError, match=r"mixes file formats \['.csv', '.jsonl'\]"):
        load(args(dataset_path=str(tmp_path)))


def test_unsupported_file_type_is_an_error(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("1+1=")
    with pytest.raises(ValueError, match="unsupported file type"):
        load(args(dataset_path=str(path)))


def test_no_source_and_two_sources_are_errors(math_file):
    with pytest.raises(ValueError, match="names no data"):
        load(args())
    both = r"both dataset_name \('someone/math'\) and dataset_path .*--dataset_path null"
    with pytest.raises(ValueError, match=both):
        load(args(dataset_path=str(math_file), dataset_name="someone/math"))


# --------------------------------------------------------------------------------------------------------------
# Column mapping and answers


def test_math_rows_map_problem_and_boxed_solution(math_file):
    train, _ = load(
        args(dataset_path=str(math_file), prompt_column="problem", answer_column="solution", answer_extraction="boxed")
    )
    assert dict(zip(train["prompt"], train["answer"], strict=True)) == {
        "What is $1+1$?": "2",
        "Compute $2^3$.": "8",
        "Halve $1$.": "\\frac{1}{2}",
        "Solve $x^2=9$, $x>0$.": "3",
        "What is $7 \\cdot 6$?": "42",
        "Count to $5$.": "5",
        "Is it odd?": "",  # no \boxed{}: an empty gold, which the gold check reports
    }


def test_missing_column_lists_the_columns_that_exist(math_file):
    with pytest.raises(ValueError) as error:
        load(args(dataset_path=str(math_file), prompt_column="question", answer_column="solution"))
    message = str(error.value)
    assert "column 'question' (from prompt_column) is not in the dataset" in message
    assert "['problem', 'level', 'type', 'solution']" in message


def test_missing_answer_column_names_answer_column(math_file):
    with pytest.raises(ValueError, match="column 'answer' \\(from answer_column\\)"):
        load(args(dataset_path=str(math_file), prompt_column="problem"))


def test_non_string_prompt_names_the_row(tmp_path):
    rows = [{"question": "1+1=", "answer": "2"}, {"question": "2+2=", "answer": "4"}, {"question": None, "answer": "6"}]
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(ValueError, match="row 2 \\(0-based\\) has a NoneType in prompt column 'question'"):
        load(args(dataset_path=str(path)))
    rows[2]["question"] = ["a", "list"]
    write_jsonl(path, rows)
    with pytest.raises(ValueError, match="row 2 \\(0-based\\) has a list in prompt column 'question'"):
        load(args(dataset_path=str(path)))


def test_list_answer_names_the_row(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"question": "1+1=", "answer": ["2", "two"]}])
    with pytest.raises(ValueError, match="row 0 \\(0-based\\) has a list in answer column 'answer'"):
        load(args(dataset_path=str(path)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("So the answer is $\\boxed{5}$.", "5"),
        ("\\boxed{1} first, then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # the last box, nested braces whole
        ("$\\boxed{ (3, 5] }$", "(3, 5]"),
        ("\\fbox{7}", "7"),
        ("The answer is $\\boxed 9$.", "9"),
        ("\\boxed{\\text{(A)}}", "\\text{(A)}"),
        ("no box", None),
        ("\\boxed{unbalanced", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("Natalia sold 48/2 = 24 clips.\n#### 72", "72"), ("#### 1,000", "1000"), ("#### -3.5 ", "-3.5"), ("72", None)],
)
def test_gsm8k_final_answer(text, expected):
    assert gsm8k_final_answer(text) == expected


def test_gold_reader_values():
    assert normalize_gold(72.0, "none") == "72"
    assert normalize_gold(0.5, "none") == "0.5"
    assert normalize_gold(None, "none") is None  # the training pipeline keeps "" (tests/test_gold_readers.py)
    assert normalize_gold("  x+1 ", "none") == "x+1"
    assert normalize_gold("Thus #### 12", "gsm8k") == "12"


def test_unknown_answer_extraction_is_an_error():
    with pytest.raises(ValueError, match="answer_extraction='latex' is unknown.*none, gsm8k, last_boxed, boxed"):
        args(answer_extraction="latex")


# --------------------------------------------------------------------------------------------------------------
# Filters


def test_filter_keeps_math_levels_3_to_5(math_file):
    train, _ = load(
        args(
            dataset_path=str(math_file),
            prompt_column="problem",
            answer_column="solution",
            answer_extraction="boxed",
            dataset_filter=LEVEL_3_TO_5,
        )
    )
    assert sorted(train["answer"]) == sorted(["\\frac{1}{2}", "3", "42", "5"])


def test_filter_with_operators(tmp_path):
    rows = [{"question": f"q{i}", "answer": str(i), "level": i, "type": t} for i, t in enumerate("aabbcc", start=1)]
    path = write_jsonl(tmp_path / "levels.jsonl", rows)
    conditions = {"level": {">=": 3, "<": 6}, "type": {"not_in": ["c"]}}
    train, _ = load(args(dataset_path=str(path), dataset_filter=conditions))
    assert sorted(train["answer"]) == ["3", "4"]
    train, _ = load(args(dataset_path=str(path), dataset_filter={"type": "a"}))
    assert sorted(train["answer"]) == ["1", "2"]


def test_filter_from_the_command_line_is_parsed():
    script, _, _ = parse_recipe(
        [
            "recipes/tiny_drgrpo.yaml",
            "--dataset_filter",
            '{"level": {">=": 3}, "type": ["Algebra"]}',
            "--output_dir",
            "unused",
        ]
    )
    assert script.dataset_filter == {"level": {">=": 3}, "type": ["Algebra"]}
    assert [str(c) for c in parse_filter(script.dataset_filter, "x")] == ["level >= 3", "type in ['Algebra']"]


@pytest.mark.parametrize(
    ("value", "op", "operand", "holds"),
    [
        (3, ">=", 3, True),
        (2, ">=", 3, False),
        (None, ">", 0, False),
        ("Level 3", "in", ["Level 3"], True),
        ("Level 3", "not_in", ["Level 3"], False),
        ("a", "!=", "b", True),
        (1.5, "<=", 1.5, True),
    ],
)
def test_condition_holds(value, op, operand, holds):
    assert condition_holds(value, op, operand) is holds


def test_filter_that_empties_the_dataset_names_the_condition(math_file):
    with pytest.raises(ValueError) as error:
        load(
            args(
                dataset_path=str(math_file),
                prompt_column="problem",
                answer_column="solution",
                dataset_filter={"type": "Algebra", "level": ["3", "4", "5"]},
            )
        )
    message = str(error.value)
    assert "condition `level in ['3', '4', '5']` kept 0 of 4 rows" in message
    assert "'Level 1'" in message  # the values the column really holds


def test_filter_on_a_missing_column_lists_the_columns(math_file):
    with pytest.raises(ValueError, match="column 'difficulty' \\(from dataset_filter \\(difficulty\\)\\)"):
        load(
            args(
                dataset_path=str(math_file),
                prompt_column="problem",
                answer_column="solution",
                dataset_filter={"difficulty": 3},
            )
        )


def test_filter_comparing_incompatible_types_is_an_error(math_file):
    with pytest.raises(ValueError, match="cannot compare column 'level'.*'Level 1'.* with 3"):
        load(
            args(
                dataset_path=str(math_file),
                prompt_column="problem",
                answer_column="solution",
                dataset_filter={"level": {">=": 3}},
            )
        )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"level": {"~": 3}}, "unknown operator '~'"),
        ({"level": {"in": 3}}, "needs a list"),
        (["level"], "must be a mapping"),
    ],
)
def test_malformed_filters_are_errors(spec, message):
    with pytest.raises(ValueError, match=message):
        args(dataset_path="unused.jsonl", dataset_filter=spec)


# --------------------------------------------------------------------------------------------------------------
# Mixtures


def test_normalized_weights_are_exact():
    assert normalized_weights([2, 1]) == [Fraction(2, 3), Fraction(1, 3)]
    assert sum(normalized_weights([0.1, 0.2, 0.7])) == 1


def test_apportion_by_largest_remainder():
    # Quotas 3.33 each: floors 3, 3, 3; the one row left goes to the first of the tied remainders.
    assert apportion(10, [1, 1, 1]) == [4, 3, 3]
    # Quotas 7.0 and 3.0 for weights 0.7/0.3 (exact fractions: no float drift to 6.999...).
    assert apportion(10, [0.7, 0.3]) == [7, 3]
    # Quotas 2.5, 1.5, 1.0 -> floors 2, 1, 1, one left over; remainders 0.5, 0.5, 0 -> the first gets it.
    assert apportion(5, [5, 3, 2]) == [3, 1, 1]
    assert apportion(0, [1, 2]) == [0, 0]


def test_default_mixture_size_uses_every_row_of_the_limiting_source():
    assert default_mixture_size([100, 50], [1, 1]) == 100  # 50 + 50
    assert default_mixture_size([100, 50], [2, 1]) == 150  # 100 + 50
    assert default_mixture_size([100, 50], [1, 3]) == 66  # floor(min(100 * 4, 50 * 4 / 3)) = floor(66.67)
    assert apportion(66, [1, 3]) == [17, 49]  # 16.5 and 49.5: the tie goes to the first; 49 <= 50


def test_sample_rows_repeats_only_when_asked_for_more_rows_than_exist():
    rows = [Example(f"q{i}", str(i), "s", i) for i in range(4)]
    rng = random.Random(0)
    assert sorted(e.row for e in sample_rows(rows, 3, rng)) != [] and len(set(sample_rows(rows, 4, rng))) == 4
    counts = Counter(e.row for e in sample_rows(rows, 10, rng))
    assert sorted(counts.values()) == [2, 2, 3, 3]  # two whole copies plus two distinct extra rows


def test_weighted_mixture_through_the_pipeline(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [{"q": f"a{i}", "gold": "1"} for i in range(30)])
    b = write_jsonl(tmp_path / "b.jsonl", [{"question": f"b{i}", "answer": "2"} for i in range(10)])
    mixture = [
        {"dataset_path": str(a), "prompt_column": "q", "answer_column": "gold", "weight": 0.75},
        {"dataset_path": str(b), "weight": 0.25},
    ]
    train, _ = load(args(dataset_mixture=mixture))
    # Limiting source b: 10 rows at share 1/4 -> 40 rows, 30 from a and 10 from b.
    assert Counter(train["answer"]) == {"1": 30, "2": 10}
    assert len(set(train["prompt"])) == 40
    train, _ = load(args(dataset_mixture=[{**mixture[0], "weight": 1}, {**mixture[1], "weight": 1}]))
    assert Counter(train["answer"]) == {"1": 10, "2": 10}
    train, _ = load(args(dataset_mixture=mixture, dataset_mixture_size=80))
    assert Counter(train["answer"]) == {"1": 60, "2": 20}  # b's 10 rows are used twice (and it says so)


def test_mixture_without_weights_concatenates(tmp_path, math_file):
    extra = write_jsonl(tmp_path / "extra.jsonl", [{"problem": "Say $\\pi$.", "level": "Level 3", "answer": "\\pi"}])
    mixture = [
        {"dataset_path": str(math_file), "answer_column": "solution", "answer_extraction": "boxed"},
        {"dataset_path": str(extra), "answer_column": "answer"},
    ]
    train, _ = load(args(dataset_mixture=mixture, prompt_column="problem", dataset_filter=LEVEL_3_TO_5))
    assert sorted(train["answer"]) == sorted(["\\frac{1}{2}", "3", "42", "5", "\\pi"])


def test_mixture_from_a_recipe_file(tmp_path, math_file):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"dataset_mixture:\n  - dataset_path: {math_file}\n    weight: 2\n    answer_extraction: boxed\n"
        f"  - dataset_path: {math_file}\n    weight: 1\n    answer_extraction: boxed\n"
        "prompt_column: problem\nanswer_column: solution\noutput_dir: unused\nuse_cpu: true\nbf16: false\n"
    )
    script, _, _ = parse_recipe([str(recipe)])
    train, _ = load(script)
    # 7 rows each at weights 2:1 -> min(7 * 3 / 2, 7 * 3) = 10.5 -> 10 rows: 7 + 3 (largest remainder: 6.67, 3.33).
    assert len(train) == 10


@pytest.mark.parametrize(
    ("mixture", "extra", "message"),
    [
        ([{"dataset_path": "a.jsonl", "weight": 1}, {"dataset_path": "b.jsonl"}], {}, "give every source a weight"),
        ([{"dataset_path": "a.jsonl", "wieght": 1}], {}, "unknown key 'wieght'. Did you mean 'weight'"),
        ([{"dataset_path": "a.jsonl", "dataset_name": "x/y"}], {}, "exactly one of dataset_name"),
        ([{"dataset_path": "a.jsonl", "weight": -1}], {}, "weight must be a positive number"),
        ([{"dataset_path": "a.jsonl"}], {"dataset_path": "b.jsonl"}, "remove dataset_name/dataset_path"),
        (["a.jsonl"], {}, "must be a mapping"),
        ([], {}, "non-empty list"),
    ],
)
def test_mixture_errors(mixture, extra, message):
    with pytest.raises(ValueError, match=message):
        load(args(dataset_mixture=mixture, **extra))


def test_mix_sources_logs_repeats(caplog):
    small = [Example("q", "1", "small.jsonl", 0)]
    big = [Example(f"q{i}", "2", "big.jsonl", i) for i in range(3)]
    with caplog.at_level(logging.WARNING, logger="drgrpo.data"):
        mixed = mix_sources([small, big], [1, 1], 4, random.Random(0))
    assert len(mixed) == 4
    assert "small.jsonl repeats rows (2 drawn from 1)" in caplog.text


# --------------------------------------------------------------------------------------------------------------
# Shuffling, sample caps, held-out sets


def test_shuffling_is_seeded(tmp_path, addition_rows):
    path = write_jsonl(tmp_path / "data.jsonl", addition_rows)
    first, _ = load(args(dataset_path=str(path)), seed=1)
    again, _ = load(args(dataset_path=str(path)), seed=1)
    other, _ = load(args(dataset_path=str(path)), seed=2)
    assert first["prompt"] == again["prompt"]
    assert first["prompt"] != other["prompt"]
    assert sorted(first["prompt"]) == sorted(other["prompt"])
    assert first["prompt"] != [row["question"] for row in addition_rows]


def test_max_train_samples_and_dataset_test_size(tmp_path, addition_rows):
    path = write_jsonl(tmp_path / "data.jsonl", addition_rows)
    train, held_out = load(args(dataset_path=str(path), dataset_test_size=6, max_train_samples=20), seed=3)
    assert (len(train), len(held_out)) == (20, 6)
    assert not set(train["prompt"]) & set(held_out["prompt"])
    with pytest.raises(ValueError, match="dataset_test_size=36 holds out every training row"):
        load(args(dataset_path=str(path), dataset_test_size=36))


def test_held_out_file_uses_the_training_mapping(tmp_path, math_file):
    test_file = write_jsonl(tmp_path / "test.jsonl", MATH_ROWS[2:4])
    train, held_out = load(
        args(
            dataset_path=str(math_file),
            dataset_test_path=str(test_file),
            prompt_column="problem",
            answer_column="solution",
            answer_extraction="boxed",
        )
    )
    assert len(train) == 7
    assert sorted(held_out["answer"]) == ["3", "\\frac{1}{2}"]


def test_held_out_errors(math_file):
    with pytest.raises(ValueError, match="Set at most one of dataset_test_path, dataset_test_size"):
        load(args(dataset_path=str(math_file), dataset_test_path=str(math_file), dataset_test_size=2))
    with pytest.raises(ValueError, match="dataset_test_split names a split of dataset_name"):
        load(args(dataset_path=str(math_file), dataset_test_split="test"))


def test_positive_integer_keys_are_checked():
    with pytest.raises(ValueError, match="max_prompt_tokens must be a positive integer"):
        args(max_prompt_tokens=0)
    with pytest.raises(ValueError, match="show_prompts must be >= 0"):
        args(show_prompts=-1)


# --------------------------------------------------------------------------------------------------------------
# Templates in the pipeline, max_prompt_tokens


def test_chat_template_rows_are_conversational(tmp_path, addition_rows, tokenizer):
    path = write_jsonl(tmp_path / "data.jsonl", addition_rows[:3])
    train, _ = load(args(dataset_path=str(path), prompt_template="chat", system_prompt="Add."), tokenizer=tokenizer)
    assert train[0]["prompt"][0] == {"role": "system", "content": "Add."}
    assert train[0]["prompt"][1]["role"] == "user"


def test_max_prompt_tokens_drops_long_prompts_and_reports(tmp_path, tokenizer, caplog):
    rows = [{"question": "1" * n, "answer": "1"} for n in (5, 10, 20, 40)]
    path = write_jsonl(tmp_path / "lengths.jsonl", rows)
    with caplog.at_level(logging.WARNING, logger="drgrpo.data"):
        train, _ = load(args(dataset_path=str(path), max_prompt_tokens=20), tokenizer=tokenizer)
    # plain template, char-level tokenizer (no BOS): a prompt of n characters is n tokens.
    assert sorted(len(p) for p in train["prompt"]) == [5, 10, 20]
    assert "max_prompt_tokens=20: dropped 1 of 4 training prompts (longest: 40 tokens)" in caplog.text


def test_max_prompt_tokens_counts_the_chat_template_and_its_kwargs(tmp_path, tokenizer):
    path = write_jsonl(tmp_path / "one.jsonl", [{"question": "1+1=", "answer": "2"}])
    # "<|im_start|>user\n1+1=<|im_end|>\n<|im_start|>assistant\n" = 1+5+4+1+1+1+9+1 = 23 tokens; thinking off adds
    # "<think>\n\n</think>\n\n" = 6 more.
    chat = args(dataset_path=str(path), prompt_template="chat", max_prompt_tokens=23)
    assert len(load(chat, tokenizer=tokenizer)[0]) == 1
    with pytest.raises(ValueError, match="drops every training prompt \\(the shortest has 29 tokens\\)"):
        load(chat, tokenizer=tokenizer, chat_template_kwargs={"enable_thinking": False})


def test_max_prompt_tokens_needs_a_tokenizer(tmp_path, addition_rows):
    path = write_jsonl(tmp_path / "data.jsonl", addition_rows)
    with pytest.raises(ValueError, match="max_prompt_tokens needs the model's tokenizer"):
        load(args(dataset_path=str(path), max_prompt_tokens=10))


# --------------------------------------------------------------------------------------------------------------
# Gold answers the accuracy reward cannot parse


def test_unparseable_indices_checks_each_distinct_answer_once():
    seen = []

    def usable(golds):
        seen.append(list(golds))
        return [g != "?" for g in golds]

    assert unparseable_indices(["1", "?", "1", "?", "2"], usable) == [1, 3]
    assert seen == [["1", "?", "2"]]


def test_unparseable_gold_answers_are_counted_and_reported(math_file, caplog):
    math_args = args(
        dataset_path=str(math_file), prompt_column="problem", answer_column="solution", answer_extraction="boxed"
    )
    bad_golds = {"8", "3", ""}
    with caplog.at_level(logging.WARNING, logger="drgrpo.data"):
        train, _ = load(math_args, gold_check=lambda golds: [g not in bad_golds for g in golds])
    assert len(train) == 7
    [message] = [r.getMessage() for r in caplog.records if "cannot parse" in r.getMessage()]
    assert message.startswith("3 of 7 training rows have a gold answer the accuracy reward cannot parse")
    assert message.count(" row ") == 3  # three examples, each naming its file and row
    assert "math.jsonl row 6: answer ''" in message

    math_args.drop_unparseable_answers = True
    train, _ = load(math_args, gold_check=lambda golds: [g not in bad_golds for g in golds])
    assert sorted(train["answer"]) == sorted(["2", "\\frac{1}{2}", "42", "5"])


def test_the_reward_grader_decides_what_parses():
    # The real check: the accuracy reward's own grader (normalisation, math-verify, worker processes).
    usable = reward_gold_check(DataArguments(check_gold_answers=True))
    assert usable(["72", "\\frac{1}{2}", "(-2,-9)", "", "#### 1,000"]) == [True, True, True, False, True]


def test_check_gold_answers_off_skips_the_check(math_file):
    def fail(golds):
        raise AssertionError("the gold check ran")

    math_args = args(dataset_path=str(math_file), prompt_column="problem", answer_column="solution")
    math_args.check_gold_answers = False
    assert len(load(math_args, gold_check=fail)[0]) == 7


# --------------------------------------------------------------------------------------------------------------
# --show_prompts


def test_format_prompts_shows_the_exact_text_and_gold(tokenizer):
    dataset = Dataset.from_dict(
        {"prompt": [render_prompt("1+1=", "chat", "Add."), render_prompt("2+2=", "chat")], "answer": ["2", "4"]}
    )
    text = format_prompts(dataset, 1, tokenizer, {"enable_thinking": False})
    prompt = "<|im_start|>system\nAdd.<|im_end|>\n<|im_start|>user\n1+1=<|im_end|>\n<|im_start|>assistant\n"
    prompt += "<think>\n\n</think>\n\n"
    assert text == (
        f"===== prompt 1 of 1, {len(tokenizer(prompt)['input_ids'])} tokens =====\n{prompt}\n"
        f"===== ends with: {prompt[-40:]!r} =====\ngold answer: 2"
    )


def test_show_prompts_prints_and_exits_without_model_weights(tmp_path, addition_data, monkeypatch, capsys):
    """`scripts/train.py RECIPE --show_prompts 2`, run in this process (runpy) to skip a second interpreter start."""
    # A folder with the tokenizer only: loading model weights would fail, so exiting cleanly proves it did not.
    tokenizer_only = tmp_path / "tokenizer-only"
    build_tokenizer().save_pretrained(tokenizer_only)
    argv = [
        "scripts/train.py",
        "recipes/tiny_drgrpo.yaml",
        "--model_name_or_path", str(tokenizer_only),
        "--dataset_path", str(addition_data["train"]),
        "--output_dir", str(tmp_path / "out"),
        "--prompt_template", "chat",
        "--system_prompt", "Add the numbers.",
        "--chat_template_kwargs", '{"enable_thinking": false}',
        "--show_prompts", "2",
    ]  # fmt: skip
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(ROOT / "scripts" / "train.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert out.count("===== prompt ") == 2
    assert "<|im_start|>system\nAdd the numbers.<|im_end|>\n<|im_start|>user\n" in out
    assert "<|im_start|>assistant\n<think>\n\n</think>\n\n\n===== ends with:" in out
    assert "chat_template_kwargs={'enable_thinking': False}" in out
    golds = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("gold answer: ")]
    questions = [line.split("\n")[0] for line in out.split("<|im_start|>user\n")[1:]]
    for question, gold in zip(questions, golds, strict=True):
        a, b = question.removesuffix("<|im_end|>").rstrip("=").split("+")
        assert int(gold) == int(a) + int(b)
    assert not (tmp_path / "out").exists()
