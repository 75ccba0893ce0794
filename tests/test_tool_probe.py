"""The tool probe (issue 45): exact answers, a one-shot example of another kind than every family, the window rule.

No model: the probe itself runs on SmolLM2 (`make probe-tools`)."""

from __future__ import annotations

import re

import pytest

from drgrpo.experiments.tool_probe import (
    EXAMPLE_IN_WORDS,
    EXAMPLE_QUESTION,
    EXAMPLE_WITH_TOOL,
    FAMILIES,
    ROUNDS,
    TOOL_DESCRIPTION,
    box_equals_output,
    chain2_problem,
    chain_problem,
    chosen_task,
    held_out_set,
    in_window,
    list_sum_problem,
    matches_kind,
    modpow_problem,
    percent_of_problem,
    probe_recipe,
    product3_problem,
    product_problem,
    product_words_problem,
    range_count_problem,
    square_sum_problem,
)


def test_answers_by_hand():
    assert product_problem(12345, 6789).answer == 83810205
    # 734 * 28 = 20552; - 1519 = 19033; * 6 = 114198; + 4127 = 118325
    chain = chain_problem(734, [("multiply", 28), ("subtract", 1519), ("multiply", 6), ("add", 4127)])
    assert chain.answer == 118325
    assert (
        "Start with 734. Multiply it by 28, then subtract 1519, then multiply it by 6, then add 4127." in chain.question
    )
    assert modpow_problem(3, 4, 7).answer == 4  # 81 = 11 * 7 + 4
    assert modpow_problem(2, 10, 1000).answer == 24  # 1024
    assert list_sum_problem([12, 7, 30, 45, 8], 3).answer == 87  # 12 + 30 + 45
    assert range_count_problem(30, 3, 2).answer == 5  # 3, 9, 15, 21, 27
    assert range_count_problem(100, 4, 6).answer == 17  # 25 multiples of 4, less the 8 of 12
    # The second round's families.
    chain2 = chain2_problem(734, 28, "subtract", 1519)  # 20552 - 1519
    assert chain2.answer == 19033 and "Start with 734. Multiply it by 28, then subtract 1519." in chain2.question
    assert product_words_problem(12345, 6789).answer == 83810205
    assert "12345 multiplied by 6789?" in product_words_problem(12345, 6789).question
    assert product3_problem(123, 45, 6789).answer == 37577115  # 5535 * 6789 = 33210000 + 4367115
    assert square_sum_problem(1000, 2001).answer == 5004001  # 1000000 + 4004001
    assert "1000^2 + 2001^2" in square_sum_problem(1000, 2001).question
    assert percent_of_problem(36, 482).answer == 17352  # 36% of 48200
    assert "36% of 48200?" in percent_of_problem(36, 482).question


def test_rounds_name_every_family_once():
    named = [family for families in ROUNDS.values() for family in families]
    assert sorted(named) == sorted(FAMILIES) and len(named) == len(set(named))


def _recompute(family: str, question: str) -> int:
    """The answer read back from the question's text, computed another way than the generator."""
    numbers = [int(n) for n in re.findall(r"\d+", question)]
    if family == "product":
        return numbers[0] * numbers[1]
    if family == "product_words":
        return numbers[0] * numbers[1]
    if family == "product3":
        return numbers[0] * numbers[1] * numbers[2]
    if family == "square_sum":  # "A^2 + B^2"
        return numbers[0] ** 2 + numbers[2] ** 2
    if family == "percent_of":
        return numbers[0] * numbers[1] // 100
    if family in ("chain", "chain2"):
        value = numbers[0]
        for op, k in re.findall(r"(multiply it by|add|subtract) (\d+)", question, flags=re.IGNORECASE):
            op = op.lower()
            value = value * int(k) if op.startswith("multiply") else value + int(k) if op == "add" else value - int(k)
        return value
    if family == "modpow":
        base, exponent, modulus = numbers
        result = 1
        for _ in range(exponent):
            result = result * base % modulus
        return result
    if family == "list_sum":
        *listed, divisor = numbers
        return sum(n for n in listed if n % divisor == 0)
    limit, a, b = numbers[1:]  # "from 1 to LIMIT ... by A but not by B"
    return limit // a - limit // (a * b // __import__("math").gcd(a, b))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_held_out_answers_are_exact_and_fixed(family):
    problems = held_out_set(family, 40, seed=0)
    assert len({p.question for p in problems}) == 40
    for problem in problems:
        assert problem.answer == _recompute(family, problem.question), problem
        assert problem.answer >= 0 and problem.question.endswith("Put your final answer in \\boxed{}.")
        assert matches_kind(problem.question, family)
    assert held_out_set(family, 40, seed=0) == problems  # a fixed seed: the same set every time
    assert held_out_set(family, 10, seed=0) == problems[:10]
    assert held_out_set(family, 10, seed=1) != problems[:10]


