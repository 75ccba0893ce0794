"""`zero_reward_for_truncated`: the Dr.GRPO paper's runs score a completion cut at the generation budget 0."""

from __future__ import annotations

import math

import torch
from datasets import Dataset

from drgrpo.algorithm.advantages import truncated_completions, zero_truncated_rewards
from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.trainer import DrGRPOTrainer

EOS, PAD = 2, 0


def test_truncated_completions_by_hand():
    # Ends with EOS, with pad, cut mid-answer, empty (ended at once), a single non-stop token.
    ids = [[5, 6, EOS], [7, PAD], [5, 6, 7], [], [9]]
    assert truncated_completions(ids, [EOS, PAD]).tolist() == [False, False, True, False, True]


def test_zero_truncated_rewards_by_hand():
    rewards = torch.tensor([[1.0, 0.5], [1.0, math.nan], [0.0, 1.0], [math.nan, math.nan]])
    truncated = torch.tensor([False, True, False, True])
    zeroed = zero_truncated_rewards(rewards, truncated)
    assert zeroed[0].tolist() == [1.0, 0.5] and zeroed[2].tolist() == [0.0, 1.0]
    assert zeroed[1].tolist() == [0.0, 0.0] and zeroed[3].tolist() == [0.0, 0.0]  # unscored, truncated: 0 too
    assert math.isnan(rewards[1, 1].item())  # the input is not modified


def always_one(completions, **kwargs) -> list[float]:
    return [1.0] * len(completions)


def _rewards_and_truncation(tiny_model_path, tmp_path, zero_truncated: bool) -> tuple[torch.Tensor, torch.Tensor]:
    dataset = Dataset.from_list([{"prompt": p} for p in ("12+29=", "47+38=", "55+17=", "68+24=")])
    args = DrGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", dr_grpo=True, num_generations=8,
        per_device_train_batch_size=16, max_completion_length=3, temperature=1.0, seed=0, max_steps=1,
        zero_reward_for_truncated=zero_truncated,
    )  # fmt: skip
    trainer = DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[always_one], args=args, train_dataset=dataset)
    seen = {}
    original = trainer._generate_and_score_completions

    def record(inputs):
        output = original(inputs)
        stops = [*trainer.eos_token_ids, trainer._tokenizer.pad_token_id]
        pairs = zip(output["completion_ids"], output["completion_mask"], strict=True)
        ids = [row[mask.bool()].tolist() for row, mask in pairs]
        seen["truncated"] = truncated_completions(ids, stops)
        seen["rewards"] = trainer._last_rewards_per_func[:, 0].clone()
        return output

    trainer._generate_and_score_completions = record
    trainer.train()
    return seen["rewards"], seen["truncated"]


def test_trainer_scores_truncated_completions_zero(tiny_model_path, tmp_path):
    # The random tiny model rarely ends within 3 tokens: most completions are cut at the budget, some are not.
    rewards, truncated = _rewards_and_truncation(tiny_model_path, tmp_path / "on", zero_truncated=True)
    assert truncated.any()
    assert rewards[truncated].tolist() == [0.0] * int(truncated.sum())
    assert rewards[~truncated].tolist() == [1.0] * int((~truncated).sum())
    # Off (the default), every completion keeps the reward function's score.
    rewards_off, _ = _rewards_and_truncation(tiny_model_path, tmp_path / "off", zero_truncated=False)
    assert rewards_off.tolist() == [1.0] * len(rewards_off)
