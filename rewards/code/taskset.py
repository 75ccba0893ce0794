"""The shipped code task set: 32 small problems (22 stdin/stdout, 10 function calls), written for this project.

Each problem has a statement, 6 test cases whose expected outputs come from an *oracle* (a plain Python function
below, written independently of the reference program), a reference solution that passes them and a deliberately
wrong one that fails at least one. `rewards/code/tasks/code_tasks.jsonl` is `write_task_set()`'s output (a test
checks they agree); its columns are `question`, `verification_info` (open-r1 format for stdin/stdout problems, APPS
format for function problems, as JSON strings), `reference`, `wrong` and `name`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TASKS_FILE = Path(__file__).with_name("tasks") / "code_tasks.jsonl"
INSTRUCTION = "Write a Python program. Put it in one ```python code block."
CALL_INSTRUCTION = "Write the Python function. Put it in one ```python code block."


@dataclass(frozen=True)
class Task:
    name: str
    statement: str
    inputs: list  # stdin texts, or argument lists of calls
    oracle: Callable[..., Any]  # stdin problems: text -> expected stdout; calls: *args -> expected value
    reference: str
    wrong: str
    fn_name: str | None = None


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split()]


def _lines(values) -> str:
    return "\n".join(str(v) for v in values)


def _fizz(i: int) -> str:
    return "FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i)


def _prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, math.isqrt(n) + 1))


def _roman(s: str) -> int:
    values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    return sum(-values[a] if values[a] < values[b] else values[a] for a, b in zip(s, s[1:] + "I", strict=True))


def _flatten(x) -> list:
    return [y for item in x for y in (_flatten(item) if isinstance(item, list) else [item])]


def _merge(intervals: list) -> list:
    merged: list = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _two_sum(nums: list, target: int) -> list:
    return next([i, j] for j in range(len(nums)) for i in range(j) if nums[i] + nums[j] == target)


READ_ALL = "import sys\ndata = sys.stdin.read().split()\n"

STDIO = [
    Task(
        "sum_two",
        "Read two integers a and b on one line and print a + b.",
        ["1 2", "-5 5", "1000000000000 1", "0 0", "-3 -4", "123456789 987654321"],
        lambda t: str(sum(_ints(t))),
        "a, b = map(int, input().split())\nprint(a + b)\n",
        "a, b = map(int, input().split())\nprint(abs(a) + abs(b))\n",
    ),
    Task(
        "max_of_list",
        "The first line holds n, the second n integers. Print the largest.",
        ["3\n1 5 2", "1\n-7", "4\n-1 -2 -3 -4", "5\n9 9 9 9 9", "6\n3 1 4 1 5 9", "2\n100 -100"],
        lambda t: str(max(_ints(t)[1:])),
        READ_ALL + "print(max(map(int, data[1:])))\n",
        READ_ALL + "print(max(map(int, data[1:-1] or data[1:])))\n",
    ),
    Task(
        "reverse_line",
        "Print the input line reversed.",
        ["abc", "racecar", "Hello, World!", "a", "12345", "ab cd"],
        lambda t: t[::-1],
        "print(input()[::-1])\n",
        "print(' '.join(w[::-1] for w in input().split()))\n",
    ),
    Task(
        "count_vowels",
        "Print how many vowels (a, e, i, o, u, either case) the input line has.",
        ["hello", "AEIOU", "rhythm", "Programming is fun", "", "aAbBeE"],
        lambda t: str(sum(c in "aeiouAEIOU" for c in t)),
        "import sys\nprint(sum(c in 'aeiouAEIOU' for c in sys.stdin.read()))\n",
        "import sys\nprint(sum(c in 'aeiou' for c in sys.stdin.read()))\n",
    ),
    Task(
        "fizzbuzz",
        "Read n. Print the numbers 1..n, one per line, with Fizz for multiples of 3, Buzz for "
        "multiples of 5 and FizzBuzz for multiples of both.",
        ["1", "3", "5", "15", "16", "30"],
        lambda t: _lines(_fizz(i) for i in range(1, int(t) + 1)),
        "for i in range(1, int(input()) + 1):\n    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 "
        "else 'Buzz' if i % 5 == 0 else i)\n",
        "for i in range(1, int(input()) + 1):\n    print('Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)\n",
    ),
    Task(
        "factorial",
        "Read n (0 <= n <= 40) and print n!.",
        ["0", "1", "5", "10", "20", "40"],
        lambda t: str(math.factorial(int(t))),
        "n = int(input())\nr = 1\nfor i in range(2, n + 1):\n    r *= i\nprint(r)\n",
        "n = int(input())\nr = 1\nfor i in range(1, n):\n    r *= i\nprint(r)\n",
    ),
    Task(
        "fibonacci",
        "Read n (0 <= n <= 90) and print F(n), where F(0) = 0, F(1) = 1.",
        ["0", "1", "2", "10", "50", "90"],
        lambda t: str(_fib_exact(int(t))),
        "a, b = 0, 1\nfor _ in range(int(input())):\n    a, b = b, a + b\nprint(a)\n",
        "a, b = 1, 1\nfor _ in range(int(input())):\n    a, b = b, a + b\nprint(a)\n",
    ),
    Task(
        "is_prime",
        "Read n (1 <= n <= 10^9) and print YES if it is prime, else NO.",
        ["1", "2", "9", "97", "1000000007", "999999999"],
        lambda t: "YES" if _prime(int(t)) else "NO",
        "n = int(input())\nprint('YES' if n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1)) else 'NO')\n",
        "n = int(input())\nprint('YES' if all(n % d for d in range(2, int(n ** 0.5) + 1)) else 'NO')\n",
    ),
    Task(
        "gcd",
        "Read two positive integers and print their greatest common divisor.",
        ["12 18", "7 13", "100 10", "1 1", "270 192", "1000000007 3"],
        lambda t: str(math.gcd(*_ints(t))),
        "a, b = map(int, input().split())\nwhile b:\n    a, b = b, a % b\nprint(a)\n",
        "a, b = map(int, input().split())\nprint(min(a, b))\n",
    ),
    Task(
        "sort_numbers",
        "The first line holds n, the second n integers. Print them sorted ascending, space separated.",
        ["3\n3 1 2", "1\n5", "5\n5 4 3 2 1", "4\n-1 10 -10 0", "6\n2 2 1 1 3 3", "2\n10 9"],
        lambda t: " ".join(map(str, sorted(_ints(t)[1:]))),
        READ_ALL + "print(*sorted(map(int, data[1:])))\n",
        READ_ALL + "print(*sorted(data[1:]))\n",
    ),
    Task(
        "palindrome",
        "Print YES if the input line reads the same backwards (case-sensitive), else NO.",
        ["racecar", "abba", "abc", "a", "Aa", "abcba"],
        lambda t: "YES" if t == t[::-1] else "NO",
        "s = input()\nprint('YES' if s == s[::-1] else 'NO')\n",
        "s = input().lower()\nprint('YES' if s == s[::-1] else 'NO')\n",
    ),
    Task(
        "word_count",
        "Print the number of words (separated by spaces) in the input line.",
        ["hello world", "one", "a b c d e", "  spaced   out  ", "x y", "the quick brown fox jumps"],
        lambda t: str(len(t.split())),
        "print(len(input().split()))\n",
        "print(input().count(' ') + 1)\n",
    ),
    Task(
        "average",
        "The first line holds n, the second n integers. Print their mean with 6 decimals.",
        ["2\n1 2", "3\n1 1 1", "4\n1 2 3 5", "1\n-7", "3\n1 2 2", "5\n10 20 30 40 55"],
        lambda t: f"{sum(_ints(t)[1:]) / _ints(t)[0]:.6f}",
        READ_ALL + "xs = list(map(int, data[1:]))\nprint(f'{sum(xs) / len(xs):.6f}')\n",
        READ_ALL + "xs = list(map(int, data[1:]))\nprint(sum(xs) // len(xs))\n",
    ),
    Task(
        "distance",
        "Read x1 y1 x2 y2 and print the Euclidean distance between the two points.",
        ["0 0 3 4", "1 1 1 1", "-1 -1 2 3", "0 0 1 1", "5 5 -5 -5", "2 3 2 10"],
        lambda t: repr(math.dist(_ints(t)[:2], _ints(t)[2:])),
        "x1, y1, x2, y2 = map(float, input().split())\nprint(((x1 - x2) ** 2 + (y1 - y2) ** 2) ** 0.5)\n",
        "x1, y1, x2, y2 = map(float, input().split())\nprint(abs(x1 - x2) + abs(y1 - y2))\n",
    ),
    Task(
        "binary",
        "Read a non-negative integer and print it in binary, without leading zeros.",
        ["0", "1", "2", "5", "255", "1024"],
        lambda t: format(int(t), "b"),
        "print(bin(int(input()))[2:])\n",
        "n = int(input())\ns = ''\nwhile n:\n    s = str(n % 2) + s\n    n //= 2\nprint(s)\n",
    ),
    Task(
        "count_distinct",
        "The first line holds n, the second n integers. Print how many distinct values there are.",
        ["3\n1 2 3", "3\n1 1 1", "5\n1 2 1 2 3", "1\n0", "4\n-1 1 -1 1", "6\n5 4 3 3 4 5"],
        lambda t: str(len(set(_ints(t)[1:]))),
        READ_ALL + "print(len(set(data[1:])))\n",
        READ_ALL + "print(len(data[1:]) - (data[1] == data[-1]))\n",
    ),
    Task(
        "second_largest",
        "The first line holds n, the second n integers with at least two distinct values. Print "
        "the second largest distinct value.",
        ["2\n1 2", "3\n5 5 4", "4\n1 2 3 4", "5\n9 9 8 8 7", "3\n-1 -2 -3", "4\n10 20 20 10"],
        lambda t: str(sorted(set(_ints(t)[1:]))[-2]),
        READ_ALL + "print(sorted(set(map(int, data[1:])))[-2])\n",
        READ_ALL + "print(sorted(map(int, data[1:]))[-2])\n",
    ),
    Task(
        "transpose",
        "The first line holds r and c, then r lines of c integers. Print the transposed matrix (c lines "
        "of r integers).",
        ["1 1\n5", "2 2\n1 2\n3 4", "2 3\n1 2 3\n4 5 6", "3 1\n1\n2\n3", "1 3\n7 8 9", "3 2\n1 2\n3 4\n5 6"],
        lambda t: _lines(
            " ".join(map(str, col)) for col in zip(*[_ints(row) for row in t.split("\n")[1:]], strict=True)
        ),
        "r, c = map(int, input().split())\nm = [input().split() for _ in range(r)]\nfor j in range(c):\n"
        "    print(*(m[i][j] for i in range(r)))\n",
        "r, c = map(int, input().split())\nm = [input().split() for _ in range(r)]\nfor row in m:\n    print(*row)\n",
    ),
    Task(
        "prefix_sums",
        "The first line holds n, the second n integers. Print their prefix sums, space separated.",
        ["3\n1 2 3", "1\n5", "4\n-1 1 -1 1", "5\n0 0 0 0 0", "3\n10 -20 30", "2\n1000000000 1000000000"],
        lambda t: " ".join(str(sum(_ints(t)[1 : k + 2])) for k in range(_ints(t)[0])),
        READ_ALL + "s = 0\nout = []\nfor x in data[1:]:\n    s += int(x)\n    out.append(s)\nprint(*out)\n",
        READ_ALL + "s = 0\nout = []\nfor x in data[1:]:\n    out.append(s)\n    s += int(x)\nprint(*out)\n",
    ),
    Task(
        "caesar",
        "The first line holds k (0 <= k < 26), the second a lowercase word. Shift each letter k places "
        "forward in the alphabet (z wraps to a) and print the word.",
        ["1\nabc", "0\nhello", "3\nxyz", "25\nb", "13\nuryyb", "2\nzebra"],
        lambda t: "".join(chr((ord(c) - 97 + int(t.split()[0])) % 26 + 97) for c in t.split()[1]),
        "k = int(input())\nprint(''.join(chr((ord(c) - 97 + k) % 26 + 97) for c in input().strip()))\n",
        "k = int(input())\nprint(''.join(chr(ord(c) + k) for c in input().strip()))\n",
    ),
    Task(
        "digit_sum",
        "Read a non-negative integer (up to 100 digits) and print the sum of its digits.",
        ["0", "9", "123", "999999", "1000000", "9" * 100],
        lambda t: str(sum(map(int, t))),
        "print(sum(int(c) for c in input().strip()))\n",
        "print(int(input()) % 9 or 9)\n",
    ),
    Task(
        "inversions",
        "The first line holds n, the second n integers. Print the number of pairs i < j with a[i] > a[j].",
        ["3\n1 2 3", "3\n3 2 1", "4\n2 4 1 3", "1\n7", "5\n1 1 1 1 1", "6\n6 5 4 3 2 1"],
        lambda t: str(sum(a > b for k, a in enumerate(_ints(t)[1:]) for b in _ints(t)[k + 2 :])),
        READ_ALL + "a = list(map(int, data[1:]))\nprint(sum(a[i] > a[j] for i in range(len(a)) for j in range(i + 1, "
        "len(a))))\n",
        READ_ALL + "a = list(map(int, data[1:]))\nprint(sum(a[i] > a[i + 1] for i in range(len(a) - 1)))\n",
    ),
]


def _fib_exact(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


CALLS = [
    Task(
        "two_sum",
        "Write two_sum(nums, target): the indices [i, j] (i < j) of the two numbers that add up to "
        "target (exactly one pair does).",
        [[[2, 7, 11, 15], 9], [[3, 2, 4], 6], [[3, 3], 6], [[1, 5, 9, 2], 11], [[0, -1, 4], 3], [[-3, 4, 3, 90], 0]],
        _two_sum,
        "def two_sum(nums, target):\n    seen = {}\n    for j, x in enumerate(nums):\n        if target - x in seen:\n"
        "            return [seen[target - x], j]\n        seen[x] = j\n",
        "def two_sum(nums, target):\n    return [0, 1]\n",
        fn_name="two_sum",
    ),
    Task(
        "is_anagram",
        "Write is_anagram(s, t): True if t is an anagram of s, else False.",
        [["listen", "silent"], ["rat", "car"], ["", ""], ["aab", "abb"], ["abc", "cba"], ["a", "ab"]],
        lambda s, t: Counter(s) == Counter(t),
        "def is_anagram(s, t):\n    return sorted(s) == sorted(t)\n",
        "def is_anagram(s, t):\n    return set(s) == set(t)\n",
        fn_name="is_anagram",
    ),
    Task(
        "fib",
        "Write fib(n): the n-th Fibonacci number, fib(0) = 0, fib(1) = 1.",
        [[0], [1], [2], [10], [30], [60]],
        _fib_exact,
        "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2) if n < 25 else 0\n",
        fn_name="fib",
    ),
    Task(
        "flatten",
        "Write flatten(items): the integers of an arbitrarily nested list, in order, as one flat list.",
        [[[1, 2, 3]], [[[1, [2, [3]]]]], [[]], [[[], [[]], 4]], [[[1], [2, [3, [4, [5]]]]]], [[[[7]], 8, [9]]]],
        _flatten,
        "def flatten(items):\n    out = []\n    for x in items:\n        out.extend(flatten(x) if isinstance(x, list) "
        "else [x])\n    return out\n",
        "def flatten(items):\n    out = []\n    for x in items:\n"
        "        out.extend(x if isinstance(x, list) else [x])\n    return out\n",
        fn_name="flatten",
    ),
    Task(
        "count_words",
        "Write count_words(text): a dict mapping each lowercase word of text (split on spaces) to its count.",
        [["a b a"], ["Hello hello"], [""], ["x"], ["The the THE cat"], ["one two three two three three"]],
        lambda text: dict(Counter(text.lower().split())),
        "def count_words(text):\n    counts = {}\n    for w in text.lower().split():\n"
        "        counts[w] = counts.get(w, 0) + 1\n    return counts\n",
        "def count_words(text):\n    counts = {}\n    for w in text.split():\n"
        "        counts[w] = counts.get(w, 0) + 1\n    return counts\n",
        fn_name="count_words",
    ),
    Task(
        "rotate",
        "Write rotate(items, k): the list rotated right by k places (k >= 0).",
        [[[1, 2, 3, 4, 5], 2], [[1, 2], 0], [[1, 2, 3], 3], [[1], 5], [[1, 2, 3], 4], [[], 2]],
        lambda items, k: items[len(items) - k % len(items) :] + items[: len(items) - k % len(items)] if items else [],
        "def rotate(items, k):\n    if not items:\n        return []\n    k %= len(items)\n"
        "    return items[-k:] + items[:-k] if k else list(items)\n",
        "def rotate(items, k):\n    return items[-k:] + items[:-k] if items else []\n",
        fn_name="rotate",
    ),
    Task(
        "max_profit",
        "LeetCode style: class Solution with method maxProfit(prices): the largest profit of one buy "
        "followed by one sell (0 if none).",
        [[[7, 1, 5, 3, 6, 4]], [[7, 6, 4, 3, 1]], [[1, 2]], [[2, 4, 1]], [[3]], [[2, 1, 2, 0, 1, 5]]],
        lambda prices: max([0] + [b - a for k, a in enumerate(prices) for b in prices[k + 1 :]]),
        "class Solution:\n    def maxProfit(self, prices):\n        best, low = 0, float('inf')\n"
        "        for p in prices:\n            low = min(low, p)\n            best = max(best, p - low)\n"
        "        return best\n",
        "class Solution:\n    def maxProfit(self, prices):\n        return max(prices) - min(prices)\n",
        fn_name="maxProfit",
    ),
    Task(
        "roman_to_int",
        "Write roman_to_int(s): the value of a Roman numeral (I, V, X, L, C, D, M).",
        [["III"], ["IV"], ["IX"], ["LVIII"], ["MCMXCIV"], ["MMXXVI"]],
        _roman,
        "def roman_to_int(s):\n    v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n"
        "    total = 0\n    for i, c in enumerate(s):\n        if i + 1 < len(s) and v[c] < v[s[i + 1]]:\n"
        "            total -= v[c]\n        else:\n            total += v[c]\n    return total\n",
        "def roman_to_int(s):\n    v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n"
        "    return sum(v[c] for c in s)\n",
        fn_name="roman_to_int",
    ),
    Task(
        "merge_intervals",
        "Write merge_intervals(intervals): the overlapping [start, end] intervals merged, sorted by start.",
        [
            [[[1, 3], [2, 6], [8, 10]]],
            [[[1, 4], [4, 5]]],
            [[[5, 6], [1, 2]]],
            [[[1, 10], [2, 3]]],
            [[]],
            [[[1, 2], [3, 4], [2, 3]]],
        ],
        _merge,
        "def merge_intervals(intervals):\n    out = []\n    for s, e in sorted(intervals):\n"
        "        if out and s <= out[-1][1]:\n            out[-1][1] = max(out[-1][1], e)\n        else:\n"
        "            out.append([s, e])\n    return out\n",
        "def merge_intervals(intervals):\n    out = []\n    for s, e in intervals:\n"
        "        if out and s <= out[-1][1]:\n            out[-1][1] = max(out[-1][1], e)\n        else:\n"
        "            out.append([s, e])\n    return out\n",
        fn_name="merge_intervals",
    ),
    Task(
        "mean",
        "Write mean(values): the arithmetic mean of a non-empty list of numbers, as a float.",
        [[[1, 2, 3, 4]], [[1]], [[0.1, 0.2]], [[-1, 1]], [[1, 1, 2]], [[10, 20, 40]]],
        lambda values: math.fsum(values) / len(values),
        "def mean(values):\n    return sum(values) / len(values)\n",
        "def mean(values):\n    return sum(values) // len(values)\n",
        fn_name="mean",
    ),
]

TASKS = STDIO + CALLS


def verification_info(task: Task) -> dict:
    """The task's tests with their oracle outputs: open-r1 format (stdin/stdout) or APPS format (calls)."""
    if task.fn_name:
        outputs = [task.oracle(*json.loads(json.dumps(args))) for args in task.inputs]
        return {"inputs": task.inputs, "outputs": outputs, "fn_name": task.fn_name}
    cases = [{"type": "stdin_stdout", "input": t + "\n", "output": task.oracle(t) + "\n"} for t in task.inputs]
    return {"language": "python", "test_cases": cases}


def task_rows() -> list[dict]:
    """The task set as rows: question, verification_info (a JSON string), reference, wrong, name."""
    rows = []
    for task in TASKS:
        instruction = CALL_INSTRUCTION if task.fn_name else INSTRUCTION
        rows.append(
            {
                "name": task.name,
                "question": f"{task.statement}\n{instruction}",
                "verification_info": json.dumps(verification_info(task)),
                "reference": task.reference,
                "wrong": task.wrong,
            }
        )
    return rows


def write_task_set(path: str | Path = TASKS_FILE) -> Path:
    """Write the task set as jsonl (the shipped file is this function's output)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in task_rows()))
    return path


def load_task_set(path: str | Path = TASKS_FILE) -> list[dict]:
    """The shipped task set's rows."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def as_completion(program: str) -> str:
    """A completion that answers with `program` in a ```python block."""
    return f"Here is my solution.\n```python\n{program}```\n"
