"""The code rewards: test-case formats, output comparison, program extraction, `code`/`code_format` scores and
counters, the checker hook, and the shipped task set (references pass, wrong solutions do not)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import skip_unless_required

from rewards import BUILTINS, RewardArguments, get_reward_funcs
from rewards.code import (
    CodeRewardArguments,
    NamespacesUnavailable,
    SandboxUnavailable,
    TestCase,
    TestFormatError,
    code_format_score,
    extract_program,
    outputs_match,
    parse_tests,
)
from rewards.code.compare import call_matches, numbers_close, tokens_equal, values_equal
from rewards.code.reward import score_tests
from rewards.code.taskset import TASKS, TASKS_FILE, as_completion, load_task_set, task_rows
from rewards.code.testcases import call_harness, call_result

ROOT = Path(__file__).resolve().parents[1]

# -- test-case formats --------------------------------------------------------------------------------------------


def test_open_r1_primeintellect_format_as_dict_and_json_string():
    info = {"language": "python", "test_cases": [{"type": "stdin_stdout", "input": "1 2\n", "output": "3\n"}]}
    expected = [TestCase("1 2\n", "3\n")]
    assert parse_tests(info) == expected
    assert parse_tests(json.dumps(info)) == expected
    with pytest.raises(TestFormatError, match="language 'cpp'"):
        parse_tests({"language": "cpp", "test_cases": info["test_cases"]})


def test_apps_taco_format_stdin_and_call_based():
    assert parse_tests({"inputs": ["1\n", ["2", "3"]], "outputs": ["1\n", ["5"]]}) == [
        TestCase("1\n", "1\n"),
        TestCase("2\n3", "5"),  # TACO's lists of lines are joined
    ]
    calls = parse_tests(json.dumps({"inputs": [[1, 2], "[3, 4]"], "outputs": [[3], 7], "fn_name": "add"}))
    assert calls == [TestCase("[1, 2]", [3], "add"), TestCase("[3, 4]", 7, "add")]


def test_a_plain_list_and_the_errors_that_name_the_problem():
    assert parse_tests([{"input": "a", "output": "b"}]) == [TestCase("a", "b")]
    with pytest.raises(TestFormatError, match="2 inputs but 1 outputs"):
        parse_tests({"inputs": ["1", "2"], "outputs": ["1"]})
    with pytest.raises(TestFormatError, match="no test cases"):
        parse_tests({"test_cases": []})
    with pytest.raises(TestFormatError, match="not JSON"):
        parse_tests("{oops")
    with pytest.raises(TestFormatError, match="unknown tests format"):
        parse_tests({"tests": []})


# -- comparison ---------------------------------------------------------------------------------------------------


def test_numbers_close_is_the_absolute_or_relative_rule():
    assert numbers_close(1.0000009, 1.0, 1e-6)  # |d| = 9e-7 <= 1e-6 * 1
    assert not numbers_close(1.000002, 1.0, 1e-6)
    assert numbers_close(1000001.0, 1000000.0, 1e-6)  # |d| = 1 <= 1e-6 * 1e6
    assert not numbers_close(1000002.0, 1000000.0, 1e-6)


def test_tokens_integers_exact_floats_tolerant():
    assert tokens_equal("3.0000001", "3.0", 1e-6)  # the tolerance is the expected float's
    assert not tokens_equal("3.0000001", "3", 1e-6)  # an expected integer is matched exactly
    assert not tokens_equal("1000000000000000001", "1000000000000000000", 1e-6)  # integers: exact
    assert not tokens_equal("YES", "yes", 1e-6)


def test_outputs_match_normalises_whitespace_line_by_line():
    assert outputs_match("1 2\r\n3   4  \n\n", "1 2\n3 4")
    assert outputs_match("0.333333", "0.3333333333")
    assert not outputs_match("1 2 3", "1 2\n3")  # line structure matters
    assert not outputs_match("1 2", "1 2\n3")


def test_call_values_compare_deeply_and_unwrap_apps_lists():
    assert values_equal({"a": [1, 2.0000001]}, {"a": [1, 2.0]})
    assert not values_equal(True, 1) and not values_equal(1, True)
    assert call_matches(5, [5]) and call_matches([1, 2], [[1, 2]]) and not call_matches(5, [5, 5])


# -- extraction and format ----------------------------------------------------------------------------------------


def test_the_last_python_block_of_the_answer_is_the_program():
    text = (
        "<think>```python\nprint(0)\n```</think> try ```python\nprint(1)\n``` then ```py\nprint(2)\n``` ```text\nx\n```"
    )
    assert extract_program(text) == "print(2)\n"
    assert extract_program("```\nprint(3)\n```") == "print(3)\n"  # untagged: used when no python block
    assert extract_program("```python\nprint(4)\n") is None  # never closed
    assert extract_program(None) is None


def test_code_format_wants_exactly_one_closed_python_block():
    assert code_format_score("<think>```js\nx\n```</think>ok ```python\nprint(1)\n```") == 1.0
    assert code_format_score("```python\nprint(1)\n``` and ```python\nprint(2)\n```") == 0.0
    assert code_format_score("```python\nprint(1)\n") == 0.0
    assert code_format_score("```js\nx\n```") == 0.0
    assert code_format_score("```python\n\n```") == 0.0


def test_score_tests_fraction_and_all():
    assert score_tests(2, 3, "fraction") == pytest.approx(2 / 3)
    assert score_tests(2, 3, "all") == 0.0 and score_tests(3, 3, "all") == 1.0


def test_the_call_harness_marks_its_result_and_keeps_the_expected_value_out():
    test = TestCase("[2, 3]", 987654, "mul")
    program, stdin, marker = call_harness("def mul(a, b):\n    print('6')\n    return a * b\n", test)
    assert stdin == "" and "987654" not in program and marker in program
    assert call_result(f"6\n{marker}6\n", marker) == (True, 6)
    assert call_result("6\n", marker) == (False, None)


# -- the rewards --------------------------------------------------------------------------------------------------


def code_reward_or_skip(settings: RewardArguments):
    """The built-in `code` reward for `settings`; the test is skipped only where the kernel refuses namespaces."""
    try:
        (reward,) = get_reward_funcs(["code"], settings)
    except NamespacesUnavailable as exc:
        skip_unless_required("namespaces", f"no namespaces on this kernel: {exc}")
    return reward


@pytest.fixture(scope="module")
def code_reward():
    return code_reward_or_skip(RewardArguments(code_timeout=2.0, code_num_workers=2))


def test_builtins_and_settings_have_help():
    assert {"code", "code_format"} <= set(BUILTINS)
    for name, field in CodeRewardArguments.__dataclass_fields__.items():
        assert field.metadata.get("help"), name
    with pytest.raises(ValueError, match="code_scoring='most'"):
        get_reward_funcs(["code"], RewardArguments(code_scoring="most"))
    with pytest.raises(ValueError, match="code_max_files=100001: at most 100000"):
        get_reward_funcs(["code"], RewardArguments(code_max_files=100_001))


def test_the_time_limit_is_cpu_time_and_the_wall_limit_twice_it():
    """A program that waits longer than code_timeout but computes less passes (a neighbour that takes the CPU
    makes a program slower, not wrong); one that computes longer fails even if it finishes; one that sleeps is
    stopped at the wall limit, 2 x code_timeout."""
    from rewards.code import Sandbox, SandboxLimits

    spin = "import time\nstart = time.process_time()\nwhile time.process_time() - start < %r:\n    pass\nprint(1)\n"
    with Sandbox(1, SandboxLimits(timeout=1.5)) as sandbox:
        try:
            waits = sandbox.run("import time\ntime.sleep(1.8)\nprint('ok')\n")
        except NamespacesUnavailable as exc:
            skip_unless_required("namespaces", f"no namespaces on this kernel: {exc}")
        assert (waits.status, waits.text) == ("ok", "ok\n") and waits.wall_s > 1.5 and waits.cpu_s < 0.5, waits
        sleeps = sandbox.run("import time\ntime.sleep(30)\n")
        assert sleeps.status == "timeout" and 3.0 <= sleeps.wall_s < 5.0, sleeps
    with Sandbox(1, SandboxLimits(timeout=1.5, wall_timeout=30.0)) as sandbox:  # room for a loaded machine
        over = sandbox.run(spin % 1.7)  # finishes before RLIMIT_CPU (2 s), after 1.5 CPU seconds
        assert over.status == "timeout" and over.exit_code == 0 and over.cpu_s > 1.5, over
    with pytest.raises(ValueError, match="max_files must be at most 100000"):
        SandboxLimits(max_files=100_001)


def test_code_scores_counts_and_logs(code_reward):
    tests = [{"input": "2\n", "output": "4\n"}, {"input": "5\n", "output": "10\n"}, {"input": "0\n", "output": "0\n"}]
    completions = [
        "```python\nprint(int(input()) * 2)\n```",
        "```python\nn = int(input())\nprint(n + 2)\n```",  # right only for n = 2
        "```python\nimport time\ntime.sleep(60)\n```",
        "```python\nraise ValueError\n```",
        "I don't know.",
        "```python\nprint(1)\n```",
    ]
    logged = {}
    scores = code_reward(
        completions=completions,
        verification_info=[tests] * 5 + ["not json"],
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert scores == [1.0, pytest.approx(1 / 3), 0.0, 0.0, 0.0, None]
    assert logged["rewards/code/timeouts"] == 3.0
    assert logged["rewards/code/crashes"] == 3.0
    assert logged["rewards/code/sandbox_errors"] == 0.0
    assert logged["rewards/code/no_code"] == 1.0
    assert logged["rewards/code/unusable_tests"] == 1.0
    assert code_reward.last_report.details[1] == "1/3 passed (first: wrong answer)"


def test_a_missing_tests_column_is_a_named_error(code_reward):
    with pytest.raises(ValueError, match="needs the dataset column 'verification_info'.*tests_column"):
        code_reward(completions=["```python\nprint(1)\n```"], answer=["1"])


def test_the_checker_hook_accepts_any_right_answer(tmp_path):
    checker = tmp_path / "checker.py"
    checker.write_text(
        "def any_order(input, expected, output):\n    return sorted(output.split()) == sorted(expected.split())\n"
    )
    settings = RewardArguments(code_checker=f"{checker}:any_order", code_num_workers=1, code_scoring="all")
    reward = code_reward_or_skip(settings)
    tests = {"inputs": ["", ""], "outputs": ["1 2 3", "1 2 3"]}
    assert reward(
        completions=["```python\nprint(3, 1, 2)\n```", "```python\nprint(1, 2)\n```"], verification_info=[tests, tests]
    ) == [1.0, 0.0]


# -- the shipped task set -----------------------------------------------------------------------------------------


def test_the_shipped_file_is_the_generator_output_and_has_30_problems_of_5_tests():
    rows = load_task_set(TASKS_FILE)
    assert rows == task_rows()
    assert len(rows) >= 30
    assert sum(t.fn_name is not None for t in TASKS) >= 5
    assert all(len(parse_tests(r["verification_info"])) >= 5 for r in rows)


def test_reference_solutions_score_1_and_wrong_ones_below_1(code_reward):
    rows = load_task_set(TASKS_FILE)
    infos = [r["verification_info"] for r in rows]
    references = code_reward(completions=[as_completion(r["reference"]) for r in rows], verification_info=infos)
    assert dict(zip([r["name"] for r in rows], references, strict=True)) == {r["name"]: 1.0 for r in rows}
    wrong = code_reward(completions=[as_completion(r["wrong"]) for r in rows], verification_info=infos)
    failing = {r["name"]: s for r, s in zip(rows, wrong, strict=True) if s is None or s >= 1.0}
    assert failing == {}


def test_the_readme_code_example_is_this_file_and_scores_the_task_set(monkeypatch):
    """The README's code-reward example is tests/fixtures/my_code_reward.py (about 12 lines of code)."""
    monkeypatch.chdir(ROOT)
    (reward,) = get_reward_funcs(["tests/fixtures/my_code_reward.py:passes_all"])
    rows = [r for r in load_task_set(TASKS_FILE) if "fn_name" not in r["verification_info"]][:3]
    infos = [r["verification_info"] for r in rows]
    completions = [as_completion(r["reference"]) for r in rows] + [as_completion(r["wrong"]) for r in rows] + ["no"]
    assert reward(completions=completions, verification_info=infos * 2 + infos[:1]) == [1.0] * 3 + [0.0] * 4
    # The right output followed by a crash (or a hang) is not a pass: the example checks result.status first.
    crashing = as_completion(rows[0]["reference"] + "\nraise SystemExit(3)\n")
    assert reward(completions=[crashing], verification_info=infos[:1]) == [0.0]


