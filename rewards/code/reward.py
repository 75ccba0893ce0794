"""The built-in `code` and `code_format` rewards."""

from __future__ import annotations

import logging
import time
from typing import Any

from rewards.code.blocks import code_format_score, extract_program
from rewards.code.compare import Checker, ComparisonTimeout, call_matches, outputs_match
from rewards.code.sandbox import RunResult, SandboxLimits, get_sandbox
from rewards.code.settings import CodeRewardArguments
from rewards.code.testcases import TestCase, TestFormatError, call_harness, call_result, parse_tests
from rewards.deadline import call_with_deadline
from rewards.report import RewardReport

logger = logging.getLogger(__name__)

# Counters logged as rewards/code/<key> (per batch): test runs that timed out / crashed (non-zero exit, signal,
# output over the limit) / failed in the sandbox itself; problems whose tests cannot be read; answers without code;
# outputs whose check raised (a custom checker's exception, a result the comparison cannot handle): a failed test;
# completions whose comparison ran past `code_check_timeout`: the rest of their tests failed.
COUNTERS = ("timeouts", "crashes", "sandbox_errors", "unusable_tests", "no_code", "check_errors", "check_timeouts")


def sandbox_limits(settings: CodeRewardArguments) -> SandboxLimits:
    return SandboxLimits(
        timeout=settings.code_timeout,
        memory_mb=settings.code_memory_mb,
        max_processes=settings.code_max_processes,
        max_open_files=settings.code_max_open_files,
        max_output_bytes=settings.code_max_output_kb * 1024,
        max_file_bytes=settings.code_max_file_mb * 1024 * 1024,
        max_files=settings.code_max_files,
    )


def score_tests(passed: int, total: int, scoring: str) -> float:
    """`fraction`: passed / total (the partial credit of open-r1's `code` reward); `all`: 1.0 iff every test passes
    (DeepSeek-R1's and DeepCoder's binary outcome reward)."""
    if scoring == "all":
        return float(passed == total)
    return passed / total


