"""DrGRPOTrainer's numbers and logs match what TRL would give, or what was trained (issue 11, items 2, 3 and 5).

- a group of one (eval with num_generations_eval=1) gets advantage 0, as in TRL, so eval_loss is 0;
- the completions table (`log_completions`) holds the advantages the loss received, not TRL's;
- maxima are logged as the maximum over micro-steps, not TRL's mean of their values.
"""

from __future__ import annotations

import json
import math
from collections import deque

import pandas as pd
import pytest
import torch
from datasets import Dataset
from trl import GRPOTrainer

from drgrpo.algorithm.advantages import combine_rewards, group_advantages
from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.trainer import DrGRPOTrainer, replace_tail
from drgrpo.observe import metric_names as m
from drgrpo.observe.diagnostics import reduce_to_max
from rewards import accuracy


def one_or_quarter(prompts, **kwargs) -> list[float]:
    """1.0 for the prompt `1+1=`, 0.25 for any other: the issue's eval rewards [1, .25, 1, .25] for its four prompts."""
    return [1.0 if p == "1+1=" else 0.25 for p in prompts]


def test_group_of_one_in_eval_gives_trl_advantages_and_zero_eval_loss(tiny_model_path, tmp_path):
    dataset = Dataset.from_list([{"prompt": p, "answer": "2"} for p in ("1+1=", "2+2=", "1+1=", "2+2=")])
    args = DrGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", dr_grpo=True, num_generations=4,
        per_device_train_batch_size=4, num_generations_eval=1, per_device_eval_batch_size=4,
        max_completion_length=4, seed=0,
    )  # fmt: skip
    trainer = DrGRPOTrainer(
        model=str(tiny_model_path), reward_funcs=[one_or_quarter], args=args, train_dataset=dataset,
        eval_dataset=dataset,
    )  # fmt: skip
    ours, trl, rewards = [], [], []
    original_ours, original_trl = trainer._generate_and_score_completions, GRPOTrainer._generate_and_score_completions

    def record_ours(inputs):
        output = original_ours(inputs)
        ours.append(output["advantages"].clone())
        rewards.append(trainer._last_rewards_per_func[:, 0].clone())
        return output

    def record_trl(self, inputs):
        output = original_trl(self, inputs)
        trl.append(output["advantages"].clone())
        return output

    trainer._generate_and_score_completions = record_ours
    GRPOTrainer._generate_and_score_completions = record_trl
    try:
        metrics = trainer.evaluate()
    finally:
        GRPOTrainer._generate_and_score_completions = original_trl
    assert len(ours) == len(trl) == 1
    assert sorted(rewards[0].tolist()) == [0.25, 0.25, 1.0, 1.0]
    assert torch.equal(ours[0], trl[0]) and torch.equal(ours[0], torch.zeros(4))
    assert metrics["eval_loss"] == 0.0
    # verl's rule, kept behind its option, would have trained on the raw rewards: the case above discriminates.
    verl = group_advantages(rewards[0], 1, scale_by_std=False, verl_single_sample_rule=True)
    assert torch.equal(verl, rewards[0])


def first_char_thirds(completions, **kwargs) -> list[float]:
    """A non-binary reward (0, 0.5 or 1 from the first character) that the random tiny model spreads within groups."""
    return [(ord(c[0]) % 3) / 2 if c else 0.0 for c in completions]


def test_completions_table_holds_the_trained_advantages(tiny_model_path, addition_data, tmp_path):
    rows = [json.loads(line) for line in open(addition_data["train"])][:32]
    dataset = Dataset.from_list([{"prompt": r["question"], "answer": r["answer"]} for r in rows])
    # Population std (ddof 0): our advantages differ from TRL's (ddof 1) by sqrt(8/7) on every mixed group.
    args = DrGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", save_strategy="no", max_steps=2,
        per_device_train_batch_size=16, num_generations=8, max_completion_length=4, logging_steps=1, seed=3,
        reward_weights=[1.0, 2.0], advantage_std_ddof=0, advantage_epsilon=1e-8, log_completions=True,
    )  # fmt: skip
    trainer = DrGRPOTrainer(
        model=str(tiny_model_path), reward_funcs=[accuracy, first_char_thirds], args=args, train_dataset=dataset
    )
    trained: list[torch.Tensor] = []  # the all-process advantages of each batch, in generation order
    original = trainer._generate_and_score_completions

    def record(inputs):
        output = original(inputs)
        trained.append(output["advantages"].clone())  # one process: the local slice is the whole batch
        return output

    trainer._generate_and_score_completions = record
    trainer.train()
    assert len(trained) == 2
    for step, advantages in enumerate(trained, start=1):
        table = pd.read_parquet(tmp_path / "completions" / f"completions_{step:05d}.parquet")
        assert table["advantage"].tolist() == pytest.approx(advantages.tolist(), abs=1e-6)
        # The table's own reward columns give the same advantages under our convention and not under TRL's.
        per_func = torch.tensor(table[["accuracy", "first_char_thirds"]].to_numpy(), dtype=torch.float32)
        rewards = combine_rewards(per_func, torch.tensor([1.0, 2.0]))
        ours = group_advantages(rewards, 8, std_ddof=0, epsilon=1e-8)
        trl = group_advantages(rewards, 8)
        assert table["advantage"].tolist() == pytest.approx(ours.tolist(), abs=1e-5)
        assert not torch.allclose(ours, trl, atol=1e-3), "no mixed group: the table cannot tell the two apart"