def test_without_namespaces_the_sandbox_refuses_unless_the_fallback_is_allowed(monkeypatch, caplog):
    from rewards.code import Sandbox, SandboxLimits

    monkeypatch.setenv("DRGRPO_SANDBOX_NO_NAMESPACES", "1")
    with Sandbox(1, SandboxLimits(timeout=2.0)) as sandbox:
        with pytest.raises(SandboxUnavailable, match="cannot isolate programs.*code_allow_network_fallback: true"):
            sandbox.start()
    python = "/usr/bin/python3"  # the fallback has no mount namespace: the interpreter must be reachable as is
    if os.geteuid() != 0:
        skip_unless_required(
            "root", "the fallback is for root trainers only (test_an_unprivileged_trainer_is_refused_the_fallback)"
        )
    if not os.access(python, os.X_OK):
        skip_unless_required("system_python", "no system Python for the fallback")
    with Sandbox(1, SandboxLimits(timeout=2.0), allow_network_fallback=True, python=python) as sandbox:
        result = sandbox.run("import os\nprint(os.getuid(), sorted(os.environ))")
        assert sandbox.mode == "fallback"
    assert result.status == "ok"
    uid, environment = result.text.split(" ", 1)
    assert int(uid) >= 0x70000000  # root drops to a uid of the runner's own (a non-root trainer is refused)
    assert "WANDB_API_KEY" not in environment and "HF_TOKEN" not in environment
    assert any("WITHOUT namespaces" in r.getMessage() for r in caplog.records)