class CodeReward:
    """Runs the last ```python block of each completion on its problem's test cases in the sandbox
    (`rewards.code.sandbox`) and scores the share passed (`code_scoring: fraction`) or 1/0 (`all`).

    The tests come as the dataset column `tests_column` (see `rewards.code.testcases`). A completion without code
    scores 0.0; a problem whose tests cannot be read scores None (warned once, counted in `unusable_tests`), as
    does a completion whose run failed in the sandbox itself (`sandbox_errors`, and `rewards/code/failures`).
    """

    reward_range = (0.0, 1.0)

    def __init__(self, settings: CodeRewardArguments, checker: Checker | None = None, num_workers: int = 1) -> None:
        settings.check_code_settings()
        if settings.code_language.lower() not in ("python", "python3", "py"):
            raise ValueError(
                f"code_language={settings.code_language!r}: the sandbox runs Python programs only for now."
            )
        self.settings = settings
        self.checker = checker
        self.sandbox = get_sandbox(
            num_workers, sandbox_limits(settings), settings.code_allow_network_fallback, settings.code_python
        )
        self._warned: set[str] = set()

    def _tests(self, value: Any, cache: dict) -> list[TestCase] | TestFormatError:
        key = value if isinstance(value, str) else repr(value)
        if key not in cache:
            try:
                cache[key] = parse_tests(value, self.settings.code_language)
            except (TestFormatError, TypeError, ValueError) as exc:
                error = exc if isinstance(exc, TestFormatError) else TestFormatError(str(exc))
                if str(error) not in self._warned:
                    self._warned.add(str(error))
                    logger.warning("code reward: a problem's tests (%s) cannot be used: %s", value, error)
                cache[key] = error
        return cache[key]

    def _passed(self, test: TestCase, result: RunResult, marker: str | None, counters: dict, budget: list) -> bool:
        """Did the run pass `test`? A check that raises (the program's output is untrusted input to it) fails the
        test, is counted in `check_errors` and warned about once per kind of error; training goes on. `budget`: the
        seconds of comparison left to this test's completion (`[seconds]`, spent here); once it is spent, its other
        tests fail unchecked and the completion counts once in `check_timeouts`."""
        if budget[0] <= 0:
            return False
        start = time.monotonic()
        try:
            return self._check(test, result, marker, start + budget[0])
        except ComparisonTimeout:  # raised past the deadline: the budget is spent (below)
            counters["check_timeouts"] += 1
            if "check_timeouts" not in self._warned:
                self._warned.add("check_timeouts")
                logger.warning(
                    "code reward: comparing one completion's outputs ran past code_check_timeout=%g s; the rest of "
                    "its tests fail (counted in rewards/code/check_timeouts). Raise code_check_timeout if a slow "
                    "code_checker needs more.",
                    self.settings.code_check_timeout,
                )
            return False
        except Exception as exc:  # noqa: BLE001 - a checker or comparison error must not stop training
            counters["check_errors"] += 1
            kind = f"{type(exc).__name__} in {'the checker' if self.checker else 'the comparison'}"
            if kind not in self._warned:
                self._warned.add(kind)
                logger.warning("code reward: checking an output raised %s: %r; the test counts as failed", kind, exc)
            return False
        finally:
            budget[0] -= time.monotonic() - start

    def _check(self, test: TestCase, result: RunResult, marker: str | None, deadline: float) -> bool:
        """The comparison itself, by `deadline` (a `time.monotonic()` value): ours is linear in the output and checks
        the deadline as it goes; a custom checker (trusted, but reading untrusted output) is cut off at it."""
        if result.status != "ok":
            return False
        if test.fn_name:
            found, value = call_result(result.text, marker)
            return found and call_matches(value, test.output, self.settings.code_float_tolerance)
        if self.checker is not None:
            remaining = max(deadline - time.monotonic(), 1e-3)
            try:
                return bool(call_with_deadline(self.checker, remaining, test.input, test.output, result.text))
            except TimeoutError as exc:
                if time.monotonic() < deadline:
                    raise  # the checker's own TimeoutError: a check error like any other
                raise ComparisonTimeout(f"code_checker ran past code_check_timeout ({exc})") from exc
        return outputs_match(result.text, test.output, self.settings.code_float_tolerance, deadline)

    def __call__(self, texts: list[str], *, report: RewardReport, **kwargs: Any) -> list[float | None]:
        column = self.settings.tests_column
        if column not in kwargs:
            received = sorted(k for k in kwargs if k not in ("trainer_state", "log_extra", "log_metric"))
            raise ValueError(
                f"The 'code' reward needs the dataset column {column!r} with each problem's test cases (TRL passes "
                f"dataset columns to rewards as keyword lists); it received {received}. Set tests_column: <name> "
                "in the recipe to the column that holds them."
            )
        counters = dict.fromkeys(COUNTERS, 0)
        cache: dict = {}
        scores: list[float | None] = [0.0] * len(texts)
        runs: list[list[tuple]] = [[] for _ in texts]  # per completion: (test, program, stdin, marker) per test
        for i, (text, value) in enumerate(zip(texts, kwargs[column], strict=True)):
            tests = self._tests(value, cache)
            if isinstance(tests, TestFormatError):
                scores[i] = None
                counters["unusable_tests"] += 1
                report.details[i] = f"unusable tests: {tests}"[:200]
                continue
            program = extract_program(text, self.settings.code_language)
            if program is None:
                counters["no_code"] += 1
                report.details[i] = "no code block"
                continue
            for test in tests:
                source, stdin, marker = call_harness(program, test) if test.fn_name else (program, test.input, None)
                runs[i].append((test, source, stdin, marker))
        passed, ran, errors = [0] * len(texts), [0] * len(texts), [0] * len(texts)
        budgets = [[self.settings.code_check_timeout] for _ in texts]  # seconds of comparison left per completion
        first_failure: list[str | None] = [None] * len(texts)
        # All-or-nothing scoring runs each program's first test alone first: most wrong programs fail it, and their
        # other tests cannot change the score (open-r1 batches its tests for the same reason).
        waves = [[r[:1] for r in runs], [r[1:] for r in runs]] if self.settings.code_scoring == "all" else [runs]
        for wave in waves:
            jobs, owners = [], []
            for i, items in enumerate(wave):
                if passed[i] < ran[i] or errors[i]:
                    continue
                for test, source, stdin, marker in items:
                    jobs.append((source, stdin))
                    owners.append((i, test, marker))
            for (i, test, marker), result in zip(owners, self.sandbox.run_many(jobs), strict=True):
                ran[i] += 1
                if result.status == "timeout":
                    counters["timeouts"] += 1
                elif result.status in ("crash", "output_limit"):
                    counters["crashes"] += 1
                elif result.status == "sandbox_error":
                    counters["sandbox_errors"] += 1
                    errors[i] += 1
                if self._passed(test, result, marker, counters, budgets[i]):
                    passed[i] += 1
                elif first_failure[i] is None:
                    first_failure[i] = "wrong answer" if result.status == "ok" else result.status
        for i, items in enumerate(runs):
            total = len(items)
            if not total:
                continue
            if errors[i]:
                scores[i] = None
                report.fail(i, f"sandbox error on {errors[i]} of {ran[i]} tests run")
                continue
            scores[i] = score_tests(passed[i], total, self.settings.code_scoring)
            failure = f" (first: {first_failure[i]})" if passed[i] < total else ""
            skipped = f", {total - ran[i]} not run" if ran[i] < total else ""
            report.details[i] = f"{passed[i]}/{total} passed{failure}{skipped}"
        report.counters.update(counters)
        return scores


class CodeFormatReward:
    """1.0 if the answer holds exactly one closed ```python block (`rewards.code.blocks.code_format_score`)."""

    reward_range = (0.0, 1.0)

    def __init__(self, language: str = "python") -> None:
        self.language = language

    def __call__(self, texts: list[str], *, report: RewardReport, **kwargs: Any) -> list[float]:
        return [code_format_score(text, self.language) for text in texts]
