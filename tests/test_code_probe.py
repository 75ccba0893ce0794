"""The code probe (issue 55): problems whose tests are exact and fixed, held-out and training sets disjoint by problem,
a one-shot example of another kind than every family, the window, what the probe's table reads from the samples.

The references run in the real sandbox (skipped only where the kernel refuses namespaces); the model runs in the slow
miniature at the end (`make probe-code` itself runs on SmolLM2)."""

from __future__ import annotations

import contextlib
import io
import json
import random

import pytest
from conftest import ROOT, skip_unless_required

from drgrpo.experiments.code_families import (
    FAMILIES,
    TESTS_PER_PROBLEM,
    count_letters,
    count_letters_fn,
    digit_sum_times,
    digit_sum_times_fn,
    fizz_word,
    fizz_word_fn,
    held_out_set,
    larger_times,
    larger_times_fn,
    list_max_plus,
    matches_kind,
    problem,
    reverse_replace,
    reverse_replace_fn,
    sum_plus,
    sum_plus_fn,
    training_set,
)
from drgrpo.experiments.code_probe import (
    RECIPE,
    ROUNDS,
    chosen_task,
    exception_name,
    in_window,
    needs_code_format,
    probe_recipe,
    program_outcomes,
    sampled_signal,
)
from drgrpo.recipe.file import read_recipe
from rewards import RewardArguments
from rewards.code import NamespacesUnavailable, code_reward, parse_tests
from rewards.code.taskset import as_completion
from rewards.report import RewardReport


def _cases(p):
    return [(case.input, case.output) for case in parse_tests(p.tests)]


def test_answers_by_hand():
    rng = random.Random(0)
    assert all(int(out) == sum(map(int, inp.split())) + 7 for inp, out in _cases(sum_plus(7, rng)))
    cases = _cases(larger_times(3, rng))
    assert all(int(out) == 3 * max(map(int, inp.split())) for inp, out in cases)
    assert len({inp.split()[0] == inp.split()[1] for inp, _ in cases}) == 2  # a tie among the tests, and not only
    p = count_letters("aei", rng)
    assert "the letter a, e or i" in p.question
    assert all(int(out) == sum(ch in "aei" for ch in inp) for inp, out in _cases(p))
    assert all(int(out) == 5 * sum(map(int, inp.strip())) for inp, out in _cases(digit_sum_times(5, rng)))
    p = list_max_plus(10, rng)
    assert p.tests["fn_name"] == "largest"
    assert all(out == max(args[0]) + 10 for args, out in zip(p.tests["inputs"], p.tests["outputs"], strict=True))
    # FizzBuzz with one rule: n = 7, multiples of 3 -> 1 2 Pop 4 5 Pop 7.
    assert fizz_word(3, "Pop", rng).tests["test_cases"][0]["output"] != ""
    oracle = {c["input"]: c["output"] for c in fizz_word(3, "Pop", random.Random(1)).tests["test_cases"]}
    for inp, out in oracle.items():
        n = int(inp)
        assert out.split() == ["Pop" if i % 3 == 0 else str(i) for i in range(1, n + 1)]
    p = reverse_replace("a", "z", rng)
    assert all(out == inp.strip()[::-1].replace("a", "z") + "\n" for inp, out in _cases(p))
    assert "Print the line reversed, with every letter a replaced by z." in p.question


def test_the_second_round_asks_the_same_computations_as_calls():
    rng = random.Random(0)
    p = sum_plus_fn(7, rng)
    assert (
        p.tests["fn_name"] == "total" and "total(numbers) that returns the sum of the list numbers plus 7" in p.question
    )
    assert all(out == sum(args[0]) + 7 for args, out in zip(p.tests["inputs"], p.tests["outputs"], strict=True))
    p = larger_times_fn(3, rng)
    assert [a == b for a, b in p.tests["inputs"]].count(True) >= 1  # a tie
    assert all(out == 3 * max(args) for args, out in zip(p.tests["inputs"], p.tests["outputs"], strict=True))
    p = digit_sum_times_fn(4, rng)
    assert all(
        out == 4 * sum(map(int, str(a[0]))) for a, out in zip(p.tests["inputs"], p.tests["outputs"], strict=True)
    )
    p = count_letters_fn("xyz", rng)
    assert all(
        out == sum(c in "xyz" for c in a[0]) for a, out in zip(p.tests["inputs"], p.tests["outputs"], strict=True)
    )
    assert fizz_word_fn(3, "Pop", rng).tests["outputs"][-1][:4] == [1, 2, "Pop", 4]  # the last test reaches 3
    p = reverse_replace_fn("a", "z", rng)
    assert all(
        out == a[0][::-1].replace("a", "z") for a, out in zip(p.tests["inputs"], p.tests["outputs"], strict=True)
    )


