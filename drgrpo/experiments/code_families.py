"""The small programming tasks of `make probe-code` and `make code-rl` (issue 55): families of problems, each problem a
statement with its own generated tests, graded by the `code` reward in its sandbox.

A family is one kind of program (sum a line of integers, reverse a line, count letters, ...) with parameters in its
statement: `sum_plus` with K = 17 asks for the sum of a line of integers plus 17. A *problem* is a family and its
parameters, i.e. one function from input to output; its tests are five inputs drawn from a generator seeded by the
problem itself, with expected outputs computed here (an oracle written apart from the reference program). Tests of
other inputs for the same function are the same problem: held-out and training sets are disjoint by parameters.

The families, and why each (the issue's examples, each made a family by a parameter):
- `sum_plus`: a line of integers, print their sum plus K: read every number of a line, not a fixed count;
- `larger_times`: two integers, print the larger times K: a comparison (a tie included in the tests);
- `count_letters`: how many characters of a lowercase line are one of three letters (counting vowels, generalised);
- `digit_sum_times`: the sum of a positive integer's digits, times K: the number read as text, digit by digit;
- `list_max_plus`: a function `largest(numbers)` returning the list's maximum plus K: a function-call problem (its
  tests call the function; nothing is read from standard input);
- `fizz_word`: the numbers 1..n one per line, a word instead of each multiple of K: FizzBuzz with one rule, a loop
  whose output has n lines;
- `reverse_replace`: a line reversed with one letter replaced by another: two string operations.

The second round (`ROUND_2`, chosen after the first round's table, before any training) asks the same computations as
function calls (`sum_plus_fn`: `total(numbers)` returning the sum plus K, ...; see the section below).

Every statement ends with the shipped task set's instruction (`rewards.code.taskset`): "Write a Python program. Put it
in one ```python code block." (the function family: "Write the Python function. ..."). `kind_markers` say what marks
a statement of a family's kind, so that the prompt's one worked example can be checked to be of none of them.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import combinations, permutations

from rewards.code.taskset import CALL_INSTRUCTION, INSTRUCTION

TESTS_PER_PROBLEM = 5
CALL_NAME = "largest"  # the function of `list_max_plus`
WORDS = (
    "Fizz", "Buzz", "Bang", "Ping", "Pong", "Zap", "Boom", "Hop", "Zip", "Pop", "Moo", "Woof", "Beep", "Bop", "Tick",
    "Tock", "Ding", "Dong", "Whee", "Yay", "Oops", "Wow", "Hey", "Yo", "Ha", "Bam", "Pow", "Zing", "Clap", "Snap",
)  # fmt: skip


@dataclass(frozen=True)
class CodeProblem:
    """One problem: its family and parameters (its identity), the question the model reads, its tests (the `code`
    reward's `verification_info`: open-r1 format for stdin/stdout, APPS format for a call) and a reference program
    (to check the tests with, never shown to the model)."""

    family: str
    params: tuple
    question: str
    tests: dict
    reference: str

    @property
    def key(self) -> str:
        """The problem's identity: its family and parameters (two problems with the same key are the same function)."""
        return f"{self.family}{list(self.params)}"

    def row(self) -> dict:
        """The problem as a data row: `question`, `verification_info` (a JSON string), `family`, `key`."""
        return {
            "question": self.question,
            "verification_info": json.dumps(self.tests),
            "family": self.family,
            "key": self.key,
        }


def _stdin_tests(inputs: list[str], oracle: Callable[[str], str]) -> dict:
    cases = [{"type": "stdin_stdout", "input": text + "\n", "output": oracle(text) + "\n"} for text in inputs]
    return {"language": "python", "test_cases": cases}


def _text_line(rng: random.Random, letters: str, low: int = 2, high: int = 5) -> str:
    """A few lowercase words (no leading or trailing space), some of them holding `letters`."""
    words = []
    for _ in range(rng.randint(low, high)):
        word = [rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 7))]
        if letters and rng.random() < 0.6:
            word[rng.randrange(len(word))] = rng.choice(letters)
        words.append("".join(word))
    return " ".join(words)


# --- The families: a statement, tests and a reference program for given parameters, and the parameter space. ---


