"""Small local stand-ins for the datasets the shipped recipes name, each in that dataset's own format.

Each format lists the real dataset's columns, with the real value types and conventions (MATH's `level` is the
string "Level 3", MATH-500's is the integer 3; MATH's gold answer exists only as the last \\boxed{} of `solution`,
GSM8K's after `####`), so that a recipe whose column names, filter or answer_extraction do not fit its dataset fails
on these rows as it would on the real data. Questions are short sums: the tiny model's prompts must fit its 512
positions, and the answers must be gradable.

A recipe that names a dataset not listed here fails the recipe run with a message saying so: add its format below
(its columns from the dataset card), not a generic row built from the recipe's own keys, which would hide the
mismatches this exists to catch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

Row = dict[str, object]


def _sum(i: int) -> tuple[int, int, int]:
    a, b = 3 + 7 * i % 40, 5 + 11 * i % 30
    return a, b, a + b


def math_row(i: int) -> Row:
    """MATH (Hendrycks et al. 2021) as DigitalLearningGmbH/MATH-lighteval ships it: problem, level, type, solution."""
    a, b, c = _sum(i)
    return {
        "problem": f"What is ${a}+{b}$?",
        "level": f"Level {1 + i % 5}",
        "type": "Prealgebra",
        "solution": f"Adding, ${a}+{b}={c}$, so the sum is $\\boxed{{{c}}}$.",
    }


def zwhe99_math_row(i: int) -> Row:
    """zwhe99/MATH (splits train/test/math500/math4500): MATH's columns plus id and expected_answer."""
    row = math_row(i)
    a, b, c = _sum(i)
    return {**row, "id": f"test/prealgebra/{i}.json", "expected_answer": str(c)}


def math500_row(i: int) -> Row:
    """HuggingFaceH4/MATH-500: problem, solution, answer, subject, level (an integer), unique_id."""
    row = math_row(i)
    a, b, c = _sum(i)
    return {
        "problem": row["problem"],
        "solution": row["solution"],
        "answer": str(c),
        "subject": "Prealgebra",
        "level": 1 + i % 5,
        "unique_id": f"test/prealgebra/{i}.json",
    }


def gsm8k_row(i: int) -> Row:
    """openai/gsm8k (config main): question, answer (a worked solution ending in `#### N`)."""
    a, b, c = _sum(i)
    return {"question": f"Ann has {a} apples and buys {b} more. How many now?", "answer": f"{a}+{b}={c}\n#### {c}"}


def chat_addition_row(i: int) -> Row:
    """The real demo's task file (drgrpo/experiments/arithmetic_task.py): a chat question, the sum as the answer."""
    a, b, c = _sum(i)
    return {"question": f"What is {a} + {b}? Put your final answer in \\boxed{{}}.", "answer": str(c)}


def addition_row(i: int) -> Row:
    """The tiny demo's task file (`make demo-tiny` writes outputs/demo-tiny/data/train.jsonl): `47+38=`, `85`."""
    a, b, c = _sum(i)
    return {"question": f"{a}+{b}=", "answer": str(c)}


def product_row(i: int) -> Row:
    """The tool demo's task file (`make demo-tools` writes outputs/demo-tools/data/train.jsonl)."""
    from drgrpo.experiments.product_task import problem_row

    return problem_row(1000 + 97 * i, 100 + 13 * i)


def tool_rl_row(i: int) -> Row:
    """`make tool-rl`'s task file (outputs/tool-rl/data/train.jsonl): the probe's choice, `What is A^2 + B^2?`."""
    from drgrpo.experiments.tool_probe import square_sum_problem

    return square_sum_problem(1000 + 97 * i, 2000 + 13 * i).row()


def code_rl_row(i: int) -> Row:
    """`make code-rl`'s task file (outputs/code-rl/data/train.jsonl): a problem of a probe family with its tests (the
    probe chose none: docs/code-rl.md; this family is the nearest its window)."""
    from drgrpo.experiments.code_families import problem

    return problem("digit_sum_times_fn", (2 + i,)).row()


def verifiable_coding_row(i: int) -> Row:
    """open-r1/verifiable-coding-problems-python(-10k): source, task_type, in_source_id, problem,
    gold_standard_solution, problem_id, metadata, verification_info (a struct: language, test_cases of {type, input,
    output})."""
    a, b, c = _sum(i)
    return {
        "source": "apps",
        "task_type": "verifiable_code",
        "in_source_id": str(i),
        "problem": f"Solve the following coding problem using the programming language python: read two integers and "
        f"print their sum. Example: input {a} {b}, output {c}. Now solve the problem and return the code.",
        "gold_standard_solution": "```python\na, b = map(int, input().split())\nprint(a + b)\n```",
        "problem_id": f"vfc_{i}",
        "metadata": json.dumps({"difficulty": "interview"}),
        "verification_info": {
            "language": "python",
            "test_cases": [{"type": "stdin_stdout", "input": f"{a} {b}\n", "output": f"{c}\n"}],
        },
    }


def code_task_row(i: int) -> Row:
    """The shipped code task set (rewards/code/tasks/code_tasks.jsonl), whose real rows are local: used as they are."""
    from rewards.code.taskset import load_task_set

    rows = load_task_set()
    return rows[i % len(rows)]


def flattened_verl_row(i: int) -> Row:
    """verl's math parquet after the flattening that the converted recipe's header asks for: the question under the
    recipe's (default) prompt_column `prompt`, the gold (verl's reward_model.ground_truth) under `answer`."""
    a, b, c = _sum(i)
    return {"prompt": f"What is ${a}+{b}$?", "answer": str(c)}


# Hub dataset id (or the local path a recipe ships with) -> one row of that dataset's format.
FORMATS: dict[str, Callable[[int], Row]] = {
    "DigitalLearningGmbH/MATH-lighteval": math_row,
    "zwhe99/MATH": zwhe99_math_row,
    "HuggingFaceH4/MATH-500": math500_row,
    "openai/gsm8k": gsm8k_row,
    "outputs/demo-tiny/data/train.jsonl": addition_row,
    "outputs/demo/data/train.jsonl": chat_addition_row,  # `make demo` (SmolLM2) and `make compare`
    "outputs/bias/data/train.jsonl": addition_row,  # `make bias` writes the same question/answer columns
    "outputs/demo-tools/data/train.jsonl": product_row,  # `make demo-tools` (SmolLM2 with the Python tool)
    "outputs/tool-rl/data/train.jsonl": tool_rl_row,  # `make tool-rl` (the probe's task, issue 45)
    "outputs/code-rl/data/train.jsonl": code_rl_row,  # `make code-rl` (a probe family, issue 55)
    "outputs/bias-real/data/train.jsonl": chat_addition_row,  # `make bias-real`: the demo's chat additions
    "open-r1/verifiable-coding-problems-python-10k": verifiable_coding_row,
    "rewards/code/tasks/code_tasks.jsonl": code_task_row,
    # The verl-converted recipe's files (recipes/qwen2.5_math_1.5b_drgrpo_from_verl.yaml), flattened by the user.
    "data/math_l3to5/train.parquet": flattened_verl_row,
    "data/math500/test.parquet": flattened_verl_row,
}


def write_format(source: str, path: Path, rows: int = 20) -> Path:
    """Write `rows` rows of `source`'s format to the jsonl file `path`; a `KeyError` naming `source` if unknown."""
    if source not in FORMATS:
        raise KeyError(
            f"No local stand-in for the dataset {source!r}: add its format (its real columns and value types) to "
            "FORMATS in tests/dataset_formats.py."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(rows):
            f.write(json.dumps(FORMATS[source](i)) + "\n")
    return path
