"""KL in the reward: the estimators equal verl's published formulas, the penalty changes advantages as computed by
hand, and the trainer loads a reference model only when a KL is on."""

from __future__ import annotations

import json
import math

import pytest
import torch
from datasets import Dataset

from drgrpo.algorithm.advantages import combine_rewards, group_advantages
from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.kl import KL_ESTIMATORS, kl_penalised_rewards, kl_penalty, sequence_kl


def verl_kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, name: str) -> torch.Tensor:
    """verl's `core_algos.kl_penalty`, written out from its published formulas (one line per estimator)."""
    if name in ("kl", "k1"):
        return logprob - ref_logprob
    if name in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob) ** 2
    if name in ("low_var_kl", "k3"):
        d = (ref_logprob - logprob).clamp(-20, 20)
        return (d.exp() - d - 1).clamp(-10, 10)
    raise AssertionError(name)


@pytest.mark.parametrize("kind", KL_ESTIMATORS)
def test_estimators_equal_verl_on_random_inputs(kind):
    generator = torch.Generator().manual_seed(0)
    logprob = -torch.rand(64, 32, generator=generator, dtype=torch.float64) * 8
    ref_logprob = -torch.rand(64, 32, generator=generator, dtype=torch.float64) * 8
    # Extremes too: log-ratios far past both clamps of low_var_kl.
    logprob[0, :4] = torch.tensor([-50.0, -0.01, -30.0, -1.0], dtype=torch.float64)
    ref_logprob[0, :4] = torch.tensor([-0.01, -50.0, -1.0, -30.0], dtype=torch.float64)
    ours = kl_penalty(logprob, ref_logprob, kind)
    assert ours.shape == logprob.shape
    assert torch.allclose(ours, verl_kl_penalty(logprob, ref_logprob, kind), atol=1e-6, rtol=0)


def test_estimators_by_hand():
    # log r = logprob - ref = -1.0 - (-1.2) = 0.2
    logprob, ref = torch.tensor([-1.0]), torch.tensor([-1.2])
    assert kl_penalty(logprob, ref, "k1").item() == pytest.approx(0.2, abs=1e-6)
    assert kl_penalty(logprob, ref, "k2").item() == pytest.approx(0.02, abs=1e-6)
    assert kl_penalty(logprob, ref, "k3").item() == pytest.approx(math.exp(-0.2) + 0.2 - 1, abs=1e-6)  # 0.018731
    # low_var_kl clamps at 10: ref far above the policy (d = 29 -> clamped to 20 -> e^20 - 21 -> 10).
    assert kl_penalty(torch.tensor([-30.0]), torch.tensor([-1.0]), "low_var_kl").item() == 10.0
    with pytest.raises(ValueError, match="Unknown KL estimator 'abs'"):
        kl_penalty(logprob, ref, "abs")


def test_kl_in_reward_changes_advantages_as_by_hand():
    # Two prompts x 2 completions, 3 tokens each; the last token of completions 1 and 3 is padding.
    logprob = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -9.0], [-0.5, -0.5, -0.5], [-3.0, -1.0, -9.0]])
    ref = torch.tensor([[-1.5, -2.0, -1.0], [-0.5, -1.0, 0.0], [-0.5, -0.5, -0.5], [-1.0, -2.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 0]])
    seq = sequence_kl(kl_penalty(logprob, ref, "k1"), mask)
    # k1 sums: 0.5 + 0 + 0.5 = 1.0; -0.5 + 0 = -0.5; 0; -2 + 1 = -1.0
    assert seq.tolist() == pytest.approx([1.0, -0.5, 0.0, -1.0])
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    penalised = kl_penalised_rewards(rewards, seq, 0.1)
    assert penalised.tolist() == pytest.approx([0.9, 1.05, 0.0, 1.1])
    # Dr.GRPO advantages: group 1 was all-equal (no signal) and now prefers the completion with less KL.
    adv = group_advantages(penalised, 2, scale_by_std=False)
    assert adv.tolist() == pytest.approx([-0.075, 0.075, -0.55, 0.55])
    assert kl_penalised_rewards(torch.tensor([math.nan]), torch.tensor([1.0]), 0.1).isnan().all()


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"kl_estimator": "abs"}, "kl_estimator='abs' is not one of"),
        ({"kl_in_reward_coef": -0.1}, "kl_in_reward_coef must be >= 0"),
        ({"advantage_estimator": "rloo"}, "advantage_estimator='rloo' is not one of"),
        ({"kl_in_reward_coef": 0.1, "scale_rewards": "batch"}, "kl_in_reward_coef > 0 works on group advantages"),
        ({"advantage_estimator": "leave_one_out", "scale_rewards": "batch"}, "scale_rewards: group or none"),
    ],
)
def test_family_settings_are_checked(tmp_path, settings, message):
    with pytest.raises(ValueError, match=message):
        DrGRPOConfig(output_dir=str(tmp_path), use_cpu=True, **settings)