def test_the_rounds_name_every_family_once():
    named = [family for families in ROUNDS.values() for family in families]
    assert sorted(named) == sorted(FAMILIES) and len(named) == len(set(named))
    assert all(name + "_fn" in ROUNDS[1] or name in ROUNDS[1] for name in (f.removesuffix("_fn") for f in ROUNDS[2]))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_held_out_sets_are_fixed_distinct_problems_with_their_own_tests(family):
    problems = held_out_set(family, 50)
    assert len({p.key for p in problems}) == 50 and len({p.question for p in problems}) == 50
    for p in problems:
        assert len(parse_tests(p.tests)) == TESTS_PER_PROBLEM
        assert matches_kind(p.question, family)
        assert p.question.endswith("Put it in one ```python code block.")
        assert problem(family, p.params) == p  # the tests are a function of the problem alone
        row = p.row()
        assert json.loads(row["verification_info"]) == p.tests and row["key"] == p.key
    assert held_out_set(family, 50) == problems  # the same set on every run
    assert held_out_set(family, 10) == problems[:10]
    assert held_out_set(family, 10, seed=1) != problems[:10]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_training_problems_are_never_held_out(family):
    held_out = held_out_set(family, 50)
    train = training_set(family, 150, held_out)
    assert len(train) == 150 and len({p.key for p in train}) == 150
    assert not {p.key for p in train} & {p.key for p in held_out}  # by parameters: the same function is the same
    assert training_set(family, 150, held_out) == train


def test_a_family_has_too_few_problems_for_a_larger_set():
    with pytest.raises(ValueError, match="fizz_word has 240 problems, fewer than the 241 asked for"):
        held_out_set("fizz_word", 241)


@pytest.fixture(scope="module")
def sandbox_reward():
    try:
        # A generous limit: the references take milliseconds, and a loaded machine must not make them time out.
        return code_reward(RewardArguments(code_timeout=10.0, code_num_workers=2, code_scoring="all"))
    except NamespacesUnavailable as exc:
        skip_unless_required("namespaces", f"no namespaces on this kernel: {exc}")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_references_pass_their_tests_and_a_near_miss_does_not(family, sandbox_reward):
    """Each family's reference (written apart from the oracle that made the tests) passes all tests of 8 held-out
    problems, in the real sandbox; the reference of another problem of the family (another parameter) fails."""
    problems = held_out_set(family, 8)
    texts = [as_completion(p.reference) for p in problems]
    tests = [json.dumps(p.tests) for p in problems]
    assert sandbox_reward(texts, report=RewardReport(8), verification_info=tests) == [1.0] * 8
    shifted = sandbox_reward(texts[1:] + texts[:1], report=RewardReport(8), verification_info=tests)
    assert shifted == [0.0] * 8


def test_the_probes_outcomes_name_each_runtime_error_and_count_syntax_errors_apart(sandbox_reward):
    """`program_outcomes` on four answers to one problem: the shares of the outcome classes, and the exception of
    the runtime error alone (a program that does not compile is a syntax error, whatever the sandbox raised)."""
    p = sum_plus(3, random.Random(0))
    answers = [
        as_completion(p.reference),
        as_completion("print(sum(map(int, input().split()) + 3)\n"),  # does not compile
        as_completion("print(undefined + 3)\n"),  # NameError
        "no block at all",
    ]
    rows = [{"completion": a, "gold": json.dumps(p.tests), "num_tokens": 10} for a in answers]
    result = program_outcomes(rows, {"code_timeout": 10.0, "code_num_workers": 2})
    assert (result["all_tests"], result["syntax_error"], result["runtime_error"], result["no_block"]) == (0.25,) * 4
    assert result["exceptions"] == {"NameError": 1} and result["block"] == 0.75 and result["program_lines"] == 1.0


def test_sampled_answers_as_groups(sandbox_reward):
    """`sampled_signal`: each problem's samples a group scored by the code reward (a cut answer 0): the mean reward,
    the groups whose rewards differ, the groups with a full pass."""
    p, q = sum_plus(3, random.Random(0)), sum_plus(4, random.Random(0))
    right, wrong = as_completion(p.reference), as_completion("print(0)\n")

    def row(problem, index, text, truncated=False):
        return {"problem_index": index, "completion": text, "gold": json.dumps(problem.tests), "truncated": truncated}

    rows = [row(p, 0, right), row(p, 0, wrong), row(q, 1, right), row(q, 1, as_completion(q.reference), True)]
    signal = sampled_signal(rows, {"code_timeout": 10.0, "code_num_workers": 2})
    # p: 1.0 and 0.0 (signal, a full pass); q: p's program fails q's tests (0.0), q's own is cut (0.0): no signal.
    assert signal == {"mean_reward": 0.25, "groups_with_signal": 0.5, "groups_with_a_full_pass": 0.5}


