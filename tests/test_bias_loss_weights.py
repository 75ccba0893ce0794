"""Loss weights: hand-computed numbers, and the per-token gradient of TRL 1.16's own loss on a tiny model."""

from __future__ import annotations

import json
import math

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from drgrpo.experiments.bias.loss_weights import (
    advantage_mass,
    advantage_mass_table,
    group_loss_weights,
    loss_weight_table,
    token_weights,
)
from rewards import accuracy

REWARDS = [1, 0, 0, 1, 0, 0, 0, 1]
LENGTHS = [12, 30, 8, 25, 14, 6, 28, 9]


def test_token_weights_by_hand():
    # Two completions, A = +1 / -1, lengths 2 and 4, C = 8.
    assert token_weights([1.0, -1.0], [2, 4], "grpo", 8) == [1 / (2 * 2), -1 / (2 * 4)]
    assert token_weights([1.0, -1.0], [2, 4], "dapo", 8) == [1 / 6, -1 / 6]
    assert token_weights([1.0, -1.0], [2, 4], "dr_grpo", 8) == [1 / 16, -1 / 16]


def test_group_of_the_issue_by_hand():
    result = group_loss_weights(REWARDS, LENGTHS, 32)
    # 3 right of 8: mean 0.375, sample std sqrt(8/7 * 0.375 * 0.625) = 0.517549, eps 1e-4.
    std = math.sqrt(8 / 7 * 0.375 * 0.625)
    assert result.advantage_scaled[0] == pytest.approx(0.625 / (std + 1e-4))
    assert result.advantage_scaled[1] == pytest.approx(-0.375 / (std + 1e-4))
    assert result.advantage_unscaled[:2] == pytest.approx([0.625, -0.375])
    # grpo: A / (8 |o|); every completion's total is A / 8 whatever its length.
    assert result.weights["grpo"][1] == pytest.approx(-0.375 / (std + 1e-4) / (8 * 30))
    totals = [w * n for w, n in zip(result.weights["grpo"], LENGTHS, strict=True)]
    assert totals[1] == pytest.approx(totals[5])  # 30-token and 6-token wrong answers: the same total push
    # dapo: A / 132 tokens; dr_grpo: A_unscaled / (8 * 32).
    assert sum(LENGTHS) == 132
    assert result.weights["dapo"][3] == pytest.approx(0.625 / (std + 1e-4) / 132)
    assert result.weights["dr_grpo"][6] == pytest.approx(-0.375 / 256)
    table = loss_weight_table(result)
    assert "-0.001465" in table  # dr_grpo per-token weight of a wrong answer, -0.375 / 256
    assert len(table.splitlines()) == 1 + 8 + 1


def test_advantage_mass_by_hand():
    # 1 right of 8, no std scaling: 1 * 0.875 + 7 * 0.125 = 1.75; half right: 8 * 0.5 = 4.
    assert advantage_mass(1, 8, scale_by_std=False) == pytest.approx(1.75)
    assert advantage_mass(4, 8, scale_by_std=False) == pytest.approx(4.0)
    # With the sample std: std(1 of 8) = sqrt(8/7 * 0.109375) = 0.353553; std(4 of 8) = sqrt(8/7 * 0.25) = 0.534522.
    assert advantage_mass(1, 8, scale_by_std=True) == pytest.approx(1.75 / (0.353553 + 1e-4), rel=1e-5)
    assert advantage_mass(4, 8, scale_by_std=True) == pytest.approx(4.0 / (0.534522 + 1e-4), rel=1e-5)
    assert advantage_mass(0, 8, scale_by_std=True) == 0.0 and advantage_mass(8, 8, scale_by_std=False) == 0.0
    table = advantage_mass_table(8)
    assert " 1/8 " in table and len(table.splitlines()) == 1 + 9 + 1


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda: token_weights([1.0], [0], "grpo", 8), "at least one token"),
        (lambda: token_weights([1.0], [9], "dr_grpo", 8), "max_completion_length"),
        (lambda: token_weights([1.0], [2], "bnpo_typo", 8), "loss_type"),
        (lambda: group_loss_weights([1, 0], [3], 8), "LENGTHS"),
    ],
)
def test_bad_input_says_what_to_fix(bad, message):
    with pytest.raises(ValueError, match=message):
        bad()


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_weights_equal_the_gradient_of_trls_loss(loss_type, tiny_model_path, tmp_path):
    """TRL's own `GRPOTrainer._compute_loss` on the tiny model: d loss / d(log-prob of each completion token) must be
    minus the printed weight on every real token and 0 on padding."""
    max_completion_length = 32
    result = group_loss_weights(REWARDS, LENGTHS, max_completion_length)
    advantages = result.advantage_unscaled if loss_type == "dr_grpo" else result.advantage_scaled
    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to="none",
        loss_type=loss_type,
        beta=0.0,
        num_generations=8,
        per_device_train_batch_size=8,
        max_completion_length=max_completion_length,
    )
    dataset = Dataset.from_list([{"prompt": "1+1=", "answer": "2"}] * 8)
    trainer = GRPOTrainer(model=str(tiny_model_path), reward_funcs=[accuracy], args=args, train_dataset=dataset)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop; one micro-batch per step here

    generator = torch.Generator().manual_seed(0)
    num, width = len(LENGTHS), max(LENGTHS)
    completion_mask = torch.tensor([[1] * n + [0] * (width - n) for n in LENGTHS])
    inputs = {
        "prompt_ids": torch.randint(7, 100, (num, 5), generator=generator),
        "prompt_mask": torch.ones(num, 5, dtype=torch.long),
        "completion_ids": torch.randint(7, 100, (num, width), generator=generator),
        "completion_mask": completion_mask,
        "advantages": torch.tensor(advantages, dtype=torch.float32),
        "num_items_in_batch": completion_mask.sum(),
    }
    captured = {}
    original = trainer._get_per_token_logps_and_entropies

    def keep_logps(*args, **kwargs):
        logps, *rest = original(*args, **kwargs)
        logps.retain_grad()
        captured["logps"] = logps
        return (logps, *rest)

    trainer._get_per_token_logps_and_entropies = keep_logps
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    gradient = captured["logps"].grad
    expected = -torch.tensor(result.weights[loss_type]).unsqueeze(1) * completion_mask
    assert torch.allclose(gradient, expected.to(gradient.dtype), atol=1e-7, rtol=1e-5), json.dumps(
        {"got": gradient[:, 0].tolist(), "want": expected[:, 0].tolist()}
    )