def test_answers_are_not_guessable():
    """No answer covers more than 5% of a held-out set (a constant guess would score below the window's floor)."""
    for family in FAMILIES:
        answers = [p.answer for p in held_out_set(family, 100)]
        assert max(answers.count(a) for a in set(answers)) < 5, family


@pytest.mark.parametrize("with_tool", [True, False])
def test_the_one_shot_example_is_of_no_family_kind(with_tool):
    recipe = probe_recipe(with_tool, {"tool_output_chars": 200, "tool_max_calls": 2, "learning_rate": 1e-5})
    [example] = recipe["chat_examples"]
    assert example == {"question": EXAMPLE_QUESTION, "answer": EXAMPLE_WITH_TOOL if with_tool else EXAMPLE_IN_WORDS}
    prompt = " ".join([recipe["system_prompt"], example["question"], example["answer"]])
    for family in FAMILIES:
        assert not matches_kind(prompt, family), family
    assert "\\boxed{301}" in example["answer"]
    # Without the tool: the prompt minus the tool's description (no Python anywhere); with it: the tool's keys kept.
    assert ("```python" in prompt and TOOL_DESCRIPTION in prompt) is with_tool
    assert "python" not in prompt.lower() or with_tool
    assert recipe["tool_output_chars"] == 200 and "tool_max_calls" not in recipe and "learning_rate" not in recipe


def test_the_example_runs_as_written():
    code = EXAMPLE_WITH_TOOL.split("```python\n")[1].split("```")[0]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {})
    assert out.getvalue().strip() == "301"


@pytest.mark.parametrize(
    ("with_tool", "without_tool", "expected"),
    [
        (0.05, 0.0, True),  # both ends of the window included
        (0.40, 0.04, True),
        (0.20, 0.049, True),
        (0.04, 0.0, False),  # below the window
        (0.41, 0.0, False),  # above it: the prompt alone already teaches the task
        (0.20, 0.05, False),  # without the tool must be below 5%, not at it
        (0.99, 0.0, False),
    ],
)
def test_window_rule(with_tool, without_tool, expected):
    assert in_window(with_tool, without_tool) is expected


def test_box_equals_output():
    rows = [
        {"tool_calls": 1, "completion": "x \\boxed{42}", "turns": [{"observation": "42\n"}, {"observation": None}]},
        {"tool_calls": 2, "completion": "\\boxed{7}", "turns": [{"observation": "7"}, {"observation": "8"}]},
        {"tool_calls": 0, "completion": "\\boxed{1}", "turns": []},  # no program: not counted
    ]
    assert box_equals_output(rows) == 0.5
    assert box_equals_output([]) is None  # no program ran: nothing to compare


def test_the_task_is_the_family_in_the_window_nearest_its_middle():
    def row(family, with_tool, without_tool=0.0):
        return {"family": family, "B4": {"accuracy": with_tool}, "in_window": in_window(with_tool, without_tool)}

    rows = [row("a", 0.68), row("b", 0.12), row("c", 0.30), row("d", 0.22, without_tool=0.06)]
    assert chosen_task(rows) == "c"  # |0.30 - 0.225| < |0.12 - 0.225|; d is nearer but fails without the tool
    assert chosen_task([row("a", 0.68), row("e", 0.02)]) is None


def test_probe_tools_says_samples_were_read_only_when_an_earlier_command_saved_them(tmp_path, run_script, monkeypatch):
    """Issue 54, item 8: `make probe-tools` said "samples saved by an earlier one are read" on its first run too. The
    evaluator (which trains nothing, but runs SmolLM2) is replaced by one that writes its samples.jsonl as the real one
    does: the first command reads none, its rerun reads them all."""
    import json
    from pathlib import Path

    import drgrpo.evaluation
    import drgrpo.setup.model_prep as model_prep

    def evaluate(model_path, data_file, output_dir, **kwargs):
        rows = [json.loads(line) for line in open(data_file)]
        sample = {"sample_index": 0, "completion": "\\boxed{1}", "extracted": "1", "correct": False, "truncated": False}
        samples = [{**sample, "problem_index": i, "gold": row["answer"]} for i, row in enumerate(rows)]
        folder = Path(output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
        return {"pass@1": 0.0, "truncation_rate": 0.0}

    monkeypatch.setattr(drgrpo.evaluation, "evaluate", evaluate)
    monkeypatch.setattr(model_prep, "prepare_model", lambda name: None)
    command = ["scripts/probe_tool_tasks.py", "--families", "product", "--num_test", "3", "--output_dir", str(tmp_path)]
    first = run_script(*command)
    assert first.returncode == 0, first.stderr[-3000:]
    line = next(line for line in first.stdout.splitlines() if "this command " in line)
    assert "earlier" not in line and "samples read" not in line, line
    again = run_script(*command)
    assert again.returncode == 0, again.stderr[-3000:]
    line = next(line for line in again.stdout.splitlines() if "this command " in line)
    assert "(6 of 6 samples read from an earlier command's, not generated again)" in line, line
