"""The demo's task: carry-addition problems, disjoint splits, and the sloppy teacher's demonstrations."""

import json

import pytest

from drgrpo.experiments.demo import DemoSettings, format_table, write_task
from drgrpo.experiments.tasks import addition_problems, sloppy_demonstrations, sloppy_sum


def test_sloppy_sum_drops_only_the_ones_carry():
    assert sloppy_sum(17, 25, forget_carry=True) == 32
    assert sloppy_sum(17, 25, forget_carry=False) == 42
    assert sloppy_sum(95, 15, forget_carry=True) == 100  # 110 without the ones carry; the tens carry stays
    assert sloppy_sum(12, 13, forget_carry=True) == 25  # no carry to forget


def test_carry_only_problems():
    rows = addition_problems(99, min_operand=10, carry_only=True)
    # Ones digits (x, y) with x + y >= 10: 45 of 100 pairs; tens digits 1-9: 81 pairs -> 45 * 81.
    assert len(rows) == 45 * 81
    for row in rows[:50]:
        a, b = (int(x) for x in row["question"].rstrip("=").split("+"))
        assert a % 10 + b % 10 >= 10 and int(row["answer"]) == a + b


def test_demo_splits_are_disjoint_and_seeded(tmp_path):
    settings = DemoSettings(output_dir=str(tmp_path))
    paths = write_task(settings)
    test = [json.loads(line)["question"] for line in paths["test"].read_text().splitlines()]
    train = [json.loads(line)["question"] for line in paths["train"].read_text().splitlines()]
    assert len(test) == 200 and not set(test) & set(train)
    assert write_task(settings)["test"].read_text() == paths["test"].read_text()


def test_sloppy_demonstrations_error_rate():
    rows = addition_problems(99, min_operand=10, carry_only=True)[:2000]
    demos = sloppy_demonstrations(rows, carry_error_rate=0.8, seed=0)
    wrong = sum(demo["completion"] != row["answer"] for demo, row in zip(demos, rows, strict=True))
    assert wrong / len(rows) == pytest.approx(0.8, abs=0.03)
    assert all(
        int(d["completion"]) in (int(r["answer"]), int(r["answer"]) - 10) for d, r in zip(demos, rows, strict=True)
    )


def test_format_table():
    metrics = {
        "accuracy_untrained": 0.0,
        "accuracy_before_rl": 0.12,
        "accuracy_after_rl": 0.8,
        "num_test_problems": 200,
        "rl_gain_points": 68.0,
        "rl_steps": 200,
        "rl_seconds": 69.0,
        "total_seconds": 173.0,
    }
    table = format_table(metrics)
    assert "| after Dr.GRPO | 80.0% |" in table and "+68.0 points in 200 steps" in table
