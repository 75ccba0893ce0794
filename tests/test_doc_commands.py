"""Every command README.md and docs/*.md show runs as written: each is extracted and checked by what would run it.

Which text is a command (the extraction rule)
---------------------------------------------
A page's code is its fenced blocks (```), its indented code blocks (4+ spaces, after a blank line) and its inline
code spans (`...`, CommonMark backtick runs; a span may cross a line break). In that code, a command is:

* in a fenced block tagged bash, sh, shell or console: every line that is not blank or a `#` comment;
* in an untagged fenced block or an indented block: every line that starts with a command word (other lines are
  program output, YAML or prose);
* an inline span whose whole text starts with a command word and holds a second word (`make demo`,
  `OMP_NUM_THREADS=1 python scripts/bias.py`); a command word alone (`scripts/train.py`) is a file name, which
  tests/test_docs.py checks, and `accelerate launch` alone names the tool (TOOL_NAMES).

A command word is `make`, `python`, `python3`, `bash`, `sh`, `accelerate`, `sbatch`, `pip`, or a path to a program
(`scripts/*.py|sh|slurm`, `benchmarks/*.py`, `.venv*/bin/*`), after an optional `$ ` prompt and `NAME=value`
environment assignments. A trailing `\\` joins the next line; `&&`, `||`, `;` and `|` separate commands; `# ...`
ends one. What a reader fills in is a placeholder: `...` alone (more arguments: dropped), `<text>` (a value of the
reader's), `[X]` (optional: X is checked), the upper-case names of PLACEHOLDERS (replaced by the value given there);
a make variable written `VAR=...` or `VAR=<text>` must still be read by the target, and is checked with the
Makefile's default, or a stand-in where that is empty.

How each kind is checked (nothing trains, loads a model or uses the network)
----------------------------------------------------------------------------
* `make TARGET VAR=value ...`: `make -n -B` on the real Makefile, every value replaced by a sentinel: the target
  exists and every variable given is read by it (its sentinel reaches a command line) or by the Makefile's top
  (`ifeq`/`ifneq`/`export`). Then the target runs for real with VENV pointing at a folder whose `bin/` holds
  recorders for python, accelerate, ruff and trl: bash runs every recipe line as written (loops, `$(...)`,
  conditionals), nothing is installed or trained, and each script call recorded is checked as below (with MAKELEVEL
  set, as under make). `install` and `wheelhouse` start from an empty VENV; other targets from one with the install
  stamps in place, as a user's second command does (so `make install`'s lines run once per command, not per target).
* `python scripts/X.py ARGS` (and `python benchmarks/X.py ARGS`): the script's own `main()` runs in-process until
  its parser has parsed (argparse's `parse_args` or `HfArgumentParser.parse_args_into_dataclasses` stops it there);
  a usage error fails the check. Recipe overrides after `--` are parsed by `parse_recipe` against the recipe(s) the
  script applies them to (OVERRIDE_RECIPES). `scripts/train.py` goes through what train.py calls before training:
  `require_recipe`, the card of `--explain` (`recipe_card`), else `parse_recipe(argv, preflight=True)` (its `--help`
  included): a GPU recipe parses on this CPU machine, for its own world size.
* A path run as a program (`scripts/slurm/submit.sh ...`) must be executable with a `#!` line.
* `python -m MODULE`: the module imports.
* `accelerate launch ...`: accelerate's own launch parser; `--config_file` exists and is YAML; the training script
  and its arguments as above.
* `bash X.sh`, `sbatch ... X.slurm RECIPE [CONFIG] [-- overrides]`: the script exists and `bash -n` passes; RECIPE,
  CONFIG and the overrides as above; RUN_ELSEWHERE names the test of the suite that runs the script (checked to
  exist).
* `pip ...`: pip's own option parser.
* `NAME=value` before a program: something in the project reads NAME (or THIRD_PARTY_ENV names its reader).
* A program of another project (EXTERNAL): the reason it cannot run here is written next to it.

A command none of these can check fails, naming its page and line. A command a page shows as a mistake (a "what
you did" table, PROSE_MISTAKES) must fail with the message the page quotes.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import logging
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
import yaml
from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_TAGS = {"bash", "sh", "shell", "console"}
COMMAND_WORDS = {"make", "python", "python3", "bash", "sh", "accelerate", "sbatch", "pip"}
PROGRAM_PATH = re.compile(r"^(?:scripts|benchmarks)/[\w/.-]+\.(?:py|sh|slurm)$|^\.venv[\w.-]*/bin/[\w.-]+$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# A span that names a tool (in prose: "runs under `accelerate launch`"), not a command to run.
TOOL_NAMES = {"accelerate launch"}


@dataclass(frozen=True)
class DocCommand:
    page: str  # relative to the repository root
    line: int  # 1-based line of the command's first line
    text: str  # as written (continuation lines joined, a trailing `# comment` included)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


# ----------------------------------------------------------------------------------------------------------------------
# Extraction
# ----------------------------------------------------------------------------------------------------------------------
def _blocks(lines: list[str]) -> tuple[list[tuple[str | None, int, list[str]]], set[int]]:
    """The fenced and indented code blocks of a page: (tag, first line number, lines); and the line numbers (0-based)
    they cover, which are not prose. An indented block's tag is None, a fenced block's is its info string ('' when
    untagged)."""
    blocks, covered, i = [], set(), 0
    previous_blank = True
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^(`{3,})\s*([\w-]*)", line)
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1))), len(lines))
            blocks.append((fence.group(2).lower(), i + 2, lines[i + 1 : end]))
            covered.update(range(i, end + 1))
            i, previous_blank = end + 1, False
            continue
        if previous_blank and line.startswith("    ") and line.strip():
            start = i
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                i += 1
            while i > start and not lines[i - 1].strip():  # trailing blank lines are not part of the block
                i -= 1
            blocks.append((None, start + 1, [text[4:] for text in lines[start:i]]))
            covered.update(range(start, i))
            previous_blank = False
            continue
        previous_blank = not line.strip()
        i += 1
    return blocks, covered


def _spans(lines: list[str], covered: set[int]) -> list[tuple[int, str]]:
    """Inline code spans of the prose (line number, text): a run of N backticks up to the next run of exactly N,
    within one paragraph; line breaks inside a span become spaces, the text is stripped."""
    spans = []
    paragraph: list[tuple[int, str]] = []

    def flush() -> None:
        text = "\n".join(line for _, line in paragraph)
        starts = [0]
        for _, line in paragraph[:-1]:
            starts.append(starts[-1] + len(line) + 1)
        for match in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", text, flags=re.S):
            offset = match.start()
            line_index = max(k for k, start in enumerate(starts) if start <= offset)
            spans.append((paragraph[line_index][0], " ".join(match.group(2).split())))
        paragraph.clear()

    for number, line in enumerate(lines):
        if number in covered or not line.strip():
            flush()
            continue
        paragraph.append((number + 1, line))
    flush()
    return spans


def _words(text: str) -> list[str]:
    """The words of a command line, or [] when shlex cannot split it."""
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return text.split()


def _program(text: str) -> str | None:
    """The program a command line starts with (after `$ ` and NAME=value assignments), when it is a command word."""
    words = _words(text.removeprefix("$ "))
    while words and ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return None
    if words[0] in COMMAND_WORDS or PROGRAM_PATH.match(words[0]):
        return words[0]
    return None


def _logical_lines(first: int, lines: list[str]) -> list[tuple[int, str]]:
    """Lines with their `\\` continuations joined: (line number, text)."""
    joined, i = [], 0
    while i < len(lines):
        start, text = i, lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1].rstrip() + " " + lines[i].strip()
        joined.append((first + start, text.strip()))
        i += 1
    return joined


def extract_commands(text: str, page: str) -> list[DocCommand]:
    """The commands of one page, by the rule at the top of this file, in the page's order."""
    lines = text.splitlines()
    blocks, covered = _blocks(lines)
    found = []
    for tag, first, block in blocks:
        if tag not in (None, "", *SHELL_TAGS):
            continue  # yaml, python, ...: not shell
        for number, line in _logical_lines(first, block):
            line = line.removeprefix("$ ")
            if not line or line.startswith("#"):
                continue
            if tag in SHELL_TAGS or _program(line):
                found.append(DocCommand(page, number, line))
    for number, span in _spans(lines, covered):
        span = span.removeprefix("$ ")
        if span in TOOL_NAMES or not _program(span):
            continue
        words = _words(span)
        if len(words) >= 2:  # a program and an argument, or an environment assignment and a program
            found.append(DocCommand(page, number, span))
    return sorted(found, key=lambda command: command.line)


