"""`make bias-real`'s parts: the importance-weighted length change by hand, the mechanism on the tiny model (weights
restored, numbers finite), the report's per-seed records and goals, the expected time, and the load sampler."""

from __future__ import annotations

import json
import math
import time

import pytest

from drgrpo.experiments.bias.chat_mechanism import (
    ChatMechanismSettings,
    importance_weighted_mean,
    length_change,
    pooled_change,
    run_chat_mechanism,
)
from drgrpo.experiments.bias.real_experiment import RealBiasSettings, expected_seconds, mechanism_prompts
from drgrpo.experiments.bias.real_report import accuracy_gaps, markdown, seed_records
from drgrpo.experiments.comparison import tokens_per_correct
from drgrpo.experiments.load import LoadSampler


def test_importance_weighted_mean_by_hand():
    # Ratios 1 and e: the second value counts e times as much.
    assert importance_weighted_mean([10.0, 20.0], [0.0, 1.0]) == pytest.approx((10 + 20 * math.e) / (1 + math.e))
    assert importance_weighted_mean([10.0, 20.0], [500.0, 500.0]) == pytest.approx(15.0)  # no overflow
    with pytest.raises(ValueError, match="one log-ratio per value"):
        importance_weighted_mean([1.0], [0.0, 0.0])


def test_length_change_and_pooling_by_hand():
    # Wrong answers of 10 and 30 tokens; the update doubles the long one's probability: mean 20 -> (10 + 60) / 3.
    change, n = length_change([10, 30, 5], [0.0, math.log(2.0), 3.0], [True, True, False])
    assert n == 2 and change == pytest.approx(70 / 3 - 20)
    assert math.isnan(length_change([10], [0.0], [False])[0])
    assert pooled_change([(1.0, 3), (float("nan"), 0), (-1.0, 1)]) == pytest.approx(0.5)
    assert pooled_change([(float("nan"), 0)]) is None


def test_tokens_per_correct():
    assert tokens_per_correct({"pass@1": 0.25, "mean_length": 30.0}) == 120.0
    assert tokens_per_correct({"pass@1": 0.0, "mean_length": 30.0}) is None


def test_expected_time_grows_with_the_work():
    base = RealBiasSettings()
    more = RealBiasSettings(seeds=(0, 1, 2, 3, 4, 5))
    assert expected_seconds(more, 60, 2) > expected_seconds(base, 60, 2) > expected_seconds(base, 30, 2) > 0


def test_load_sampler_reports_a_mean():
    with LoadSampler(interval=0.05) as load:
        time.sleep(0.2)
    assert load.mean is not None and load.mean >= 0 and len(load.samples) >= 2


def fake_comparison(grpo_end: float, dr_end: float, grpo_accuracy: float, dr_accuracy: float) -> dict:
    def row(run, end, accuracy):
        steps = range(1, 11)
        return {
            "run": run, "eval_pass_at_1": accuracy, "eval_tokens_per_correct": 40.0, "train_seconds": 100.0,
            "train_load": 3.5,
            "per_step": {"pass_rate": dict.fromkeys(steps, 0.5), "truncation_rate": dict.fromkeys(steps, 0.1),
                         "length_correct": dict.fromkeys(steps, 12.0),
                         "length_incorrect": {s: (20.0 if s == 1 else end) for s in steps}},
        }  # fmt: skip

    return {"runs": [row("GRPO", grpo_end, grpo_accuracy), row("Dr.GRPO", dr_end, dr_accuracy)],
            "start_pass_at_1": 0.2, "start_tokens_per_correct": 200.0}  # fmt: skip


def test_report_records_gap_and_goals():
    comparisons = {0: fake_comparison(30.0, 20.0, 0.50, 0.49), 1: fake_comparison(22.0, 20.0, 0.50, 0.40)}
    runs = [r for seed, c in comparisons.items() for r in seed_records(seed, c, 0.1)]
    assert [r["algorithm"] for r in runs] == ["grpo", "dr_grpo", "grpo", "dr_grpo"]
    assert runs[0]["length_incorrect_start"] == 20.0 and runs[0]["length_incorrect_end"] == 30.0
    assert runs[0]["truncation_end"] == pytest.approx(0.1) and runs[0]["load"] == 3.5
    assert accuracy_gaps(runs) == {0: pytest.approx(-1.0), 1: pytest.approx(-10.0)}
    mechanism = {
        name: {"tail_change_negative": 0.5, "tail_change_negative_se": 0.1, "tail_change_positive": -0.5,
               "tail_change_positive_se": 0.1} for name in ("grpo", "dr_grpo")
    } | {"details": {"batches": {"negative": 3}, "mean_abs_log_ratio": {"grpo": 0.1, "dr_grpo": 0.1},
                     "completions": {"probe_wrong": 5, "probe_right": 3, "truncated": 1, "groups_flat": 0},
                     "probe_length_wrong": 30.0, "probe_length_right": 12.0, "seconds": 9.0, "load": 2.0}}  # fmt: skip
    text = markdown(mechanism, runs, RealBiasSettings(), "CPU X", 10.0)
    assert "seed 0: +0.50" in text and "seed 1: +0.10" in text  # 30/20 - 20/20 and 22/20 - 20/20
    assert "- gap >= +0.25 on every seed: 1 of 2 seeds" in text
    assert "- Dr.GRPO at most 3 points below GRPO held-out: 1 of 2 seeds" in text
    assert "Dr.GRPO leaves it after a wrong answer (|z| <= 2): NOT met" in text  # z +5.0 for dr_grpo here
    assert "| 0 | GRPO | 20.00 → 30.00 (1.50) |" in text and "| 200.0 → 40.0 |" in text


def test_mechanism_prompts_have_one_token_length(tmp_path, tiny_model_path):
    from transformers import AutoTokenizer

    from drgrpo.experiments.arithmetic_task import write_chat_addition_task

    data = write_chat_addition_task(tmp_path, num_test=20, seed=0, max_operand=30)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    if tokenizer.chat_template is None:
        pytest.skip("the tiny model has no chat template")
    prompts, golds = mechanism_prompts(data["train"], tokenizer)
    assert prompts and len(prompts) == len(golds)
    assert len({len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts}) == 1


def test_chat_mechanism_on_the_tiny_model(tiny_model_path):
    """Two batches on the tiny model (plain prompts `ab+cd=`): the counts add up, the keys are the report's, and a
    second run with the same seed gives the same numbers (each update starts from the restored weights)."""
    prompts = [f"{a}+{b}=" for a in range(10, 20) for b in range(10, 20)]
    golds = [str(int(p[:2]) + int(p[3:5])) for p in prompts]
    settings = ChatMechanismSettings(num_batches=2, prompts_per_batch=2, group_size=4, max_completion_length=8,
                                     temperature=1.0, micro_batch=4)  # fmt: skip
    result = run_chat_mechanism(str(tiny_model_path), prompts, golds, settings)
    counts = result["details"]["completions"]
    assert counts["probe_wrong"] + counts["probe_right"] == 2 * 2 * 4
    assert counts["update_wrong"] + counts["update_right"] == 2 * 2 * 4
    assert set(result) == {"grpo", "dr_grpo", "details"}
    for name in ("grpo", "dr_grpo"):
        assert set(result[name]) == {"tail_change_negative", "tail_change_negative_se", "tail_change_positive",
                                     "tail_change_positive_se"}  # fmt: skip
        assert result["details"]["mean_abs_log_ratio"][name] >= 0
    json.dumps(result)
    again = run_chat_mechanism(str(tiny_model_path), prompts, golds, settings)
    assert again["details"]["per_batch"] == result["details"]["per_batch"]
