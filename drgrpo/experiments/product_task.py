"""The tool demo's task: products of a four-digit and a three-digit number, which a 135M model cannot work out in its
head but can with one line of Python.

`What is 4821 * 317? Put your final answer in \\boxed{}.` with gold `1528257`. The held-out split is disjoint from
training by operands: the four-digit and the three-digit numbers are each split into a training and a held-out
pool first, and a held-out problem uses held-out numbers only, so no held-out operand was ever seen in training.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

QUESTION = "What is {a} * {b}? Put your final answer in \\boxed{{}}."


def operand_pools(seed: int, test_share: float = 0.2) -> dict[str, tuple[list[int], list[int]]]:
    """{"train": (four-digit, three-digit), "test": (...)}: each range shuffled with `seed` and split by share."""
    rng = random.Random(seed)
    pools: dict[str, tuple[list[int], list[int]]] = {"train": ([], []), "test": ([], [])}
    for column, numbers in enumerate((list(range(1000, 10000)), list(range(100, 1000)))):
        rng.shuffle(numbers)
        cut = int(len(numbers) * test_share)
        pools["test"][column].extend(numbers[:cut])
        pools["train"][column].extend(numbers[cut:])
    return pools


def problems(four: list[int], three: list[int], count: int, rng: random.Random) -> list[tuple[int, int]]:
    """`count` distinct (four-digit, three-digit) pairs drawn from the pools."""
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < count:
        pairs.add((rng.choice(four), rng.choice(three)))
    return sorted(pairs, key=lambda _: rng.random())


def problem_row(a: int, b: int) -> dict:
    return {"question": QUESTION.format(a=a, b=b), "answer": str(a * b)}


def write_product_task(
    output_dir: str | Path, *, num_train: int = 2000, num_test: int = 100, seed: int = 0
) -> dict[str, Path]:
    """Write `train.jsonl` and `test.jsonl` under `output_dir` (held-out operands disjoint); return their paths."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    pools = operand_pools(seed)
    rng = random.Random(seed + 1)
    paths = {}
    for name, count in (("train", num_train), ("test", num_test)):
        paths[name] = output_dir / f"{name}.jsonl"
        rows = [problem_row(a, b) for a, b in problems(*pools[name], count, rng)]
        paths[name].write_text("".join(json.dumps(row) + "\n" for row in rows))
    return paths