def all_commands() -> list[DocCommand]:
    return [command for page in PAGES for command in extract_commands(page.read_text(), str(page.relative_to(ROOT)))]


# ----------------------------------------------------------------------------------------------------------------------
# What the checks need to know
# ----------------------------------------------------------------------------------------------------------------------
# Upper-case placeholders of the docs' synopses (`python scripts/plot.py RUN_DIR ...`) and the value checked for each.
PLACEHOLDERS = {
    "RECIPE": ["recipes/tiny_drgrpo.yaml"],
    "RECIPE.yaml": ["recipes/tiny_drgrpo.yaml"],
    "ACCELERATE_CONFIG": ["accelerate_configs/zero3_multinode.yaml"],
    "RUN_DIR": ["outputs/demo/model"],
    "DIR": ["outputs/eval"],
    "overrides": ["--max_steps", "2"],
    "A": ["a"],
    "B": ["4"],
    "S": ["1"],
    "FAMILY": ["sum_plus"],  # make code-rl ARGS="--task FAMILY": a family of make probe-code
}
ELIDED = "\u2026"  # what `<text>` becomes before the line is split (it may hold spaces and quotes)


def _comparison_recipes(task: str | None = None):
    """The two recipes of a `make compare` task: `task`, or the task the script was given."""

    def recipes(namespace) -> list[str]:
        from drgrpo.experiments.comparison import RECIPES

        return list(RECIPES[task or namespace.task])

    return recipes


def _bias_recipes(namespace) -> list[str]:
    from drgrpo.experiments.bias.experiment import BiasSettings

    return list(BiasSettings.recipes)


def _tiny_demo_recipe(namespace) -> list[str]:
    from drgrpo.experiments.demo import DemoSettings

    return [DemoSettings.recipe]


