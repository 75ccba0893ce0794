"""`zero_reward_for_truncated`: a completion cut at the generation budget gets the lowest score of every reward
function (the Dr.GRPO paper's 0 with its 0/1 accuracy), so truncation never pays (issue 23); a missing score counts
as its function's lowest and, after a KL in the reward, a cut completion totals its group's lowest (issue 30)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from datasets import Dataset

from drgrpo.algorithm.advantages import (
    combine_rewards,
    floor_truncated_rewards,
    group_advantages,
    lowest_scores,
    truncated_at_group_lowest,
    truncated_completions,
)
from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.kl import kl_penalised_rewards
from drgrpo.algorithm.trainer import DrGRPOTrainer
from rewards import get_reward_funcs

EOS, PAD = 2, 0


def test_truncated_completions_by_hand():
    # Ends with EOS, with pad, cut mid-answer, empty (ended at once), a single non-stop token.
    ids = [[5, 6, EOS], [7, PAD], [5, 6, 7], [], [9]]
    assert truncated_completions(ids, [EOS, PAD]).tolist() == [False, False, True, False, True]


def test_floor_truncated_rewards_by_hand():
    rewards = torch.tensor([[1.0, 0.5], [1.0, math.nan], [0.0, 1.0], [math.nan, math.nan]])
    truncated = torch.tensor([False, True, False, True])
    floored = floor_truncated_rewards(rewards, truncated, torch.tensor([0.0, -1.0]))
    assert floored[0].tolist() == [1.0, 0.5] and floored[2].tolist() == [0.0, 1.0]
    assert floored[1].tolist() == [0.0, -1.0] and floored[3].tolist() == [0.0, -1.0]  # unscored, truncated: too
    assert math.isnan(rewards[1, 1].item())  # the input is not modified


def test_lowest_scores_per_weight_sign_and_the_one_line_refusals():
    ranges = [(0.0, 1.0), (-1.0, 0.0), (-1.0, 1.0)]
    assert lowest_scores(["a", "b", "c"], ranges, [1.0, 2.0, -0.5]) == [0.0, -1.0, 1.0]  # negative weight: highest
    with pytest.raises(ValueError, match=r"zero_reward_for_truncated needs the range .* 'mine' declares none") as info:
        lowest_scores(["accuracy", "mine"], [(0.0, 1.0), None], [1.0, 1.0])
    assert "\n" not in str(info.value) and "mine.reward_range = (0.0, 1.0)" in str(info.value)
    with pytest.raises(ValueError, match="highest .*reward_weights entry is negative"):
        lowest_scores(["open"], [(0.0, math.inf)], [-1.0])


def test_the_reviews_four_completions_truncated_scores_lowest():
    """accuracy + overlong + cosine_length (built-ins, defaults, budget 3000): three wrong answers that ended after
    2,990 / 2,999 / 800 tokens and one cut at 3,000. Zeroing every reward of the cut one (the old rule) made it the
    best of its group (totals -1.48 / -1.50 / -0.92 / 0.0, Dr.GRPO advantages -0.51 / -0.52 / +0.06 / +0.97)."""
    funcs = get_reward_funcs(["accuracy", "overlong", "cosine_length"], max_completion_length=3000)
    lengths, truncated = [2990, 2999, 800, 3000], torch.tensor([False, False, False, True])
    texts = ["The answer is \\boxed{5}."] * 3 + ["The answer is 5 and then"]
    ids = [[1] * n for n in lengths]
    scores = [f(completions=texts, completion_ids=ids, answer=["7"] * 4, prompts=["q"] * 4) for f in funcs]
    rewards_per_func = torch.tensor(scores, dtype=torch.float64).T
    weights = torch.ones(3, dtype=torch.float64)
    old = combine_rewards(rewards_per_func.masked_fill(truncated.unsqueeze(1), 0.0), weights)
    assert old.tolist() == pytest.approx([-1.4833, -1.4983, -0.9173, 0.0], abs=1e-4)
    assert group_advantages(old, 4, scale_by_std=False).argmax().item() == 3  # the bug: truncation paid

    lowest = lowest_scores([f.__name__ for f in funcs], [f.reward_range for f in funcs], weights.tolist())
    assert lowest == [0.0, -1.0, -1.0]  # accuracy 0, overlong -1, cosine_length -1 (a wrong answer of length 0)
    totals = combine_rewards(floor_truncated_rewards(rewards_per_func, truncated, torch.tensor(lowest)), weights)
    assert totals.tolist() == pytest.approx([-1.4833, -1.4983, -0.9173, -2.0], abs=1e-4)
    advantages = group_advantages(totals, 4, scale_by_std=False)  # Dr.GRPO: R_i - mean
    assert advantages.tolist() == pytest.approx([-0.0086, -0.0236, 0.5575, -0.5253], abs=1e-4)
    assert totals.argmin().item() == 3 and advantages.argmin().item() == 3
    assert all(advantages[3] < advantages[i] for i in range(3))


def always_one(completions, **kwargs) -> list[float]:
    return [1.0] * len(completions)


always_one.reward_range = (0.0, 1.0)  # declared, as zero_reward_for_truncated requires of every reward


def undeclared(completions, **kwargs) -> list[float]:
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


def test_trainer_refuses_a_reward_without_a_range(tiny_model_path, tmp_path):
    dataset = Dataset.from_list([{"prompt": "1+1="}] * 8)
    args = DrGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, report_to="none", num_generations=8, per_device_train_batch_size=8,
        max_completion_length=3, zero_reward_for_truncated=True,
    )  # fmt: skip
    with pytest.raises(ValueError, match="'undeclared' declares none"):
        DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[undeclared], args=args, train_dataset=dataset)


def test_the_issues_kl_case_truncated_no_longer_on_top():
    """Issue 30: four completions, the truncated one first, all rewards 0, k3 sums [2, 5, 5, 5], coefficient 0.1.
    The KL came after the floor: the cut completion had the top advantage under every baseline and scaling. Now its
    total is its group's lowest (-0.5), so the group is all-equal and carries no signal."""
    truncated = torch.tensor([True, False, False, False])
    rewards = torch.zeros(4)
    for kls, old_expected in (([2.0, 5.0, 5.0, 5.0], 0.225), ([-2.0, 0.5, 0.5, 0.5], 0.1875)):  # k3, k1 sums
        penalised = kl_penalised_rewards(rewards, torch.tensor(kls), 0.1)
        assert group_advantages(penalised, 4, scale_by_std=False)[0].item() == pytest.approx(old_expected)
        fixed = truncated_at_group_lowest(penalised, truncated, 4)
        assert fixed.tolist() == pytest.approx([penalised.min().item()] * 4)
        for scale, loo in itertools.product((False, True), (False, True)):
            assert group_advantages(fixed, 4, scale_by_std=scale, leave_one_out=loo).tolist() == [0.0] * 4
    # The issue's other figures, before: leave-one-out +0.30, group std +1.50, both +2.00.
    penalised = kl_penalised_rewards(rewards, torch.tensor([2.0, 5.0, 5.0, 5.0]), 0.1)
    old = [group_advantages(penalised, 4, scale_by_std=s, leave_one_out=loo)[0].item() for s, loo in
           ((False, True), (True, False), (True, True))]  # fmt: skip
    assert old == pytest.approx([0.30, 1.50, 2.00], abs=2e-3)  # std + eps 1e-4


