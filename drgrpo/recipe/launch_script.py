"""A verl launch script's words as bash would pass them to `python3 -m verl.trainer.main_ppo`: variables expanded.

verl's examples write `data.train_files=$HOME/data/gsm8k/train.parquet`, and bash expands `$HOME` before verl sees
the value; launch scripts also set their own variables first (`train_files=...`, `NNODES=${NNODES:-1}`,
`max_prompt_length=$((1024 * 4))`). `script_words` reads the script line by line as bash does for these cases:

- `$NAME`, `${NAME}`, `${NAME:-default}` / `${NAME-default}` / `${NAME:=default}` and `$((arithmetic))` (integers,
  `+ - * / %` and parentheses) are expanded, outside single quotes; inside double quotes too;
- an assignment `NAME=value` (or `export NAME=value`, or `NAME=value` in front of the command) sets a variable for
  the lines after it; it is not a verl key (verl's keys are dotted);
- the script's own variables come first, then the environment (`environ`), as in bash.

A variable that is set in neither stays in the word as written (`$HOME/...`), so that the converter can refuse the
key that uses it and name the variable. What else bash does (command substitution, globbing, functions, `if`) is not
run: those words stay as written too.
"""

from __future__ import annotations

import ast
import operator
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_EXPANSION = re.compile(rf"\$(?:\(\((?P<arith>[^()]*(?:\([^()]*\)[^()]*)*)\)\)|\{{(?P<braced>{_NAME})"
                        rf"(?:(?P<op>:?[-=])(?P<default>[^}}]*))?\}}|(?P<plain>{_NAME}))")  # fmt: skip
_ASSIGNMENT = re.compile(rf"({_NAME})=(.*)", flags=re.DOTALL)
_ARITHMETIC = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.floordiv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}  # fmt: skip


@dataclass
class ScriptWords:
    """The words of a launch script's lines (comments and continuations removed, variables expanded), and which
    variables were expanded from the environment and from the script itself."""

    lines: list[list[str]] = field(default_factory=list)
    from_environment: dict[str, str] = field(default_factory=dict)
    from_script: dict[str, str] = field(default_factory=dict)


class _Expander:
    def __init__(self, environ: Mapping[str, str]):
        self.environ = environ
        self.script: dict[str, str] = {}
        self.used_environment: dict[str, str] = {}
        self.used_script: dict[str, str] = {}

    def lookup(self, name: str) -> str | None:
        if name in self.script:
            self.used_script[name] = self.script[name]
            return self.script[name]
        if name in self.environ:
            self.used_environment[name] = self.environ[name]
            return self.environ[name]
        return None

    def arithmetic(self, text: str) -> str | None:
        """bash's `$(( ))` on integers; None for anything else (left unexpanded)."""
        expanded = self.expand(text, quote=False)
        try:
            tree = ast.parse(re.sub(r"\$", "", expanded).strip(), mode="eval").body
        except SyntaxError:
            return None

        def value(node: ast.AST) -> int:
            if isinstance(node, ast.Constant) and isinstance(node.value, int):
                return node.value
            if isinstance(node, ast.Name):
                found = self.lookup(node.id)
                return int(found) if found is not None and re.fullmatch(r"-?\d+", found) else 0  # bash: unset is 0
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
                return -value(node.operand) if isinstance(node.op, ast.USub) else value(node.operand)
            if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
                return _ARITHMETIC[type(node.op)](value(node.left), value(node.right))
            raise ValueError(node)

        try:
            return str(value(tree))
        except (ValueError, ZeroDivisionError):
            return None

    def replacement(self, match: re.Match) -> str | None:
        if match.group("arith") is not None:
            return self.arithmetic(match.group("arith"))
        name = match.group("braced") or match.group("plain")
        found = self.lookup(name)
        op = match.group("op")
        if op is not None and (found is None or (op.startswith(":") and found == "")):
            found = self.expand(match.group("default"), quote=False)
            if op.endswith("="):
                self.script[name] = found
        return found

    def expand(self, line: str, *, quote: bool = True) -> str:
        """`line` with its expansions replaced, quoted so that `shlex.split` keeps each one inside its word."""
        out, index, state = [], 0, None
        while index < len(line):
            char = line[index]
            if state == "'":
                state = None if char == "'" else state
            elif char == "\\" and index + 1 < len(line):
                out.append(line[index : index + 2])
                index += 2
                continue
            elif char == "'" and state is None:
                state = "'"
            elif char == '"':
                state = None if state == '"' else '"'
            elif char == "$" and (match := _EXPANSION.match(line, index)):
                value = self.replacement(match)
                if value is None:
                    out.append(match.group(0))  # unset: left as written, for the converter to name
                elif not quote:
                    out.append(value)
                elif state == '"':
                    out.append(re.sub(r'(["\\$`])', r"\\\1", value))
                else:
                    out.append(shlex.quote(value))
                index = match.end()
                continue
            out.append(char)
            index += 1
        return "".join(out)


def logical_lines(text: str) -> list[str]:
    """The script's lines with `\\` continuations joined and comments (`# ...`) removed."""
    lines = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def script_words(text: str, environ: Mapping[str, str]) -> ScriptWords:
    """Each line's words after expansion, minus the variable assignments at its start (see the module docstring).
    `shlex.split` errors (an unclosed quote) are the caller's to report."""
    expander = _Expander(environ)
    words = ScriptWords()
    for line in logical_lines(text):
        tokens = shlex.split(expander.expand(line))
        if tokens[:1] == ["export"]:
            tokens = tokens[1:]
        while tokens and (assignment := _ASSIGNMENT.fullmatch(tokens[0])):
            expander.script[assignment.group(1)] = assignment.group(2)
            tokens = tokens[1:]
        if tokens:
            words.lines.append(tokens)
    words.from_environment = dict(expander.used_environment)
    words.from_script = dict(expander.used_script)
    return words