def test_replace_tail_of_list_and_bounded_deque():
    buffer = [1.0, 2.0, 3.0, 4.0]
    replace_tail(buffer, [30.0, 40.0])
    assert buffer == [1.0, 2.0, 30.0, 40.0]
    bounded = deque([7.0, 8.0], maxlen=2)  # kept only the last two of a batch of three
    replace_tail(bounded, [10.0, 20.0, 30.0])
    assert list(bounded) == [20.0, 30.0]


def test_reduce_to_max_keeps_maxima_and_leaves_other_metrics():
    metrics = {"a": [0.1, 0.5, float("nan"), 0.2], "b": [1.0, 3.0], "c": [float("nan")]}
    reduce_to_max(metrics, ["a", "c", "absent"])
    assert metrics["a"] == [0.5] and metrics["b"] == [1.0, 3.0]
    assert math.isnan(metrics["c"][0]) and "absent" not in metrics


def test_logged_maximum_is_the_max_over_micro_steps(tiny_model_path, tmp_path):
    dataset = Dataset.from_list([{"prompt": "1+1=", "answer": "2"}] * 8)
    args = DrGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", num_generations=4,
                        per_device_train_batch_size=8, max_completion_length=4)  # fmt: skip
    trainer = DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[accuracy], args=args, train_dataset=dataset)
    trainer.model.train()
    # Three micro-steps' values, as `_log_first_update_ratios` appends them between two logs.
    trainer._metrics["train"][m.FIRST_UPDATE_MAX_ABS_LOG_RATIO] += [0.1, 0.5, 0.2]
    trainer._metrics["train"][m.SAMPLER_TRAINER_MAX_ABS_LOG_RATIO] += [0.3, float("nan"), 0.05]
    trainer._metrics["train"][m.FIRST_UPDATE_RATIO_MEAN] += [1.0, 0.5]
    trainer.log({})
    logged = trainer.state.log_history[-1]
    assert logged[m.FIRST_UPDATE_MAX_ABS_LOG_RATIO] == 0.5  # TRL's averaging would give 0.2667
    assert logged[m.SAMPLER_TRAINER_MAX_ABS_LOG_RATIO] == 0.3
    assert logged[m.FIRST_UPDATE_RATIO_MEAN] == 0.75  # a mean stays a mean


def test_steps_per_generation_gives_the_planned_optimizer_steps_per_rollout(tiny_model_path, addition_data, tmp_path):
    """TRL 1.16 generates once per steps_per_generation micro-steps and steps the optimizer every
    gradient_accumulation_steps: the planner's "optimizer steps per rollout" is what the trainer does, and pi_old is
    the trainer's own log-probs at sampling time (the paper's run: Oat recomputes them with the learner)."""
    from drgrpo.planning import batch_plan

    rows = [json.loads(line) for line in open(addition_data["train"])][:32]
    dataset = Dataset.from_list([{"prompt": r["question"], "answer": r["answer"]} for r in rows])
    args = DrGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", save_strategy="no", dr_grpo=True,
        max_steps=4, per_device_train_batch_size=8, num_generations=4, gradient_accumulation_steps=1,
        steps_per_generation=2, max_completion_length=4, logging_steps=1, seed=0,
    )  # fmt: skip
    plan, findings = batch_plan(1, 8, 1, 4, steps_per_generation=2)
    assert findings == [] and plan.optimizer_steps_per_round == 2 and plan.completions_per_round == 16
    trainer = DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[accuracy], args=args, train_dataset=dataset)
    rollouts, old_logps_seen = [], []
    original_generate, original_loss = trainer._generate_and_score_completions, trainer._compute_loss

    def record_rollout(inputs):
        output = original_generate(inputs)
        rollouts.append(output["completion_ids"].shape[0])
        return output

    def record_loss(model, inputs):
        old_logps_seen.append("old_per_token_logps" in inputs)
        return original_loss(model, inputs)

    trainer._generate_and_score_completions, trainer._compute_loss = record_rollout, record_loss
    trainer.train()
    assert trainer.state.global_step == 4 and rollouts == [16, 16]  # 4 optimizer steps, 2 per rollout of 16
    assert old_logps_seen == [True] * 4
    # The first-update ratio is logged at each rollout's first step only (steps 1 and 3), and is 1 there.
    ratios = [h.get(m.FIRST_UPDATE_RATIO_MEAN) for h in trainer.state.log_history if "loss" in h]
    assert ratios[0] == pytest.approx(1.0, abs=1e-4) and ratios[2] == pytest.approx(1.0, abs=1e-4)
    assert ratios[1] is None and ratios[3] is None