# The recipe(s) a script applies its overrides after `--` to, from its parsed arguments.
OVERRIDE_RECIPES = {
    "scripts/plan.py": lambda namespace: [namespace.recipe],
    "scripts/demo.py": lambda namespace: [namespace.recipe],
    "scripts/demo_tools.py": lambda namespace: [namespace.recipe],
    "scripts/demo_tiny.py": _tiny_demo_recipe,
    "scripts/bias.py": _bias_recipes,
    "scripts/bias_real.py": _comparison_recipes("smollm2-long"),  # its runs are make compare's long task
    "scripts/compare.py": _comparison_recipes(),
}
# Shell scripts: parsed (`bash -n`, their recipe and overrides), and run by these tests of the suite.
RUN_ELSEWHERE = {
    "scripts/gpu_smoke.sh": (
        "tests/test_gpu_smoke.py::test_cpu_mode_passes_and_skips_every_gpu_only_step_with_its_reason"
    ),
    "scripts/slurm/train.slurm": "tests/test_slurm.py::test_sbatch_script_plans_then_launches_every_node",
    "scripts/slurm/submit.sh": (
        "tests/test_slurm.py::test_a_fresh_clone_job_logs_where_a_folder_exists_and_every_srun_states_cpus_and_gpus"
    ),
}
# Programs of other projects the docs show; none can run here (no GPU, no network), so each says why.
EXTERNAL = {
    "lighteval": "lighteval's CLI, installed by the line before it into its own venv; it needs vLLM and a GPU",
}
# Environment variables of other programs the docs set (this project's own must appear in its source).
THIRD_PARTY_ENV = {"WANDB_MODE", "PIP_EXTRA_INDEX_URL", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "HF_HUB_OFFLINE"}
# Commands the prose shows as a mistake, and the start of the message the page says it prints: the check must fail
# with that text. A table whose first column is "what you did" lists mistakes too (see `documented_mistakes`).
PROSE_MISTAKES = {("docs/demo.md", 'make demo ARGS="--max_steps 2"'): "--max_steps is not an option of demo.py"}


@dataclass(frozen=True)
class Mistake:
    message: str  # the start of what the page says it prints
    must_fail: bool  # False in a "what you did" table: the mistake may be one that only a run shows (no data yet)


def documented_mistakes(text: str, page: str) -> dict[int, Mistake]:
    """Line number -> the mistake shown there: each row of a "what you did | what it prints" table (the message up
    to its first ` (`, `: ` or `...`), and the lines of PROSE_MISTAKES."""
    mistakes, in_table = {}, False
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells:
            in_table = False
        elif not in_table:
            in_table = cells[0].lower() == "what you did"
        elif not set(cells[0]) <= set("-: ") and len(cells) > 1:
            message = re.split(r" \(|: |\.\.\.", cells[1].replace("`", ""))[0].strip()
            mistakes[number] = Mistake(message, must_fail=False)
    for (mistake_page, command), message in PROSE_MISTAKES.items():
        for number, line in enumerate(lines, start=1):
            if mistake_page == page and f"`{command}`" in line:
                mistakes[number] = Mistake(message, must_fail=True)
    return mistakes


# ----------------------------------------------------------------------------------------------------------------------
# Splitting a command line
# ----------------------------------------------------------------------------------------------------------------------
class Broken(Exception):
    """A command that does not run as written; the message says why."""


@dataclass
class Invocation:
    env: dict[str, str]  # NAME=value assignments before the program
    program: str
    args: list[str]
    elided: set[str]  # VAR=... / VAR=<...> assignments among the args: the variable is named, its value not


def split_command(text: str) -> list[Invocation]:
    """The programs a command line runs (`a && b | c` -> three), placeholders resolved (see the top of this file)."""
    text = re.sub(r"<[^<>]*>", ELIDED, text.removeprefix("$ "))
    text = re.sub(r"(?<!\S)\[([^\[\]]*)\](?!\S)", r"\1", text)  # [optional part] -> optional part
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError as error:
        raise Broken(f"the shell cannot split it ({error})") from error
    commands, current = [], []
    for token in [*tokens, ";"]:
        if token in ("&&", "||", ";", "|", "&"):
            if current:
                commands.append(current)
            current = []
        elif set(token) <= set("();<>|&"):
            raise Broken(f"a shell construct the check does not follow: {token!r}")
        else:
            current.append(token)
    invocations = []
    for words in commands:
        env = {}
        while words and ASSIGNMENT.match(words[0]):
            name, value = words.pop(0).split("=", 1)
            env[name] = value
        if not words:
            raise Broken("no program after the environment assignments")
        args, elided = [], set()
        for word in words[1:]:
            if "..." in word or ELIDED in word:
                if ASSIGNMENT.match(word):
                    elided.add(word.split("=", 1)[0])
                continue
            if " " in word or ASSIGNMENT.match(word):  # ARGS="--seed S": the words of the value
                name, equals, value = word.partition("=") if ASSIGNMENT.match(word) else ("", "", word)
                words_of = re.sub(r"\S+", lambda match: " ".join(PLACEHOLDERS.get(match[0], [match[0]])), value)
                args.append(name + equals + words_of)
            else:
                args.extend(PLACEHOLDERS.get(word, [word]))
        invocations.append(Invocation(env, words[0], args, elided))
    return invocations