def sum_plus(k: int, rng: random.Random) -> CodeProblem:
    inputs = [" ".join(str(rng.randint(-50, 99)) for _ in range(rng.randint(1, 6))) for _ in range(TESTS_PER_PROBLEM)]
    return CodeProblem(
        "sum_plus",
        (k,),
        f"The input is one line of integers separated by spaces. Print their sum plus {k}.\n{INSTRUCTION}",
        _stdin_tests(inputs, lambda t: str(sum(int(x) for x in t.split()) + k)),
        f"print(sum(map(int, input().split())) + {k})\n",
    )


def larger_times(k: int, rng: random.Random) -> CodeProblem:
    pairs = [(rng.randint(-99, 99), rng.randint(-99, 99)) for _ in range(TESTS_PER_PROBLEM - 1)]
    tie = rng.randint(-99, 99)
    inputs = [f"{a} {b}" for a, b in [*pairs, (tie, tie)]]
    return CodeProblem(
        "larger_times",
        (k,),
        "The input is one line with two integers separated by a space. Print the larger of the two times "
        f"{k}.\n{INSTRUCTION}",
        _stdin_tests(inputs, lambda t: str(max(int(x) for x in t.split()) * k)),
        f"a, b = map(int, input().split())\nprint(max(a, b) * {k})\n",
    )


def count_letters(letters: str, rng: random.Random) -> CodeProblem:
    a, b, c = letters
    inputs = [_text_line(rng, letters) for _ in range(TESTS_PER_PROBLEM)]
    return CodeProblem(
        "count_letters",
        (letters,),
        f"The input is one line of lowercase words. Print how many of its characters are the letter {a}, {b} or "
        f"{c}.\n{INSTRUCTION}",
        _stdin_tests(inputs, lambda t: str(sum(t.count(letter) for letter in letters))),
        f"line = input()\nprint(sum(ch in {letters!r} for ch in line))\n",
    )


def digit_sum_times(k: int, rng: random.Random) -> CodeProblem:
    inputs = [str(rng.randint(1, 10 ** rng.randint(1, 12))) for _ in range(TESTS_PER_PROBLEM)]
    return CodeProblem(
        "digit_sum_times",
        (k,),
        f"The input is one positive integer. Print the sum of its digits times {k}.\n{INSTRUCTION}",
        _stdin_tests(inputs, lambda t: str(sum(int(d) for d in t) * k)),
        f"print(sum(int(d) for d in input().strip()) * {k})\n",
    )


def list_max_plus(k: int, rng: random.Random) -> CodeProblem:
    lists = [[rng.randint(-99, 99) for _ in range(rng.randint(1, 7))] for _ in range(TESTS_PER_PROBLEM)]
    return CodeProblem(
        "list_max_plus",
        (k,),
        f"Write a Python function {CALL_NAME}(numbers) that returns the largest number in the list numbers plus "
        f"{k}.\n{CALL_INSTRUCTION}",
        {"inputs": [[numbers] for numbers in lists], "outputs": [max(xs) + k for xs in lists], "fn_name": CALL_NAME},
        f"def {CALL_NAME}(numbers):\n    return max(numbers) + {k}\n",
    )


def fizz_word(k: int, word: str, rng: random.Random) -> CodeProblem:
    ns = [rng.randint(1, 25) for _ in range(TESTS_PER_PROBLEM - 1)] + [rng.randint(k, 25)]  # one with a multiple
    inputs = [str(n) for n in ns]

    def oracle(text: str) -> str:
        return "\n".join(word if i % k == 0 else str(i) for i in range(1, int(text) + 1))

    return CodeProblem(
        "fizz_word",
        (k, word),
        f"The input is one integer n. Print the numbers from 1 to n, one per line, but print {word} instead of each "
        f"multiple of {k}.\n{INSTRUCTION}",
        _stdin_tests(inputs, oracle),
        f"for i in range(1, int(input()) + 1):\n    print({word!r} if i % {k} == 0 else i)\n",
    )


def reverse_replace(old: str, new: str, rng: random.Random) -> CodeProblem:
    inputs = [_text_line(rng, old) for _ in range(TESTS_PER_PROBLEM)]
    return CodeProblem(
        "reverse_replace",
        (old, new),
        f"The input is one line of lowercase words. Print the line reversed, with every letter {old} replaced by "
        f"{new}.\n{INSTRUCTION}",
        _stdin_tests(inputs, lambda t: "".join(new if ch == old else ch for ch in reversed(t))),
        f"print(input()[::-1].replace({old!r}, {new!r}))\n",
    )


