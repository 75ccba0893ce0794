"""The demo's verifiable task: integer addition, generated from a seed, with train and held-out splits."""

from __future__ import annotations

import json
import random
from pathlib import Path


def addition_problems(max_operand: int, seed: int = 0) -> list[dict]:
    """Every `a+b=` with 0 <= a, b <= max_operand, shuffled with `seed`, as {question, answer} rows."""
    rows = [
        {"question": f"{a}+{b}=", "answer": str(a + b)} for a in range(max_operand + 1) for b in range(max_operand + 1)
    ]
    random.Random(seed).shuffle(rows)
    return rows


def write_addition_task(output_dir: str | Path, *, max_operand: int = 29, num_test: int = 200, seed: int = 0) -> dict:
    """Write `train.jsonl` and `test.jsonl` (disjoint) under `output_dir`; return their paths."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    rows = addition_problems(max_operand, seed)
    splits = {"test": rows[:num_test], "train": rows[num_test:]}
    paths = {}
    for name, split_rows in splits.items():
        paths[name] = output_dir / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(row) + "\n" for row in split_rows))
    return paths