# ----------------------------------------------------------------------------------------------------------------------
# The checks, one per kind of program
# ----------------------------------------------------------------------------------------------------------------------
class _Parsed(BaseException):
    """Raised by a script's parser once it has parsed: the script stops there (past any `except Exception`)."""

    def __init__(self, result: object) -> None:
        self.result = result


def _stop_after(method):
    def parse(self, *args, **kwargs):
        raise _Parsed(method(self, *args, **kwargs))

    return parse


@functools.cache
def _script_module(path: Path):
    spec = importlib.util.spec_from_file_location(f"doc_command_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        with mock.patch.object(sys, "path", [str(path.parent), *sys.path]):
            spec.loader.exec_module(module)
    except Exception as error:
        raise Broken(f"{path.relative_to(ROOT)} does not import: {type(error).__name__}: {error}") from None
    if not callable(getattr(module, "main", None)):
        raise Broken(f"{path.relative_to(ROOT)} has no main() to parse its arguments with")
    return module


@contextlib.contextmanager
def _working_directory(path: Path):
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


@contextlib.contextmanager
def _script_context(script: str, argv: list[str], env: dict[str, str]):
    """The process a script would see: its argv and environment, the repository as working directory; its output
    captured (what it prints before it stops is not the check's)."""
    output = io.StringIO()
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(sys, "argv", [script, *argv]))
        stack.enter_context(mock.patch.dict(os.environ, env))
        stack.enter_context(mock.patch.object(logging, "basicConfig", lambda *args, **kwargs: None))
        stack.enter_context(contextlib.redirect_stdout(output))
        stack.enter_context(contextlib.redirect_stderr(output))
        stack.enter_context(_working_directory(ROOT))
        yield output


def _last_line(output: io.StringIO) -> str:
    lines = [line for line in output.getvalue().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no message)"


def _check_recipe(argv: list[str], env: dict[str, str], where: str) -> None:
    """`RECIPE [--key value ...]` as training parses it, without a GPU, at the recipe's own world size."""
    from drgrpo.recipe.cli import parse_recipe

    with _script_context("scripts/train.py", argv, env) as output:
        try:
            parse_recipe(argv, preflight=True)
        except SystemExit as stop:  # --help
            if stop.code not in (0, None):
                raise Broken(f"{where}: {_last_line(output)}") from None
        except Exception as error:
            raise Broken(f"{where}: {error}") from None


def check_train(argv: list[str], env: dict[str, str]) -> None:
    """scripts/train.py: what it calls before training (require_recipe, parse_recipe); for --explain, its parse and
    card (`recipe_card`: the checks before the card read the recipe's data, which a demo writes first)."""
    from drgrpo.recipe.cli import require_recipe
    from drgrpo.recipe.preflight import recipe_card

    with _script_context("scripts/train.py", argv, env):
        try:
            require_recipe(argv)
            if "--explain" in argv:
                recipe_card(argv)
                return
        except Exception as error:
            raise Broken(f"scripts/train.py: {error}") from None
    _check_recipe(argv, env, "scripts/train.py")


def check_script(script: str, argv: list[str], env: dict[str, str]) -> None:
    """A Python script's own parser on `argv` (its main() stops once parsed), then its recipe overrides after `--`."""
    path = ROOT / script
    if not path.is_file():
        raise Broken(f"{script} does not exist")
    if script == "scripts/train.py":
        return check_train(argv, env)
    from transformers import HfArgumentParser

    module = _script_module(path)
    with _script_context(script, argv, env) as output:
        try:
            with (
                mock.patch.object(
                    argparse.ArgumentParser, "parse_args", _stop_after(argparse.ArgumentParser.parse_args)
                ),
                mock.patch.object(
                    HfArgumentParser,
                    "parse_args_into_dataclasses",
                    _stop_after(HfArgumentParser.parse_args_into_dataclasses),
                ),
            ):
                module.main()
        except _Parsed as parsed:
            namespace = parsed.result
        except SystemExit as stop:
            if stop.code in (0, None):  # --help
                return None
            raise Broken(f"{script}: {_last_line(output)}") from None
        except Exception as error:
            raise Broken(f"{script}: {error}") from None
        else:
            raise Broken(f"{script}: main() returned without parsing its arguments")
    overrides = [arg for arg in argv[argv.index("--") + 1 :] if arg != "--"] if "--" in argv else []
    if overrides:
        if script not in OVERRIDE_RECIPES:
            raise Broken(f"{script} is given recipe overrides; add it to OVERRIDE_RECIPES in {Path(__file__).name}")
        for recipe in OVERRIDE_RECIPES[script](namespace):
            _check_recipe([recipe, *overrides], env, f"{script}'s overrides on {recipe}")


def check_python(args: list[str], env: dict[str, str]) -> None:
    if not args:
        raise Broken("python without a script")
    if args[0] == "-m":
        if len(args) < 2 or importlib.util.find_spec(args[1]) is None:
            raise Broken(f"python -m {' '.join(args[1:2])}: no such module")
        return
    if args[0].startswith("-"):
        raise Broken(f"python option {args[0]} is not checked; run a script")
    check_script(args[0], args[1:], env)


def _yaml_file(path: str, what: str) -> None:
    if not (ROOT / path).is_file():
        raise Broken(f"{what} {path} does not exist")
    try:
        yaml.safe_load((ROOT / path).read_text())
    except yaml.YAMLError as error:
        raise Broken(f"{what} {path} is not YAML: {error}") from None