def test_dr_grpo_keeps_beta_zero_but_allows_kl_in_reward(tmp_path):
    config = DrGRPOConfig(output_dir=str(tmp_path), use_cpu=True, dr_grpo=True, kl_in_reward_coef=0.01)
    assert config.beta == 0.0 and config.kl_in_reward_coef == 0.01 and config.uses_reference_model
    assert not DrGRPOConfig(output_dir=str(tmp_path), use_cpu=True, dr_grpo=True).uses_reference_model


def digit_share(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / len(c) if c else 0.0 for c in completions]


@pytest.mark.slow
def test_trainer_folds_kl_into_rewards(tiny_model_path, addition_data, tmp_path):
    """beta stays 0 (no KL in the loss) while a reference model is built; advantages use R - coef * sum KL."""
    from drgrpo.algorithm.trainer import DrGRPOTrainer

    rows = [json.loads(line) for line in open(addition_data["train"])][:16]
    dataset = Dataset.from_list([{"prompt": r["question"]} for r in rows])
    args = DrGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", save_strategy="no", max_steps=3,
        per_device_train_batch_size=8, num_generations=4, max_completion_length=6, learning_rate=5e-3, seed=1,
        dr_grpo=True, kl_in_reward_coef=0.5, kl_estimator="k3", logging_steps=1,
    )  # fmt: skip
    trainer = DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[digit_share], args=args, train_dataset=dataset)
    assert trainer.beta == 0.0 and args.beta == 0.0 and trainer.ref_model is not None
    import drgrpo.algorithm.trainer as trainer_module

    seen = []
    original = trainer_module.batch_sequence_kls

    def record(trainer_, output):
        kls = original(trainer_, output)
        seen.append(kls.clone())
        return kls

    generate = trainer._generate_and_score_completions
    outputs = []

    def record_output(inputs):
        output = generate(inputs)
        outputs.append((output["advantages"].clone(), trainer._last_rewards_per_func.clone()))
        return output

    trainer_module.batch_sequence_kls = record
    trainer._generate_and_score_completions = record_output
    try:
        trainer.train()
    finally:
        trainer_module.batch_sequence_kls = original
    assert len(seen) == len(outputs) == 3
    assert torch.all(seen[0].abs() < 1e-5), "at step 0 the policy is the reference: KL must be 0"
    assert seen[-1].abs().max() > 1e-4, "after two updates the policy has moved away from the reference"
    for kls, (advantages, rewards_per_func) in zip(seen, outputs, strict=True):
        rewards = combine_rewards(rewards_per_func, torch.ones(1)) - 0.5 * kls
        assert torch.allclose(advantages, group_advantages(rewards, 4, scale_by_std=False), atol=1e-6)
    assert any("kl_in_reward/sequence_kl_mean" in entry for entry in trainer.state.log_history)
    assert all("kl" not in entry for entry in trainer.state.log_history)  # TRL's loss-side KL stays off


def test_no_reference_model_without_a_kl(tiny_model_path, tmp_path):
    from drgrpo.algorithm.trainer import DrGRPOTrainer

    args = DrGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", dr_grpo=True,
                        per_device_train_batch_size=4, num_generations=4)  # fmt: skip
    dataset = Dataset.from_list([{"prompt": "1+1="}] * 4)
    trainer = DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[digit_share], args=args, train_dataset=dataset)
    assert trainer.ref_model is None and trainer.beta == 0.0