def test_truncated_total_is_clamped_to_its_groups_lowest_only():
    # Group 1: the cut completion (-0.1) is above an ended one (-0.4): it drops to -0.4. Group 2: already lowest.
    # Group 3: an unscored ended completion (NaN) is ignored. Group 4: nothing truncated.
    rewards = torch.tensor([-0.1, -0.4, 0.5, -2.0, 0.0, 1.0, 0.3, math.nan, 0.8, 0.1, 0.2, 0.3])
    truncated = torch.tensor([True, False, False, True, False, False, True, False, False, False, False, False])
    clamped = truncated_at_group_lowest(rewards, truncated, 3)
    expected = [-0.4, -0.4, 0.5, -2.0, 0.0, 1.0, 0.3, math.nan, 0.8, 0.1, 0.2, 0.3]
    assert clamped.tolist() == pytest.approx(expected, nan_ok=True)
    unscored = truncated_at_group_lowest(torch.tensor([math.nan, math.nan]), torch.tensor([True, False]), 2)
    assert torch.isnan(unscored).all()  # a group with no scored total: nothing to clamp to


def test_the_issues_missing_score_case_stays_above_the_floor():
    """Issue 30: ranges (0, 1) and (0.5, 1), a custom score None. Summed as 0, the ended completion totalled 0.0,
    below the truncated one's floor 0.5; at the function's lowest it totals 0.5, the floor."""
    scores = torch.tensor([[1.0, 0.9], [0.0, math.nan], [0.0, 0.6], [0.0, 0.6]])  # the first one is cut
    truncated = torch.tensor([True, False, False, False])
    lowest = torch.tensor(lowest_scores(["accuracy", "custom"], [(0.0, 1.0), (0.5, 1.0)], [1.0, 1.0]))
    weights = torch.ones(2)
    old = combine_rewards(scores.masked_fill(truncated.unsqueeze(1), 0.0) + torch.tensor([0.0, 0.5]) * truncated
                          .unsqueeze(1), weights)  # fmt: skip
    assert old.tolist() == pytest.approx([0.5, 0.0, 0.6, 0.6])
    assert group_advantages(old, 4, scale_by_std=False)[0].item() == pytest.approx(0.075)  # truncation paid
    totals = combine_rewards(floor_truncated_rewards(scores, truncated, lowest), weights)
    assert totals.tolist() == pytest.approx([0.5, 0.5, 0.6, 0.6])
    advantages = group_advantages(totals, 4, scale_by_std=False)
    assert advantages[0].item() == pytest.approx(-0.05) and advantages[0] <= advantages[1:].min()
    # A completion no function scored stays unscored (left out, advantage 0, as in TRL).
    unscored = floor_truncated_rewards(torch.tensor([[math.nan, math.nan]]), torch.tensor([False]), lowest)
    assert torch.isnan(unscored).all()