def check_accelerate(args: list[str], env: dict[str, str]) -> None:
    from accelerate.commands.launch import launch_command_parser

    if args[:1] != ["launch"]:
        raise Broken(f"accelerate {' '.join(args[:1])}: only `accelerate launch` is checked")
    output = io.StringIO()
    try:
        with contextlib.redirect_stderr(output), contextlib.redirect_stdout(output):
            namespace = launch_command_parser().parse_args(args[1:])
    except SystemExit:
        raise Broken(f"accelerate launch: {_last_line(output)}") from None
    if namespace.config_file:
        _yaml_file(namespace.config_file, "accelerate config")
    check_script(namespace.training_script, namespace.training_script_args, env)


def check_pip(args: list[str], env: dict[str, str]) -> None:
    from pip._internal.commands import commands_dict, create_command

    if not args or args[0] not in commands_dict:
        raise Broken(f"pip {' '.join(args[:1])}: not a pip command")
    output = io.StringIO()
    try:
        with contextlib.redirect_stderr(output), contextlib.redirect_stdout(output):
            create_command(args[0]).parse_args(args[1:])
    except SystemExit:
        raise Broken(f"pip {args[0]}: {_last_line(output)}") from None


def _test_exists(test: str) -> bool:
    file, _, name = test.partition("::")
    return (ROOT / file).is_file() and bool(re.search(rf"^def {re.escape(name)}\(", (ROOT / file).read_text(), re.M))


def check_shell_script(script: str, args: list[str], env: dict[str, str]) -> None:
    """A shell script: it exists, bash parses it, a test of the suite runs it; its RECIPE [CONFIG] [-- overrides]."""
    path = ROOT / script
    if not path.is_file():
        raise Broken(f"{script} does not exist")
    syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    if syntax.returncode:
        raise Broken(f"bash -n {script}: {syntax.stderr.strip()}")
    if not _test_exists(RUN_ELSEWHERE.get(script, "")):
        raise Broken(f"{script}: no test runs it; name one that exists in RUN_ELSEWHERE of {Path(__file__).name}")
    if script == "scripts/slurm/submit.sh":  # sbatch options up to the recipe
        while args and not args[0].endswith((".yaml", ".yml")):
            args = args[1:]
    if script in ("scripts/slurm/submit.sh", "scripts/slurm/train.slurm"):
        head, overrides = (args[: args.index("--")], args[args.index("--") + 1 :]) if "--" in args else (args, [])
        if not 1 <= len(head) <= 2:
            raise Broken(f"{script} takes RECIPE [ACCELERATE_CONFIG] [-- --key value ...], got {shlex.join(args)}")
        if len(head) == 2:
            _yaml_file(head[1], "accelerate config")
        _check_recipe([head[0], *overrides], env, script)
    elif args:
        raise Broken(f"{script} takes no arguments, got {shlex.join(args)}")


def check_sbatch(args: list[str], env: dict[str, str]) -> None:
    while args and args[0].startswith("-"):  # sbatch's options: --opt value or --opt=value
        args = args[1:] if "=" in args[0] else args[2:]
    if not args:
        raise Broken("sbatch without a job script")
    check_shell_script(args[0], args[1:], env)


RECORDER = """#!/bin/sh
{ printf '%s\\037' "${0##*/}" "$@"; printf '\\036'; } >> "$DOC_COMMANDS_RECORD"
"""
RECORDED_PROGRAMS = ("python", "accelerate", "ruff", "trl")


@dataclass(frozen=True)
class MakeJob:
    targets: tuple[str, ...]
    variables: tuple[tuple[str, str], ...]  # as given, elided ones with their stand-in
    env: tuple[tuple[str, str], ...]


@dataclass
class MakeResult:
    dry_status: int
    dry_output: str  # `make -n -B` with a sentinel for every variable
    status: int
    output: str  # the real run, programs recorded
    calls: list[list[str]]  # [program, *args] of each recorded program, in order


_MAKE_RESULTS: dict[MakeJob, MakeResult] = {}


@functools.cache
def _makefile_globals() -> frozenset[str]:
    """Variables the Makefile reads outside any target (`ifneq ($(WHEELHOUSE),)`, `export ... $(X)`)."""
    lines = re.findall(r"^(?:ifeq|ifneq|ifdef|ifndef|export)\b.*$", (ROOT / "Makefile").read_text(), flags=re.M)
    names = {name for line in lines for name in re.findall(r"\$\((\w+)\)", line)}
    return frozenset(names | {line.split()[1] for line in lines if line.startswith(("ifdef", "ifndef"))})


def _stand_in(name: str) -> str | None:
    """The value checked for `NAME=...`: None (the Makefile's default applies) when the Makefile gives one."""
    default = re.search(rf"^{name}\s*\?=[ \t]*(\S.*)?$", (ROOT / "Makefile").read_text(), flags=re.M)
    return None if default and default.group(1) else f"doc-{name.lower()}"


def make_job(invocation: Invocation) -> MakeJob:
    options = [arg for arg in invocation.args if arg.startswith("-")]
    if options:
        raise Broken(f"make options are not checked: {options}")
    variables = [tuple(arg.split("=", 1)) for arg in invocation.args if ASSIGNMENT.match(arg)]
    variables += [(name, _stand_in(name)) for name in sorted(invocation.elided)]
    return MakeJob(
        targets=tuple(arg for arg in invocation.args if not ASSIGNMENT.match(arg)),
        variables=tuple(variables),
        env=tuple(sorted(invocation.env.items())),
    )