# --- The second round (issue 55: no family of the first fell in the window; chosen after its table, before any
# training): the first round's computations as functions. The first round's only family above the window was its
# function call (`list_max_plus`, 100%), every program reading standard input scored 0-2%, and most of those computed
# something near the task and printed it with words around it or read the input wrong: these ask the same
# computations as calls, between the two. ---


def _call_problem(family: str, params: tuple, signature: str, asks: str, args: list[list], oracle, body: str):
    """A function-call problem: `def signature` returning what `asks` says, tested on `args` (each an argument
    list) against `oracle(*args)`; `body` is the reference's return expression."""
    name = signature.split("(", 1)[0]
    return CodeProblem(
        family,
        params,
        f"Write a Python function {signature} that returns {asks}.\n{CALL_INSTRUCTION}",
        {"inputs": args, "outputs": [oracle(*a) for a in args], "fn_name": name},
        f"def {signature}:\n    return {body}\n",
    )


def sum_plus_fn(k: int, rng: random.Random) -> CodeProblem:
    args = [[[rng.randint(-50, 99) for _ in range(rng.randint(1, 6))]] for _ in range(TESTS_PER_PROBLEM)]
    return _call_problem(
        "sum_plus_fn", (k,), "total(numbers)", f"the sum of the list numbers plus {k}", args,
        lambda xs: sum(xs) + k, f"sum(numbers) + {k}",
    )  # fmt: skip


def larger_times_fn(k: int, rng: random.Random) -> CodeProblem:
    tie = rng.randint(-99, 99)
    args = [[rng.randint(-99, 99), rng.randint(-99, 99)] for _ in range(TESTS_PER_PROBLEM - 1)] + [[tie, tie]]
    return _call_problem(
        "larger_times_fn", (k,), "larger(a, b)", f"the larger of the integers a and b times {k}", args,
        lambda a, b: max(a, b) * k, f"max(a, b) * {k}",
    )  # fmt: skip


def digit_sum_times_fn(k: int, rng: random.Random) -> CodeProblem:
    args = [[rng.randint(1, 10 ** rng.randint(1, 12))] for _ in range(TESTS_PER_PROBLEM)]
    return _call_problem(
        "digit_sum_times_fn", (k,), "digit_score(n)", f"the sum of the digits of the positive integer n times {k}",
        args, lambda n: sum(int(d) for d in str(n)) * k, f"sum(int(d) for d in str(n)) * {k}",
    )  # fmt: skip


def count_letters_fn(letters: str, rng: random.Random) -> CodeProblem:
    a, b, c = letters
    args = [[_text_line(rng, letters)] for _ in range(TESTS_PER_PROBLEM)]
    return _call_problem(
        "count_letters_fn", (letters,), "count_letters(text)",
        f"how many characters of the string text are the letter {a}, {b} or {c}", args,
        lambda t: sum(t.count(letter) for letter in letters), f"sum(ch in {letters!r} for ch in text)",
    )  # fmt: skip


def fizz_word_fn(k: int, word: str, rng: random.Random) -> CodeProblem:
    args = [[rng.randint(1, 25)] for _ in range(TESTS_PER_PROBLEM - 1)] + [[rng.randint(k, 25)]]
    return _call_problem(
        "fizz_word_fn", (k, word), "fizz(n)",
        f"the list of the numbers from 1 to n, with the string {word!r} instead of each multiple of {k}", args,
        lambda n: [word if i % k == 0 else i for i in range(1, n + 1)],
        f"[{word!r} if i % {k} == 0 else i for i in range(1, n + 1)]",
    )  # fmt: skip


def reverse_replace_fn(old: str, new: str, rng: random.Random) -> CodeProblem:
    args = [[_text_line(rng, old)] for _ in range(TESTS_PER_PROBLEM)]
    return _call_problem(
        "reverse_replace_fn", (old, new), "flip(text)",
        f"the string text reversed, with every letter {old} replaced by {new}", args,
        lambda t: "".join(new if ch == old else ch for ch in reversed(t)), f"text[::-1].replace({old!r}, {new!r})",
    )  # fmt: skip


