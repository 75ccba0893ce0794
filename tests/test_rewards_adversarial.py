"""Never crash, never hang: pathological completions, hung and crashing verifier processes, misbehaving user rewards.

Timeouts here are short (0.5-1 s) so that the whole file stays within a few seconds of waiting.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rewards import RewardArguments, RewardFunctionError, get_grader, get_reward_funcs
from rewards.deadline import DeadlineExceeded, alarm_deadline, call_with_deadline
from rewards.pool import VerifierPool

ROOT = Path(__file__).resolve().parents[1]

TIMEOUT = 0.5

ADVERSARIAL = [
    "",
    "   \n\t ",
    None,
    [{"role": "assistant", "content": None}],
    "x" * 1_000_000 + " so \\boxed{7}",  # 1 MB, answer at the very end
    "9" * 1_000_000,  # a 1 MB number
    "{" * 10_000 + "}" * 10_000,
    "\\boxed{" + "{" * 10_000 + "7" + "}" * 10_000 + "}",
    "\\boxed{" * 10_000,
    "the answer is \\boxed{7",
    "\x00\x01\x1b[31m ünïcødé \u202e 7 \ufffd",
    "\\boxed{10^{10^{10^{10}}}}",
    "\\boxed{9999999!}",
    "\\boxed{(x+1)^{100000} - (x-1)^{100000}}",
    "\\boxed{\\int_0^1 e^{x^{x^{x}}} dx}",
    "\\boxed{\\sum_{n=1}^{10^{12}} n^{n}}",
    "\\boxed{\\frac{" * 200 + "1" + "}{2}" * 200,
]


@pytest.fixture(scope="module")
def grader():
    return get_grader(timeout=TIMEOUT, num_workers=2)  # shares its worker processes with the other reward tests


def test_adversarial_completions_score_without_crash_or_hang(grader):
    start = time.monotonic()
    results = grader.grade(ADVERSARIAL, ["7"] * len(ADVERSARIAL))
    elapsed = time.monotonic() - start
    assert len(results) == len(ADVERSARIAL)
    by_text = dict(zip(range(len(ADVERSARIAL)), results, strict=True))
    assert by_text[4].verdict is True  # the 1 MB completion still has its answer found
    # A box cut off before it closes holds no answer, and `{7` is no whole-token number: nothing is guessed.
    assert by_text[9].status == "no_answer"
    for result in results:
        assert result.verdict in (True, False)
        assert result.status in ("ok", "no_answer", "timeout", "error", "crash")
    # 5 sympy-heavy answers on 2 workers, each bounded by TIMEOUT + the kill grace, plus worker start-up.
    assert elapsed < 60


def test_failures_are_counted_in_the_logged_metric():
    settings = RewardArguments(reward_timeout=TIMEOUT, reward_num_workers=2)
    (reward,) = get_reward_funcs(["accuracy"], settings)
    logged = {}
    scores = reward(
        completions=["\\boxed{10^{10^{10^{10}}}}", "\\boxed{7}", "\\boxed{8}"],
        answer=["7", "7", "7"],
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert scores == [0.0, 1.0, 0.0]
    assert logged["rewards/accuracy/failures"] == 1.0
    assert reward.last_report.failed == [True, False, False]


def test_unparsable_golds_score_none_and_are_counted_once_per_prompt():
    (reward,) = get_reward_funcs(["accuracy"], RewardArguments(reward_num_workers=0))
    logged = {}
    scores = reward(
        completions=["\\boxed{1}"] * 4 + ["\\boxed{2}"] * 2,
        answer=["", "", "", "", "2", "2"],
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert scores == [None, None, None, None, 1.0, 1.0]
    assert logged["rewards/accuracy/unparsable_golds"] == 1.0  # one prompt (a group of 4), not 4
    assert logged["rewards/accuracy/failures"] == 0.0


def test_a_hung_worker_is_killed_and_a_crashed_one_replaced_and_close_ends_them():
    # `ping` needs no math-verify, so these workers start in a fraction of a second.
    with VerifierPool(num_workers=1, memory_mb=None, warm_up=False) as pool:
        assert pool.map("ping", [("a",), ("b",)], timeout=5.0) == [("ok", "a"), ("ok", "b")]
        (first,) = pool.pids
        os.kill(first, signal.SIGSTOP)  # a stopped process ignores the in-worker alarm: only the hard kill helps
        start = time.monotonic()
        assert pool.map("ping", [("c",), ("d",)], timeout=0.3) == [("timeout", None), ("ok", "d")]
        assert time.monotonic() - start < 30
        (second,) = pool.pids
        assert second != first and pool.restarts == 1
        os.kill(second, signal.SIGKILL)
        results = pool.map("ping", [("e",), ("f",)], timeout=5.0)
        # The dead worker is found either while taking the first job (which then fails) or before it.
        assert results in ([("crash", results[0][1]), ("ok", "f")], [("ok", "e"), ("ok", "f")])
        (third,) = pool.pids
        assert third not in (first, second)
    with pytest.raises(ProcessLookupError):
        os.kill(third, 0)
    with pytest.raises(RuntimeError, match="closed"):
        pool.map("ping", [("x",)], timeout=1.0)


def test_a_job_that_ignores_the_alarm_gets_its_worker_killed_gone_and_replaced():
    # The job blocks SIGALRM and spins for 60 s: the in-worker alarm cannot stop it, only the pool's kill can.
    with VerifierPool(num_workers=1, memory_mb=None, warm_up=False) as pool:
        assert pool.map("ping", [("ready",)], timeout=5.0) == [("ok", "ready")]
        (spinner,) = pool.pids
        results = pool.map("ignore_alarm_and_spin", [(60.0,)], timeout=0.3)
        assert results == [("timeout", None)]
        assert pool.restarts == 1
        with pytest.raises(ProcessLookupError):  # killed and reaped: no such process any more
            os.kill(spinner, 0)
        (replacement,) = pool.pids
        assert replacement != spinner
        assert pool.map("ping", [("after",)], timeout=5.0) == [("ok", "after")]


# Slow in sympy (expanding two degree-100,000 polynomials), but in Python code that the alarm interrupts, and small
# enough (rewards.magnitude) not to be refused unevaluated: what an in-process deadline is for.
SLOW_ANSWER = "\\boxed{(x+1)^{100000} - (x-1)^{100000}}"
TOWER = "\\boxed{10^{10^{10^{10}}}}"  # 10^{10^{10}} alone has 10^10 digits


def run_python(script: str, limit: float = 60.0) -> list[str]:
    """Run `script` in a fresh interpreter, killed after `limit` seconds: a regression that hangs fails the test
    instead of hanging the suite. Returns its stdout lines."""
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=limit, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"still running after {limit:g} s (killed): {str(exc.stderr or '')[-2000:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split("\n")


def test_in_process_grading_is_bounded_on_the_main_thread():
    # A power tower is refused before sympy evaluates it; a slow answer is stopped by the alarm. Both in a child
    # process with a hard limit: with the pool off nothing else could stop a computation the alarm cannot reach.
    script = (
        "import time\n"
        "from rewards.grading import Grader\n"
        "from rewards.equivalence import verify_answer\n"
        "verify_answer('\\\\frac{1}{2}', '0.5')  # math-verify's grammar loads outside the deadline\n"
        "grader = Grader(timeout=0.5, num_workers=0)\n"
        f"for text in [{TOWER!r}, {SLOW_ANSWER!r}]:\n"
        "    start = time.monotonic()\n"
        "    (r,) = grader.grade([text], ['1'])\n"
        "    print(r.status, r.verdict, time.monotonic() - start < 10)\n"
    )
    assert run_python(script)[:2] == ["error False True", "timeout False True"]


def test_a_first_in_process_timeout_does_not_break_later_grading():
    # The first in-process verification imports math-verify; a deadline that cut that import short left half-built
    # modules behind, and every free-text answer graded afterwards in that process read as "no answer".
    script = (
        "from rewards.grading import Grader\n"
        f"print(Grader(timeout=0.5, num_workers=0).grade([{SLOW_ANSWER!r}], ['1'])[0].status)\n"
        "r = Grader(timeout=5, num_workers=0).grade(['We have 72 so far. Next, \\\\boxed{7'], ['72'])[0]\n"
        "print(r.status, r.verdict)\n"
    )
    assert run_python(script, limit=120)[:2] == ["timeout", "ok True"]


def test_alarm_deadline_nests_and_call_with_deadline_works_off_the_main_thread():
    with pytest.raises(DeadlineExceeded):
        with alarm_deadline(0.2):
            time.sleep(5)
    with alarm_deadline(5.0):
        with alarm_deadline(0.1) as armed:
            assert armed
        time.sleep(0.05)  # the outer deadline survives the inner one
    outcome = {}

    def in_thread():
        try:
            call_with_deadline(time.sleep, 0.2, 5)
        except TimeoutError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(5)
    assert isinstance(outcome.get("error"), TimeoutError)


# -- user rewards ------------------------------------------------------------------------------------------------------


def raises_on_sevens(completions, **kwargs):
    if any("7" in c for c in completions):
        raise ValueError("cannot handle sevens")
    return [1.0] * len(completions)


def always_raises(completions, **kwargs):
    raise KeyError("solution")


def sleeps_forever(completions, **kwargs):
    time.sleep(3600)


def wrong_length(completions, **kwargs):
    return [1.0]


def wrong_type(completions, **kwargs):
    return ["1.0"] * len(completions)


def _wrap(func, timeout=0.5):
    from rewards.registry import SafeReward

    return SafeReward(func, func.__name__, f"tests:{func.__name__}", builtin=False, call_timeout=timeout)


def test_a_user_reward_that_raises_scores_none_only_where_it_raised():
    reward = _wrap(raises_on_sevens)
    reward(completions=["1"])  # a first successful call
    logged = {}
    scores = reward(completions=["1", "7", "2", "77"], log_metric=lambda n, v: logged.__setitem__(n, v))
    assert scores == [1.0, None, 1.0, None]
    assert logged["rewards/raises_on_sevens/failures"] == 2.0


def test_a_user_reward_that_always_raises_stops_training_at_its_first_batch():
    with pytest.raises(RewardFunctionError, match="always_raises.*every completion of its first batch"):
        _wrap(always_raises)(completions=["1", "2"])


def test_a_user_reward_that_sleeps_forever_times_out_on_the_main_thread_and_off_it():
    reward = _wrap(sleeps_forever, timeout=0.3)
    logged = {}
    start = time.monotonic()
    assert reward(completions=["a", "b"], log_metric=lambda n, v: logged.__setitem__(n, v)) == [None, None]
    assert logged["rewards/sleeps_forever/failures"] == 2.0
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("scores", reward(completions=["a"])))
    thread.start()
    thread.join(10)
    assert result["scores"] == [None]
    assert time.monotonic() - start < 10


@pytest.mark.parametrize(
    ("func", "message"),
    [(wrong_length, "returned 1 scores for 3 completions"), (wrong_type, "scores must be floats or None")],
)
def test_a_result_of_the_wrong_length_or_type_is_a_named_error(func, message):
    from rewards import RewardContractError

    with pytest.raises(RewardContractError, match=f"{func.__name__}.*{message}"):
        _wrap(func)(completions=["a", "b", "c"])
