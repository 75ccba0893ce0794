"""The Python tool of tool-integrated RL: programs in, observation texts out, run in the code sandbox.

The policy writes ```python ... ``` in the middle of an answer; the rollout (`algorithm/rollout/`) cuts generation at
the closing fence, hands every program of a turn to `PythonTool.run_many` as one batch (the sandbox runs them
`num_workers` at a time), and appends the observation this module writes: the program's standard output, or the last
line of its error, or a note that it ran past its time limit, its control characters stripped and truncated to
`output_chars` characters. The programs run under exactly the isolation and limits of the `code` reward
(`rewards.code.sandbox`, docs/code-rewards.md).

`ToolErrorPenalty` is the optional reward that makes an answer whose programs failed cost something
(`tool_error_penalty`); by default errors cost nothing, as in ToRA and SimpleTIR.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drgrpo.core.control_chars import strip_control_characters
from rewards.code.sandbox import RunResult, Sandbox

OUTPUT_KEEPS = ("head", "tail")
# What a call came to, as the rollout counts it: ok (exit 0), error (an exception, a non-zero exit, a signal, output
# over the sandbox's limit), timeout (CPU or wall time), sandbox_error (the sandbox failed, not the program).
CALL_STATUSES = ("ok", "error", "timeout", "sandbox_error")


@dataclass(frozen=True)
class ToolResult:
    """One call: the observation's text (what goes between the ```output fences) and what the call came to."""

    output: str
    status: str


def last_error_line(stderr: str) -> str:
    """The line of a traceback that names the error (`ZeroDivisionError: division by zero`): its last non-empty line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def truncate_output(text: str, limit: int, keep: str = "head") -> str:
    """`text` cut to at most `limit` characters plus a marker, keeping its start (`head`) or its end (`tail`)."""
    if keep not in OUTPUT_KEEPS:
        raise ValueError(f"tool_output_keep={keep!r}: choose one of {', '.join(OUTPUT_KEEPS)}.")
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep == "head":
        return f"{text[:limit]}\n[... {cut} more characters]"
    return f"[{cut} characters before ...]\n{text[-limit:]}"


def observation_of(result: RunResult, limit: int, keep: str = "head", timeout: float | None = None) -> ToolResult:
    """What the policy reads after its program ran (ToRA/SimpleTIR): the standard output, or for a failed run the
    output it printed followed by the last line of its error, or a time-limit note; then truncated to `limit`.

    A sandbox failure (not the program's) reads as one neutral line; it tells the policy nothing of the machine.
    What the program wrote is read with its control characters stripped (`strip_control_characters`: all of C0 and
    C1 but newline and tab), before it is truncated, tokenized or logged: one `print` of an escape sequence would
    otherwise set the title or write the clipboard of whoever reads the completions table in a terminal, and the
    trainer and the evaluator both read observations from here.
    """
    stdout = strip_control_characters(result.stdout.decode("utf-8", errors="replace")).rstrip()
    if result.status == "ok":
        return ToolResult(truncate_output(stdout, limit, keep), "ok")
    if result.status == "timeout":
        limit_note = f" of {timeout:g} s" if timeout is not None else ""
        note = f"TimeoutError: the program ran past its time limit{limit_note} and was stopped"
        status = "timeout"
    elif result.status == "sandbox_error":
        return ToolResult("Error: the program could not be run", "sandbox_error")
    elif result.status == "output_limit":
        note = "Error: the program printed more than the output limit and was stopped"
        status = "error"
    else:
        error = last_error_line(strip_control_characters(result.stderr.decode("utf-8", errors="replace")))
        if not error:
            error = f"Error: exit code {result.exit_code}" if result.exit_code is not None else "Error: killed"
        note, status = error, "error"
    text = f"{stdout}\n{note}" if stdout else note
    return ToolResult(truncate_output(text, limit, keep), status)


class PythonTool:
    """Runs the programs of a turn in the sandbox, in one batch, and turns each run into its observation.

    Args:
        sandbox: the `rewards.code.sandbox.Sandbox` (its `SandboxLimits` hold the time limit and the rest).
        output_chars: the most characters of an observation (`tool_output_chars`).
        keep: which end of a longer output is kept: `head` or `tail` (`tool_output_keep`).
    """

    def __init__(self, sandbox: Sandbox, output_chars: int = 400, keep: str = "head") -> None:
        if output_chars < 1:
            raise ValueError(f"tool_output_chars must be >= 1, got {output_chars}.")
        truncate_output("", output_chars, keep)  # checks `keep`
        self.sandbox = sandbox
        self.output_chars = output_chars
        self.keep = keep

    def run_many(self, programs: Sequence[str]) -> list[ToolResult]:
        """Each program's observation, in order; every program runs in the sandbox, with no input."""
        results = self.sandbox.run_many([(program, "") for program in programs])
        timeout = self.sandbox.limits.timeout
        return [observation_of(result, self.output_chars, self.keep, timeout) for result in results]


class ToolErrorPenalty:
    """`-penalty` for an answer in which at least one program failed (error or timeout), else 0: the optional
    `tool_error_penalty` reward, read from the rollout's `tool_errors` column. Off (not added) at penalty 0."""

    def __init__(self, penalty: float) -> None:
        if not 0 < penalty <= 1:
            raise ValueError(f"tool_error_penalty must be in (0, 1] to be added as a reward, got {penalty}.")
        self.penalty = penalty
        self.reward_range = (-penalty, 0.0)
        self.__name__ = "tool_error_penalty"

    def __call__(self, completions: list, tool_errors: Sequence[int] | None = None, **kwargs: Any) -> list[float]:
        if tool_errors is None:
            raise ValueError(
                "The tool_error_penalty reward reads the rollout's tool_errors column, which only the Python tool's "
                "rollout writes (python_tool: true)."
            )
        return [-self.penalty if errors else 0.0 for errors in tool_errors]