@dataclass(frozen=True)
class CodeFamily:
    """A family: its builder, every parameter tuple it takes, and what marks a statement of its kind."""

    name: str
    build: Callable[..., CodeProblem]  # build(*params, rng)
    params: tuple[tuple, ...]
    kind_markers: tuple[str, ...]  # regexes; every statement of the family matches at least one


LETTER_TRIPLES = tuple(("".join(t),) for t in combinations(string.ascii_lowercase, 3))
STDIN_FAMILIES = (
    CodeFamily("sum_plus", sum_plus, tuple((k,) for k in range(1, 1000)), (r"\bsum\b", r"\bplus\b")),
    CodeFamily("larger_times", larger_times, tuple((k,) for k in range(2, 1000)), (r"\blarger\b", r"\bmax")),
    CodeFamily("count_letters", count_letters, LETTER_TRIPLES, (r"\bhow many\b", r"\bcount")),
    CodeFamily("digit_sum_times", digit_sum_times, tuple((k,) for k in range(2, 1000)), (r"\bdigits?\b",)),
    CodeFamily("list_max_plus", list_max_plus, tuple((k,) for k in range(1, 1000)), (r"\blargest\b", r"\bmax")),
    CodeFamily(
        "fizz_word",
        fizz_word,
        tuple((k, word) for k in range(2, 10) for word in WORDS),
        (r"\bmultiples?\b", r"\bfizz", r"\bbuzz"),
    ),
    CodeFamily(
        "reverse_replace",
        reverse_replace,
        tuple(permutations(string.ascii_lowercase, 2)),
        (r"\brevers", r"\breplace", r"\[::-1\]"),
    ),
)
# The function-call versions (round 2): the same parameters and statements, a function to write instead of a program.
FUNCTION_BUILDERS = {
    "sum_plus": sum_plus_fn,
    "larger_times": larger_times_fn,
    "digit_sum_times": digit_sum_times_fn,
    "count_letters": count_letters_fn,
    "fizz_word": fizz_word_fn,
    "reverse_replace": reverse_replace_fn,
}
FAMILIES = {family.name: family for family in STDIN_FAMILIES}
FAMILIES |= {
    f"{name}_fn": replace(FAMILIES[name], name=f"{name}_fn", build=build) for name, build in FUNCTION_BUILDERS.items()
}
ROUND_1 = (
    "sum_plus",
    "larger_times",
    "count_letters",
    "digit_sum_times",
    "list_max_plus",
    "fizz_word",
    "reverse_replace",
)
ROUND_2 = (
    "sum_plus_fn",
    "larger_times_fn",
    "count_letters_fn",
    "digit_sum_times_fn",
    "fizz_word_fn",
    "reverse_replace_fn",
)


def problem(family: str, params: tuple) -> CodeProblem:
    """The problem of `family` with `params`: its tests drawn from a generator seeded by the problem itself, so the
    same problem has the same tests in every set, on every machine."""
    rng = random.Random(f"{family}-{list(params)}")
    return FAMILIES[family].build(*params, rng)


def held_out_set(family: str, count: int, seed: int | str = 0) -> list[CodeProblem]:
    """`count` distinct problems of `family` in an order drawn from a generator seeded with (seed, family): the same
    set on every machine and run, and the first `count` of a larger set."""
    space = list(FAMILIES[family].params)
    if count > len(space):
        raise ValueError(f"{family} has {len(space)} problems, fewer than the {count} asked for.")
    random.Random(f"{seed}-{family}").shuffle(space)
    return [problem(family, params) for params in space[:count]]


def training_set(family: str, count: int, held_out: list[CodeProblem]) -> list[CodeProblem]:
    """Up to `count` problems of `family` from another generator seed than the held-out set's, none of them a
    held-out problem (by parameters: another test input of the same function is the same problem)."""
    unseen = {p.key for p in held_out}
    space = [params for params in FAMILIES[family].params if problem_key(family, params) not in unseen]
    random.Random(f"train-{family}").shuffle(space)
    return [problem(family, params) for params in space[:count]]


def problem_key(family: str, params: tuple) -> str:
    """`CodeProblem.key` without building the problem."""
    return f"{family}{list(params)}"


def matches_kind(text: str, family: str) -> bool:
    """Whether `text` reads as a statement (or program) of `family`'s kind (one of its markers)."""
    return any(re.search(marker, text, flags=re.IGNORECASE) for marker in FAMILIES[family].kind_markers)
