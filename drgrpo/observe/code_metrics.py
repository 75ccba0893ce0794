"""What a policy's programs did, per answer: the `diag/code/` metrics of a run rewarded by the `code` reward, and the
same classes for an evaluation's samples (`make probe-code`, `make code-rl`).

Each answer gets one outcome, from its text, its `code` score (the share of its tests passed) and the reward's note
on it (`RewardReport.details`: "3/5 passed (first: crash)"), in this order:

- `no_block`: no closed ```python block (nor an untagged one) to run;
- `syntax_error`: the block does not compile (checked here with `compile`, which runs nothing: the sandbox would
  report it as a crash like any other);
- `all_tests`: every test passed;
- else the answer's first failing test: `wrong_output` (ran, printed something else), `runtime_error` (raised,
  exited non-zero or was killed, its output over the limit included), `timeout` (past `code_timeout`), or
  `sandbox_error` (the sandbox itself failed; the reward scores it None).

Besides: `some_tests` (at least one test passed, whatever the outcome) and the program's length in non-blank lines.
The exception's name of a runtime error is not in the reward's note; an evaluation's samples can be run again for it
(`drgrpo.experiments.code_probe`). Pure functions of strings and numbers; `DrGRPOTrainer` gathers the counts of every
rank (`counts_vector`) and logs `shares` of their sum.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from drgrpo.observe.metric_names import CODE_PREFIX

OUTCOMES = ("no_block", "syntax_error", "all_tests", "wrong_output", "runtime_error", "timeout", "sandbox_error")
# The reward's note on an answer whose program ran (rewards/code/reward.py, `CodeReward.__call__`).
_NOTE = re.compile(
    r"(?P<passed>\d+)/(?P<total>\d+) passed(?: \(first: (?P<first>[a-z_ ]+)\))?(?:, (?P<skipped>\d+) not run)?"
)
_FIRST_FAILURE = {
    "wrong answer": "wrong_output",
    "crash": "runtime_error",
    "output_limit": "runtime_error",
    "timeout": "timeout",
    "sandbox_error": "sandbox_error",
}
# The counts an answer adds to (`counts_vector`'s order): one outcome, and the sums behind the shares.
COUNTS = (*OUTCOMES, "some_tests", "answers", "programs_with_lines", "program_lines", "test_runs")


def compiles(program: str) -> bool:
    """Whether `program` is valid Python. `compile` parses and compiles it without running any of it; a program too
    deeply nested for the compiler counts as not compiling."""
    try:
        compile(program, "<answer>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    return True


def program_lines(program: str) -> int:
    """The program's length: its non-blank lines."""
    return sum(1 for line in program.splitlines() if line.strip())


def runs_made(detail: str | None) -> int:
    """How many test runs the reward's note on an answer says were made (0 for an answer without one)."""
    match = _NOTE.fullmatch(detail or "")
    if match is None:
        return 0
    return int(match["total"]) - int(match["skipped"] or 0)


def answer_outcome(program: str | None, score: float | None, detail: str | None) -> str:
    """One of `OUTCOMES` for an answer: its extracted program (None without a block), `code` score and note."""
    if program is None:
        return "no_block"
    if not compiles(program):
        return "syntax_error"
    match = _NOTE.fullmatch(detail or "")
    if score is None or match is None:  # the reward scored None: its sandbox failed on the program
        return "sandbox_error"
    if score >= 1.0 and match["first"] is None:
        return "all_tests"
    return _FIRST_FAILURE.get(match["first"] or "", "wrong_output")


def answer_counts(
    programs: Sequence[str | None], scores: Sequence[float | None], details: Sequence[str | None]
) -> dict[str, int]:
    """The counts of a batch of answers (`COUNTS`): each answer's outcome, those that passed some test, the number of
    answers, the programs and their lines, and the test runs the reward made."""
    counts = dict.fromkeys(COUNTS, 0)
    for program, score, detail in zip(programs, scores, details, strict=True):
        counts[answer_outcome(program, score, detail)] += 1
        counts["some_tests"] += int(score is not None and score > 0)
        counts["answers"] += 1
        if program is not None:
            counts["programs_with_lines"] += 1
            counts["program_lines"] += program_lines(program)
        counts["test_runs"] += runs_made(detail)
    return counts


def counts_vector(counts: dict[str, int]) -> list[int]:
    """The counts in `COUNTS` order (a tensor's worth, summed over ranks)."""
    return [counts[name] for name in COUNTS]


def shares(counts: dict[str, int] | Sequence[float], reward_seconds: float | None = None) -> dict[str, float]:
    """The `diag/code/` metrics of summed counts: each outcome's share of the answers, `block` (a block to run),
    `runnable` (it compiles), `some_tests`, the mean program length in lines (NaN without a program), and the test
    runs made; with `reward_seconds` (the `code` reward's time), the sandbox's throughput in programs per second."""
    if not isinstance(counts, dict):
        counts = dict(zip(COUNTS, counts, strict=True))
    answers = counts["answers"]
    nan = float("nan")

    def share(value: float) -> float:
        return value / answers if answers else nan

    metrics = {f"{CODE_PREFIX}{name}": share(counts[name]) for name in OUTCOMES}
    metrics[f"{CODE_PREFIX}block"] = share(answers - counts["no_block"])
    metrics[f"{CODE_PREFIX}runnable"] = share(answers - counts["no_block"] - counts["syntax_error"])
    metrics[f"{CODE_PREFIX}some_tests"] = share(counts["some_tests"])
    with_lines = counts["programs_with_lines"]
    metrics[f"{CODE_PREFIX}program_lines"] = counts["program_lines"] / with_lines if with_lines else nan
    metrics[f"{CODE_PREFIX}test_runs"] = float(counts["test_runs"])
    if reward_seconds is not None:
        metrics[f"{CODE_PREFIX}programs_per_second"] = counts["test_runs"] / reward_seconds if reward_seconds else nan
    return metrics
