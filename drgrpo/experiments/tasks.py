"""The demo's verifiable task: two-digit addition, generated from a seed, with train and held-out splits.

The demo's warm-start demonstrations come from a *sloppy teacher* who often forgets to carry the one (`17+25=32`).
Supervised fine-tuning on them teaches the model to add and, mostly, to drop the carry; RL with a verifier that
checks the sum can then remove that systematic error. This is the situation RLVR is for: demonstrations that are
imperfect in a way a checker can see.
"""

from __future__ import annotations

import json
import random
from pathlib import Path


def addition_problems(max_operand: int, seed: int = 0, *, min_operand: int = 0, carry_only: bool = False) -> list[dict]:
    """Every `a+b=` with min_operand <= a, b <= max_operand, shuffled with `seed`, as {question, answer} rows.

    `carry_only` keeps the problems whose ones digits sum to 10 or more ("addition with regrouping").
    """
    operands = range(min_operand, max_operand + 1)
    rows = [
        {"question": f"{a}+{b}=", "answer": str(a + b)}
        for a in operands
        for b in operands
        if not carry_only or a % 10 + b % 10 >= 10
    ]
    random.Random(seed).shuffle(rows)
    return rows


def write_addition_task(
    output_dir: str | Path,
    *,
    max_operand: int = 29,
    num_test: int = 200,
    seed: int = 0,
    min_operand: int = 0,
    carry_only: bool = False,
) -> dict[str, Path]:
    """Write disjoint `train.jsonl` and `test.jsonl` (the first `num_test` problems) under `output_dir`."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    rows = addition_problems(max_operand, seed, min_operand=min_operand, carry_only=carry_only)
    if len(rows) <= num_test:
        raise ValueError(f"Only {len(rows)} problems for num_test={num_test}: raise max_operand.")
    paths = {}
    for name, split_rows in (("test", rows[:num_test]), ("train", rows[num_test:])):
        paths[name] = output_dir / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(row) + "\n" for row in split_rows))
    return paths


def sloppy_sum(a: int, b: int, forget_carry: bool) -> int:
    """`a + b`, or the sum with the carry out of the ones digit dropped (`17+25 -> 32`) when `forget_carry`."""
    carry = (a % 10 + b % 10) // 10
    return a + b - 10 * carry if forget_carry else a + b


def sloppy_demonstrations(rows: list[dict], carry_error_rate: float, seed: int = 0) -> list[dict]:
    """Prompt/completion pairs whose answers forget the carry with probability `carry_error_rate`."""
    rng = random.Random(seed)
    demos = []
    for row in rows:
        a, b = (int(x) for x in row["question"].rstrip("=").split("+"))
        demos.append({"prompt": row["question"], "completion": str(sloppy_sum(a, b, rng.random() < carry_error_rate))})
    return demos