def _make_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}


# The targets whose own recipe is an install: they start from an empty venv. Every other target starts from an
# installed one (its stamps in place), as a user's second command does; EXTRAS other than dev still install first.
INSTALL_TARGETS = {"install", "wheelhouse"}
INSTALLED_STAMPS = (".installed-dev", ".installed-smollm2", ".installed-wheelhouse-tools")


def run_make_jobs(jobs: list[MakeJob]) -> None:
    """Run `make` for every job not run yet, all from one bash process (a fork of this process per make would cost
    more than make itself): `make -n -B` with a sentinel for each variable (once per target and variable names), then
    the real run, whose python, accelerate, ruff and trl are recorders (VENV is a folder of them)."""
    todo = [job for job in dict.fromkeys(jobs) if job not in _MAKE_RESULTS]
    if not todo:
        return
    with tempfile.TemporaryDirectory(prefix="doc-commands-") as folder:
        recorders = Path(folder) / "bin"
        recorders.mkdir()
        for program in RECORDED_PROGRAMS:
            (recorders / program).write_text(RECORDER)
            (recorders / program).chmod(0o755)
        lanes, dry_runs = ([], []), {}  # two lanes at once: most of a make run is waiting for its children
        for index, job in enumerate(todo):
            script = lanes[index % 2]
            out = Path(folder) / str(index)
            venv = out / "venv"
            place = [f"VENV={venv}", f"PYTHON={venv}/bin/python"]
            env = ["env", *(f"{name}={value}" for name, value in job.env)] if job.env else []
            venv.mkdir(parents=True)
            (venv / "bin").symlink_to(recorders)
            (out / "record").touch()
            if not INSTALL_TARGETS & set(job.targets):
                for stamp in INSTALLED_STAMPS:
                    (venv / stamp).touch()
            dry_key = (job.targets, tuple(name for name, _ in job.variables), tuple(name for name, _ in job.env))
            if job.variables and dry_key not in dry_runs:
                dry_runs[dry_key] = out / "dry"
                sentinels = [f"{name}=__DOC_{name}__" for name, _ in job.variables]
                dry = [*env, "make", "--no-print-directory", "-n", "-B", *job.targets, *sentinels, *place]
                script.append(f"{shlex.join(dry)} >{out}/dry 2>&1 </dev/null; echo $? >{out}/dry.status")
            values = [f"{name}={value}" for name, value in job.variables if value is not None]
            run = [*env, f"DOC_COMMANDS_RECORD={out}/record", "make", "--no-print-directory", *job.targets, *values]
            script.append(f"{shlex.join([*run, *place])} >{out}/run 2>&1 </dev/null; echo $? >{out}/run.status")
        lane_scripts = ["{ " + "\n".join(lane) + "\n} &" for lane in lanes if lane]
        driver = "\n".join([f"cd {shlex.quote(str(ROOT))}", *lane_scripts, "wait"])
        subprocess.run(["bash", "-c", driver], env=_make_env(), check=True)
        for index, job in enumerate(todo):
            out = Path(folder) / str(index)
            dry = dry_runs.get(
                (job.targets, tuple(name for name, _ in job.variables), tuple(name for name, _ in job.env))
            )
            calls = (out / "record").read_text().split("\036")
            _MAKE_RESULTS[job] = MakeResult(
                dry_status=int(dry.with_suffix(".status").read_text()) if dry else 0,
                dry_output=dry.read_text() if dry else "",
                status=int((out / "run.status").read_text()),
                output=(out / "run").read_text(),
                calls=[call.split("\037")[:-1] for call in calls if call],
            )


def check_make(invocation: Invocation) -> None:
    """`make [TARGET] [VAR=value ...]`: the target exists and reads every variable given; it runs as written with
    its programs recorded, and every script call its recipe lines make is parsed."""
    job = make_job(invocation)
    run_make_jobs([job])
    result = _MAKE_RESULTS[job]
    command = shlex.join(["make", *job.targets])
    if result.dry_status:
        raise Broken(f"make -n: {result.dry_output.strip().splitlines()[-1]}")
    unread = [
        name
        for name, _ in job.variables
        if f"__DOC_{name}__" not in result.dry_output and name not in _makefile_globals()
    ]
    if unread:
        raise Broken(f"{command} does not read {', '.join(unread)} (a typo, or another target's variable)")
    if result.status:
        raise Broken(f"{command} (its programs recorded, not run) failed: {result.output.strip()[-600:]}")
    env = {**dict(job.env), "MAKELEVEL": "1"}
    for program, *call in result.calls:
        if program == "python" and call[:1] == ["-m"]:
            if importlib.util.find_spec(call[1]) is None:
                raise Broken(f"{command} runs python -m {call[1]}: no such module")
        elif program == "python" and call[:1] != ["-c"]:
            check_script(call[0], call[1:], env)
        elif program == "accelerate":
            check_accelerate(call, env)