def test_the_one_shot_example_is_of_no_family_kind_and_runs_as_written():
    base = read_recipe(ROOT / RECIPE)
    [example] = base["chat_examples"]
    for family in FAMILIES:
        assert not matches_kind(example["question"] + example["answer"], family), family
    program = example["answer"].split("```python\n")[1].split("```")[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(program, {"input": lambda: "hello"})
    assert out.getvalue() == "HELLO!\n"


def test_the_probe_prompts_as_training_does():
    base = read_recipe(ROOT / RECIPE)
    recipe = probe_recipe(base)
    assert recipe == {
        "prompt_template": "chat",
        "chat_examples": base["chat_examples"],
        "code_timeout": base["code_timeout"],
        "code_num_workers": base["code_num_workers"],
        "bf16": "auto",
    }
    assert base["bf16"] == "auto" and base["reward_funcs"] == ["code"] and "system_prompt" not in base


@pytest.mark.parametrize(
    ("rate", "expected"), [(0.05, True), (0.40, True), (0.22, True), (0.04, False), (0.42, False), (0.0, False)]
)
def test_window_rule(rate, expected):
    assert in_window(rate) is expected  # both ends included


def test_the_task_is_the_family_in_the_window_nearest_its_middle():
    def row(family, rate):
        return {"family": family, "pass@1": rate, "in_window": in_window(rate)}

    rows = [row("a", 0.68), row("b", 0.12), row("c", 0.30), row("d", 0.02)]
    assert chosen_task(rows) == "c"  # |0.30 - 0.225| < |0.12 - 0.225|
    assert chosen_task([row("e", 0.20), row("f", 0.25)]) == "e"  # a tie: the family probed first
    assert chosen_task([row("a", 0.68), row("d", 0.02)]) is None  # none in the window: a second round


def test_code_format_joins_when_answers_lack_a_block():
    assert needs_code_format({"no_block": 0.10}) and needs_code_format({"no_block": 0.5})
    assert not needs_code_format({"no_block": 0.08})


def test_exception_names():
    trace = "Traceback (most recent call last):\n  File \"<p>\", line 1\nNameError: name 'x' is not defined\n"
    assert exception_name(trace) == "NameError"
    assert exception_name("EOFError: EOF when reading a line") == "EOFError"
    assert exception_name("json.decoder.JSONDecodeError: Expecting value\n\n") == "JSONDecodeError"
    assert exception_name("") == "exit"  # sys.exit(3), a signal: no traceback
    assert exception_name("KeyboardInterrupt") == "KeyboardInterrupt"


@pytest.mark.slow
def test_make_probe_code_end_to_end_in_miniature(tmp_path):
    """`make probe-code`'s stages on the real model, shrunk to two families of two problems at 24 tokens: the prompt,
    the data, the evaluator, the outcome classes, the table and the json."""
    from test_tool_smollm2 import _smollm2

    from drgrpo.experiments.code_probe import ProbeSettings, run_probe

    _smollm2()
    settings = ProbeSettings(
        output_dir=str(tmp_path / "probe"), families=("sum_plus", "list_max_plus"), num_test=2, max_new_tokens=24,
        batch_size=2, recipe=str(ROOT / RECIPE), sampled=2, sampled_batch_size=4,
    )  # fmt: skip
    lines: list[str] = []
    probe = run_probe(settings, report=lines.append)
    out = tmp_path / "probe"
    assert json.loads((out / "probe.json").read_text()) == probe
    assert [r["family"] for r in probe["families"]] == ["sum_plus", "list_max_plus"]
    for result in probe["families"]:
        assert result["samples"] == 2 and 0.0 <= result["pass@1"] <= 1.0
        assert result["sampled"]["samples"] == 4 and 0.0 <= result["sampled"]["pass@2"] <= 1.0
        assert result["sampled"]["temperature"] == read_recipe(ROOT / RECIPE)["temperature"]
        outcomes = ("no_block", "syntax_error", "all_tests", "wrong_output", "runtime_error", "timeout")
        assert abs(sum(result[k] for k in outcomes) + result["sandbox_error"] - 1.0) < 1e-9
    assert (out / "probe.md").read_text().count("\n| ") == 6  # two tables: a header and two rows each
    assert lines[-1].startswith("| list_max_plus | ")