def test_the_fallback_warning_says_what_it_does_not_stop():
    from rewards.code.sandbox import fallback_warning

    without = fallback_warning(0)
    assert "NOTHING STOPS A PROGRAM FROM READING EVERY FILE ITS UID MAY READ: the test cases" in without
    assert "print the expected output" in without and "world-writable" in without
    with_landlock = fallback_warning(6)
    assert "read only the system and interpreter folders" in with_landlock and "create no file" in with_landlock
    for text in (without, with_landlock):
        assert "cannot signal other completions' programs" in text and "every socket() refused" in text


@pytest.mark.parametrize("page", ["rewards.md", "code-rewards.md"])
def test_the_docs_show_the_code_example_verbatim(page):
    """docs/rewards.md's "Write your own reward" shows it next to the math example; docs/code-rewards.md too."""
    docs = (ROOT / "docs" / page).read_text()
    code = (ROOT / "tests" / "fixtures" / "my_code_reward.py").read_text().split('"""', 2)[2].strip()
    assert f"```python\n{code}\n```" in docs


def test_all_or_nothing_stops_at_a_failed_first_test():
    reward = code_reward_or_skip(RewardArguments(code_num_workers=2, code_scoring="all"))
    tests = [{"input": f"{n}\n", "output": f"{2 * n}\n"} for n in (1, 2, 3, 4)]
    logged = {}
    scores = reward(
        completions=["```python\nprint(2 * int(input()))\n```", "```python\nraise SystemExit(1)\n```"],
        verification_info=[tests, tests],
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert scores == [1.0, 0.0]
    assert reward.last_report.details == ["4/4 passed", "0/4 passed (first: crash), 3 not run"]
    assert logged["rewards/code/crashes"] == 1.0  # the other three tests of the crashing program never ran


def test_a_dead_runner_costs_one_sandbox_error_and_is_replaced():
    import signal

    from rewards.code import Sandbox, SandboxLimits

    with Sandbox(1, SandboxLimits(timeout=2.0)) as sandbox:
        try:
            assert sandbox.run("print(1)").status == "ok"
        except NamespacesUnavailable as exc:
            skip_unless_required("namespaces", f"no namespaces on this kernel: {exc}")
        (first,) = sandbox.pids
        os.kill(first, signal.SIGKILL)
        result = sandbox.run("print(2)")
        assert result.status in ("sandbox_error", "ok")  # found dead while sending, or (rarely) before
        assert sandbox.run("print(3)").text == "3\n"
        (second,) = sandbox.pids
        assert second != first
    with pytest.raises(ProcessLookupError):
        os.kill(second, 0)


# -- review findings: untrusted output never crashes the reward; only a kernel refusal skips ----------------------


def test_integer_tokens_compare_as_normalised_strings_of_any_length():
    """int() raises ValueError beyond 4300 digits: a program printing a huge number must just be wrong (or right)."""
    huge = "1" * 5000
    assert tokens_equal(huge, huge, 1e-6)
    assert tokens_equal("+" + huge, "000" + huge, 1e-6)
    assert not tokens_equal(huge, "3", 1e-6)
    assert not tokens_equal("-" + huge, huge, 1e-6)
    assert tokens_equal("-0", "0", 1e-6) and tokens_equal("007", "7", 1e-6) and not tokens_equal("-7", "7", 1e-6)
    assert not tokens_equal(huge, "1.5", 1e-6)  # a float comparison: float(huge) is inf, not an error
    assert call_result("@@m@@" + huge + "\n", "@@m@@") == (False, None)  # json.loads raises ValueError on it
    assert not values_equal(10**400, 1.5)  # float(10**400) raises OverflowError


def test_huge_numbers_and_a_raising_checker_score_zero_and_are_counted(code_reward, tmp_path):
    tests = [{"input": "", "output": "3"}]
    calls = {"fn_name": "f", "inputs": [[]], "outputs": [3]}
    completions = [
        "```python\nprint('1' * 5000)\n```",
        "```python\nimport sys\nsys.set_int_max_str_digits(0)\ndef f():\n    return 10**5000\n```",
        "```python\nprint(3)\n```",
    ]
    assert code_reward(completions=completions, verification_info=[tests, calls, tests]) == [0.0, 0.0, 1.0]
    checker = tmp_path / "checker.py"
    checker.write_text("def picky(input, expected, output):\n    return int(output) == int(expected)\n")
    settings = RewardArguments(code_checker=f"{checker}:picky", code_num_workers=1, code_timeout=2.0)
    (reward,) = get_reward_funcs(["code"], settings)  # the module's code_reward ran: namespaces work here
    logged = {}
    scores = reward(
        completions=completions[::2], verification_info=[tests] * 2, log_metric=lambda n, v: logged.__setitem__(n, v)
    )
    assert scores == [0.0, 1.0]  # the checker's ValueError on 5000 digits fails that test, and training goes on
    assert logged["rewards/code/check_errors"] == 1.0


def test_only_a_kernel_refusal_of_namespaces_is_a_skip_reason(monkeypatch):
    """NamespacesUnavailable (the one reason tests skip) only when unshare itself failed; a sandbox that starts but
    cannot run a trivial program is a plain SandboxUnavailable, and tests must fail on it."""
    from rewards.code import Sandbox, SandboxLimits

    with Sandbox(1, SandboxLimits(timeout=2.0), python="/nonexistent/python3") as sandbox:
        try:
            sandbox.start()
        except NamespacesUnavailable as exc:
            skip_unless_required("namespaces", f"no namespaces on this kernel: {exc}")
        except SandboxUnavailable as exc:
            assert "trivial program failed" in str(exc)
        else:
            raise AssertionError("a sandbox whose interpreter does not exist started")
    monkeypatch.setenv("DRGRPO_SANDBOX_NO_NAMESPACES", "1")
    with Sandbox(1, SandboxLimits(timeout=2.0)) as sandbox:
        with pytest.raises(NamespacesUnavailable, match="cannot isolate programs"):
            sandbox.start()


FALLBACK_AS_USER = """
import os
from rewards.code import Sandbox, SandboxLimits, SandboxUnavailable
os.environ["DRGRPO_SANDBOX_NO_NAMESPACES"] = "1"
with Sandbox(1, SandboxLimits(timeout=2.0), allow_network_fallback=True, python="/usr/bin/python3") as sandbox:
    try:
        print("ran as uid", sandbox.run("import os; print(os.getuid())").text.strip())
    except SandboxUnavailable as exc:
        print("refused:", exc)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv"), reason="needs root to be a user")
def test_an_unprivileged_trainer_is_refused_the_fallback(unprivileged_tree):
    """Without namespaces, an unprivileged trainer's programs would run as the trainer's own user (read its secrets
    from /proc/<trainer>/environ, kill it, delete its checkpoints): refused, even with the fallback allowed."""
    import subprocess

    if subprocess.run(["/usr/bin/python3", "-c", "import dataclasses"]).returncode:
        skip_unless_required("system_python", "no system Python that an unprivileged user can run")
    user = ["setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", "--inh-caps=-all"]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": str(unprivileged_tree)}
    command = ["timeout", "60", *user, "/usr/bin/python3", "-c", FALLBACK_AS_USER]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd="/", timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused:" in done.stdout and "needs a root trainer" in done.stdout, done.stdout
    assert "ran as uid" not in done.stdout