@functools.cache
def _source_text() -> str:
    files = [
        ROOT / "Makefile",
        *ROOT.glob("scripts/**/*"),
        *ROOT.glob("drgrpo/**/*.py"),
        *ROOT.glob("rewards/**/*.py"),
        ROOT / "tests" / "conftest.py",
    ]
    return "\n".join(path.read_text(errors="replace") for path in files if path.is_file())


def check_invocation(invocation: Invocation) -> None:
    for name in invocation.env:
        if name not in THIRD_PARTY_ENV and not re.search(rf"\b{name}\b", _source_text()):
            raise Broken(f"{name}=...: nothing in the project reads {name}")
    env = {name: value for name, value in invocation.env.items() if "..." not in value and ELIDED not in value}
    invocation = Invocation(env, invocation.program, invocation.args, invocation.elided)
    program, args = invocation.program, invocation.args
    name = Path(program).name
    if PROGRAM_PATH.match(program) and not program.startswith(".venv"):  # run as `scripts/x.py ...`: as a program
        path = ROOT / program
        if not path.is_file():
            raise Broken(f"{program} does not exist")
        if not os.access(path, os.X_OK) or not path.read_bytes().startswith(b"#!"):
            raise Broken(f"{program} is not a program (no execute bit or #! line): write `python {program}`")
    if name == "make":
        return check_make(invocation)
    if invocation.elided:
        raise Broken(f"{', '.join(sorted(invocation.elided))}=...: only make reads VAR=value arguments")
    if name in ("python", "python3"):
        return check_python(args, env)
    if program.endswith(".py"):
        return check_script(program, args, env)
    if name in ("bash", "sh"):
        if not args:
            raise Broken(f"{name} without a script")
        return check_shell_script(args[0], args[1:], env)
    if program.endswith((".sh", ".slurm")):
        return check_shell_script(program, args, env)
    if name == "sbatch":
        return check_sbatch(args, env)
    if name == "accelerate":
        return check_accelerate(args, env)
    if name == "pip":
        return check_pip(args, env)
    if name in EXTERNAL:
        return None
    raise Broken(f"no check knows {program!r}: give it one in {Path(__file__).name}, or list it in EXTERNAL with why")


_CHECKED: dict[str, str | None] = {}


def check_command(text: str) -> str | None:
    """Why the command does not run as written, or None when every program it runs passes its check."""
    try:
        invocations = split_command(text)
        key = repr(invocations)
        if key not in _CHECKED:
            try:
                for invocation in invocations:
                    check_invocation(invocation)
                _CHECKED[key] = None
            except Broken as broken:
                _CHECKED[key] = str(broken)
        return _CHECKED[key]
    except Broken as broken:
        return str(broken)


def check_commands(commands: list[DocCommand]) -> dict[DocCommand, str | None]:
    """Each command's `check_command`, every make run of them batched first."""
    jobs = []
    for command in commands:
        with contextlib.suppress(Broken):
            jobs += [make_job(inv) for inv in split_command(command.text) if Path(inv.program).name == "make"]
    run_make_jobs(jobs)
    return {command: check_command(command.text) for command in commands}


# ----------------------------------------------------------------------------------------------------------------------
# The tests
# ----------------------------------------------------------------------------------------------------------------------
def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


COMMANDS = all_commands()


def page_failures(page: str, text: str, commands: list[DocCommand], results: dict[DocCommand, str | None]) -> list[str]:
    """`page:line: command` and why, for each command of the page that does not run as written. A command shown as
    a mistake fails with the message the page quotes (one in a "what you did" table may instead pass the check: a
    mistake that only a run shows)."""
    mistakes = documented_mistakes(text, page)
    failures = []
    for command in commands:
        why, mistake = results[command], mistakes.get(command.line)
        if mistake is None:
            if why is not None:
                failures.append(f"{command}\n    {why}")
        elif why is None and mistake.must_fail:
            failures.append(
                f"{command}\n    shown as a mistake that prints {mistake.message!r}, but it passes the check"
            )
        elif why is not None and mistake.message not in why:
            failures.append(f"{command}\n    shown as a mistake that prints {mistake.message!r}, but: {why}")
    return failures


@pytest.fixture(scope="module")
def results() -> dict[DocCommand, str | None]:
    return check_commands(COMMANDS)


def test_the_pages_show_commands():
    """The extractor finds the docs' commands at all (a change of markup cannot silently empty the check)."""
    per_page = {_page_id(page): sum(command.page == _page_id(page) for command in COMMANDS) for page in PAGES}
    assert len(COMMANDS) >= 200, per_page
    assert per_page["README.md"] >= 30, per_page


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_command_runs_as_written(page, results):
    commands = [command for command in COMMANDS if command.page == _page_id(page)]
    failures = page_failures(_page_id(page), page.read_text(), commands, results)
    summary = f"{len(failures)} command(s) of {_page_id(page)} do not run as written:"
    assert not failures, "\n".join([summary, *failures])


def test_run_elsewhere_names_tests_that_exist():
    missing = {script: test for script, test in RUN_ELSEWHERE.items() if not _test_exists(test)}
    assert not missing, f"RUN_ELSEWHERE names tests that do not exist: {missing}"
    assert all((ROOT / script).is_file() for script in RUN_ELSEWHERE)


