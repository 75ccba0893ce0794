"""The real-model demo's verifiable task: sums of one- or two-digit numbers, asked as a chat question.

`What is 17 + 21? Put your final answer in \\boxed{}.` with gold `38`. SmolLM2-135M-Instruct gets about one in five
right greedily: it restates the question and then adds wrongly (`27 + 26 = 52`), leaves `\\boxed{}` empty, or wanders
off; RL with the math-verify accuracy reward has a clear signal to learn from.

The held-out split is disjoint from training by *unordered* operand pair: `17 + 21` and `21 + 17` are always in the
same split, so no held-out problem is a training problem with its operands swapped.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

QUESTION = "What is {a} + {b}? Put your final answer in \\boxed{{}}."


def addition_pairs(max_operand: int = 99, min_operand: int = 0) -> list[tuple[int, int]]:
    """Every unordered pair (a <= b) of operands in [min_operand, max_operand]."""
    return [(a, b) for a in range(min_operand, max_operand + 1) for b in range(a, max_operand + 1)]


def split_pairs(
    pairs: list[tuple[int, int]], num_test: int, seed: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(train, test) ordered problems: the pairs shuffled with `seed`, the first `num_test` pairs held out (one random
    order each), every other pair in training in both orders."""
    if num_test >= len(pairs):
        raise ValueError(f"num_test={num_test} leaves no training problems among {len(pairs)} operand pairs.")
    rng = random.Random(seed)
    pairs = list(pairs)
    rng.shuffle(pairs)
    test = [(a, b) if rng.random() < 0.5 else (b, a) for a, b in pairs[:num_test]]
    train = [order for a, b in pairs[num_test:] for order in ({(a, b), (b, a)} if a != b else {(a, b)})]
    rng.shuffle(train)
    return train, test


def problem_row(a: int, b: int) -> dict:
    """One problem as a {question, answer} row."""
    return {"question": QUESTION.format(a=a, b=b), "answer": str(a + b)}


def write_chat_addition_task(
    output_dir: str | Path, *, num_test: int = 200, seed: int = 0, max_operand: int = 99
) -> dict[str, Path]:
    """Write `train.jsonl` and `test.jsonl` under `output_dir`; return their paths."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    train, test = split_pairs(addition_pairs(max_operand), num_test, seed)
    paths = {}
    for name, problems in (("train", train), ("test", test)):
        paths[name] = output_dir / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(problem_row(a, b)) + "\n" for a, b in problems))
    return paths
