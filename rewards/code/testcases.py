"""Test cases of a code problem from the formats datasets already use, and the program that runs one of them.

Accepted (a dict/list, or its JSON string):
- open-r1 / PrimeIntellect `verification_info`: `{"language": "python", "test_cases": [{"type": "stdin_stdout",
  "input": "...", "output": "..."}, ...]}` (a `"function_call"` case names its function in `fn_name`);
- APPS / TACO `input_output`: `{"inputs": [...], "outputs": [...], "fn_name": "f"}`; with `fn_name` each input is
  the argument list of a call and each output the return value (APPS wraps it in a one-element list);
- a plain list of `{"input": ..., "output": ...}` pairs (stdin/stdout).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

LANGUAGE_ALIASES = {"python": ("python", "py", "python3"), "python3": ("python", "py", "python3")}


class TestFormatError(ValueError):
    """A problem's test cases are in no format this module reads."""

    __test__ = False  # not a pytest class


@dataclass(frozen=True)
class TestCase:
    """One test: `input` is stdin text (`fn_name` None) or the JSON argument list of a call of `fn_name`;
    `output` is the expected stdout text, or the expected return value (any JSON value) of the call."""

    input: str
    output: Any
    fn_name: str | None = None

    __test__ = False  # not a pytest class


def _text(value: Any) -> str:
    """Stdin/stdout text of a test value (TACO sometimes stores a list of lines)."""
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return "" if value is None else str(value)


def _call_arguments(value: Any, where: str) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise TestFormatError(f"{where}: the arguments of a function call must be JSON ({exc.msg}).") from exc
    if not isinstance(value, list):
        value = [value]
    return json.dumps(value)


def _call_output(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _pairs(inputs: list, outputs: list, fn_name: str | None, where: str) -> list[TestCase]:
    if len(inputs) != len(outputs):
        raise TestFormatError(f"{where}: {len(inputs)} inputs but {len(outputs)} outputs.")
    if fn_name:
        pairs = zip(inputs, outputs, strict=True)
        return [TestCase(_call_arguments(i, where), _call_output(o), fn_name) for i, o in pairs]
    return [TestCase(_text(i), _text(o)) for i, o in zip(inputs, outputs, strict=True)]


def parse_tests(value: Any, language: str = "python") -> list[TestCase]:
    """The test cases of one problem (see the module docstring), or a `TestFormatError` that says what is wrong."""
    if isinstance(value, (bytes, str)):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise TestFormatError(f"the tests are a string but not JSON ({exc.msg} at {exc.pos}).") from exc
    if isinstance(value, dict) and "test_cases" in value:  # open-r1 / PrimeIntellect
        wanted = LANGUAGE_ALIASES.get(language, (language,))
        if value.get("language") and str(value["language"]).lower() not in wanted:
            raise TestFormatError(f"the tests are for language {value['language']!r}, not {language!r}.")
        cases = value["test_cases"]
        if isinstance(cases, str):
            cases = json.loads(cases)
        tests = []
        for number, case in enumerate(cases or []):
            if not isinstance(case, dict) or "input" not in case or "output" not in case:
                raise TestFormatError(f"test_cases[{number}] is not an {{input, output}} mapping: {case!r:.100}.")
            fn_name = case.get("fn_name") or value.get("fn_name")
            kind = case.get("type") or ("function_call" if fn_name else "stdin_stdout")
            if kind == "function_call":
                if not fn_name:
                    raise TestFormatError(f"test_cases[{number}] is a function call without fn_name.")
                tests += _pairs([case["input"]], [case["output"]], fn_name, f"test_cases[{number}]")
            elif kind == "stdin_stdout":
                tests.append(TestCase(_text(case["input"]), _text(case["output"])))
            else:
                raise TestFormatError(f"test_cases[{number}] has type {kind!r}; expected stdin_stdout/function_call.")
    elif isinstance(value, dict) and "inputs" in value and "outputs" in value:  # APPS / TACO
        tests = _pairs(list(value["inputs"]), list(value["outputs"]), value.get("fn_name"), "inputs/outputs")
    elif isinstance(value, list) and all(isinstance(c, dict) and "input" in c and "output" in c for c in value):
        tests = [TestCase(_text(c["input"]), _text(c["output"])) for c in value]
    else:
        raise TestFormatError(
            f"unknown tests format {type(value).__name__} {str(value)[:100]!r}: expected {{test_cases: [...]}} "
            "(open-r1/PrimeIntellect), {inputs, outputs, fn_name?} (APPS/TACO) or a list of {input, output}."
        )
    if not tests:
        raise TestFormatError("the problem has no test cases.")
    return tests


def call_harness(code: str, test: TestCase) -> tuple[str, str, str]:
    """(program, stdin, marker) for a function-call test: the completion's code, then a call of `fn_name` (a
    method of `Solution`, LeetCode style, or a top-level function) on the JSON arguments, its result printed as
    JSON after a random marker, so that what the code prints itself is told apart. The expected value never enters
    the sandbox."""
    marker = f"@@result-{secrets.token_hex(8)}@@"
    harness = f"""

def _drgrpo_call():
    import json, sys
    args = json.loads({test.input!r})
    solution = globals().get("Solution")
    name = {test.fn_name!r}
    target = getattr(solution(), name) if solution is not None and hasattr(solution, name) else globals()[name]
    result = target(*args)
    default = lambda o: sorted(o) if isinstance(o, (set, frozenset)) else repr(o)
    sys.stdout.write("\\n" + {marker!r} + json.dumps(result, default=default) + "\\n")
    sys.stdout.flush()


_drgrpo_call()
"""
    return code + harness, "", marker


def call_result(stdout: str, marker: str) -> tuple[bool, Any]:
    """(found, value) of the JSON result a call harness printed last."""
    position = stdout.rfind(marker)
    if position < 0:
        return False, None
    line = stdout[position + len(marker) :].split("\n", 1)[0]
    try:
        return True, json.loads(line)
    except (ValueError, RecursionError):  # not JSON; an int of > 4300 digits; nesting deeper than the parser goes
        return False, None