# ----------------------------------------------------------------------------------------------------------------------
# The checker on pages whose answer is known
# ----------------------------------------------------------------------------------------------------------------------
def test_the_extractor_follows_the_rule():
    text = """# Page

Run `make demo`, then `make eval MODEL=<your run's output_dir> BENCH=math500`; `scripts/train.py` and
`accelerate launch` are names, `make
plan RECIPE=recipes/a.yaml` crosses a line, ```` ```python ```` is not a command, nor is `make`.

    make test    # a comment
    algorithm: Dr.GRPO (output, not a command)
    python scripts/plan.py recipes/qwen3_8b_drgrpo.yaml \\
        --num_processes 16

```bash
OMP_NUM_THREADS=1 make bias && ls outputs/bias
```

```yaml
reward_funcs: [accuracy]
```

```
$ python scripts/train.py recipes/tiny_drgrpo.yaml --explain
algorithm: Dr.GRPO
```
- a list item
    make this is a continuation line, not code
"""
    found = [(command.line, command.text) for command in extract_commands(text, "x.md")]
    assert found == [
        (3, "make demo"),
        (3, "make eval MODEL=<your run's output_dir> BENCH=math500"),
        (4, "make plan RECIPE=recipes/a.yaml"),
        (7, "make test    # a comment"),
        (9, "python scripts/plan.py recipes/qwen3_8b_drgrpo.yaml --num_processes 16"),
        (13, "OMP_NUM_THREADS=1 make bias && ls outputs/bias"),
        (21, "python scripts/train.py recipes/tiny_drgrpo.yaml --explain"),
    ]


def test_placeholders_and_joined_commands_are_split_as_documented():
    (make,) = split_command('make eval MODEL=<a LoRA run\'s output_dir> BENCH=paper ARGS="--tool_max_calls B" ...')
    assert make.args == ["eval", "BENCH=paper", "ARGS=--tool_max_calls 4"] and make.elided == {"MODEL"}
    first, second = split_command("WANDB_MODE=offline make train && python scripts/plot.py RUN_DIR [--smooth 1]")
    assert (first.env, first.args) == ({"WANDB_MODE": "offline"}, ["train"])
    assert second.args == ["scripts/plot.py", "outputs/demo/model", "--smooth", "1"]
    assert split_command('pip install "lighteval[math,vllm]"')[0].args == ["install", "lighteval[math,vllm]"]


BROKEN_PAGE = """# Broken commands, each on its own line

    make no-such-target
    make eval MODLE=outputs/demo/model
    make plan RECIPE=recipes/tiny_drgrpo.yaml ARGS="--no_such_key 1"
    python scripts/no_such_script.py --x 1
    python scripts/plan.py recipes/tiny_drgrpo.yaml --no_such_flag
    python scripts/train.py recipes/tiny_drgrpo.yaml --learning_rat 1e-6
    python scripts/demo_tiny.py -- --max_steps two
    accelerate launch --config_file accelerate_configs/zero9.yaml scripts/train.py recipes/tiny_drgrpo.yaml
    sbatch --nodes 2 scripts/slurm/train.slurm recipes/no_such_recipe.yaml
    NO_SUCH_SETTING=1 make demo-tiny
    make score SCORE_INPUT=x.jsonl SCORE_REWARDS=accuracy ARGS="--no_such_option 1"
    pip install --no-such-pip-flag x
    scripts/train.py recipes/tiny_drgrpo.yaml --explain

Then `make demo ARGS="--seed 1"` (fine) and `python scripts/evaluate.py --n zero` (not).

```bash
frobnicate --all
```
"""


def test_a_broken_command_fails_naming_its_page_and_line():
    commands = extract_commands(BROKEN_PAGE, "scratch.md")
    results = check_commands(commands)
    failures = page_failures("scratch.md", BROKEN_PAGE, commands, results)
    broken_lines = [*range(3, 16), 17, 20]
    assert [int(failure.split(":")[1]) for failure in failures] == broken_lines, "\n".join(failures)
    report = "\n".join(failures)
    for why in [
        "No rule to make target 'no-such-target'",
        "make eval does not read MODLE",
        "no_such_key",
        "scripts/no_such_script.py does not exist",
        "unrecognized arguments: --no_such_flag",
        "learning_rat",
        "max_steps: 'two' is not an integer",
        "accelerate config accelerate_configs/zero9.yaml does not exist",
        "no_such_recipe.yaml",
        "no check knows 'frobnicate'",
        "nothing in the project reads NO_SUCH_SETTING",
        "--no_such_option",
        "no such option: --no-such-pip-flag",
        "scripts/train.py is not a program (no execute bit or #! line): write `python scripts/train.py`",
        "--n",
    ]:
        assert why in report, f"{why!r} not in:\n{report}"
    assert "scratch.md:3: make no-such-target" in report
    assert results[next(command for command in commands if command.text == 'make demo ARGS="--seed 1"')] is None


def test_a_mistake_the_page_shows_must_fail_as_the_page_says():
    page = '| what you did | what it prints |\n|---|---|\n| `make demo ARGS="--max_steps 2"` | --max_steps is not an option of demo.py (...) |\n| `make demo ARGS="--seed 1"` | nothing: it works |\n| `make eval-demo ARGS="--n 2"` | something else |\n'  # noqa: E501
    commands = extract_commands(page, "mistakes.md")
    failures = page_failures("mistakes.md", page, commands, check_commands(commands))
    assert len(failures) == 1 and failures[0].startswith("mistakes.md:5:"), failures
