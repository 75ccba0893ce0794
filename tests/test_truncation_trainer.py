"""DrGRPOTrainer applies the truncation rule as tests/test_truncation_property.py composes it (issue 30).

A real trainer on the tiny model generates (cut at 3 tokens, so most completions are truncated and some end), two
scripted rewards score them (every answer wrong; a bonus in (0.5, 1) that is sometimes None) and, with a KL in the
reward, a scripted sequence KL penalises the truncated completions least, the case that broke the promise. The
trainer's advantages must equal the property test's composition, and no truncated completion may end above one
that ended. Under TRL's batch scaling and normalize_then_sum the trainer keeps TRL's advantages: they must equal the
property test's transcription of TRL's code (`trl_advantages`).
"""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset
from test_truncation_property import trained_advantages, trl_advantages, violations

from drgrpo.algorithm import trainer as trainer_module
from drgrpo.algorithm.advantages import truncated_completions
from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.trainer import DrGRPOTrainer

GROUP = 8
RANGES = ((0.0, 1.0), (0.5, 1.0))


class Scripted:
    """The two reward functions; they record what they returned (NaN for None), in TRL's row order."""

    def __init__(self) -> None:
        self.scores: list[list[float]] = []
        self.stops: list[int] = []  # the trainer's stop tokens, set once it is built

        def wrong(completions, **kwargs) -> list[float]:
            return [0.0] * len(completions)

        def bonus(completions, completion_ids, **kwargs) -> list[float | None]:
            """None for every other completion that ended (the case that fell below the floor), else 0.6-0.9."""
            ended = [bool(ids) and ids[-1] in self.stops for ids in completion_ids]
            values = [None if end and i % 2 else 0.6 + 0.1 * (i % 4) for i, end in enumerate(ended)]
            self.scores = [[0.0, math.nan if v is None else v] for v in values]
            return values

        wrong.reward_range, bonus.reward_range = RANGES
        self.funcs = [wrong, bonus]


def cut_off(trainer: DrGRPOTrainer, output: dict) -> torch.Tensor:
    """Which completions of a generation output were truncated, by TRL's rule (one process: every row)."""
    stops = [*trainer.eos_token_ids, trainer._tokenizer.pad_token_id]
    rows = zip(output["completion_ids"], output["completion_mask"], strict=True)
    return truncated_completions([ids[mask.bool()].tolist() for ids, mask in rows], stops)


@pytest.mark.parametrize(
    "keys",
    [
        {"kl_in_reward_coef": 0.1, "kl_estimator": "k3", "scale_rewards": "group"},
        {"kl_in_reward_coef": 0.1, "kl_estimator": "k1", "advantage_estimator": "leave_one_out", "dr_grpo": True},
        {"scale_rewards": "batch"},
        {"multi_objective_aggregation": "normalize_then_sum"},
    ],
    ids=["kl-group-std", "kl-leave-one-out-dr-grpo", "trl-batch", "trl-normalize-then-sum"],
)
def test_trainer_advantages_follow_the_rule(tiny_model_path, tmp_path, monkeypatch, keys):
    prompts = [f"{a}+{b}=" for a, b in ((12, 29), (47, 38), (55, 17), (68, 24))]
    dataset = Dataset.from_list([{"prompt": p} for p in prompts])
    # seed 11: under issue 53's draw its groups mix truncated and ended completions, an ended one without a score
    args = DrGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", num_generations=GROUP,
        per_device_train_batch_size=len(prompts) * GROUP, max_completion_length=3, temperature=1.0, seed=11,
        zero_reward_for_truncated=True, **keys,
    )  # fmt: skip
    scripted = Scripted()
    trainer = DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=scripted.funcs, args=args, train_dataset=dataset)
    scripted.stops = [*trainer.eos_token_ids, trainer._tokenizer.pad_token_id]
    kls: dict[str, torch.Tensor] = {}

    def sequence_kls(trainer_, output):  # truncated completions penalised least: 2 against 5 (k3) / -2 against 0.5
        low, high = (2.0, 5.0) if args.kl_estimator == "k3" else (-2.0, 0.5)
        kls["value"] = torch.where(cut_off(trainer_, output), low, high)
        return kls["value"]

    monkeypatch.setattr(trainer_module, "batch_sequence_kls", sequence_kls)
    trainer.model.train()
    output = trainer._generate_and_score_completions([{"prompt": p} for p in prompts for _ in range(GROUP)])
    truncated = cut_off(trainer, output)
    mixed = truncated.view(-1, GROUP).any(dim=1) & ~truncated.view(-1, GROUP).all(dim=1)
    assert mixed.any(), "no group with both truncated and ended completions: the case is not exercised"
    assert torch.tensor(scripted.scores)[~truncated, 1].isnan().any(), "no ended completion lacks a score"
    scores = torch.tensor(scripted.scores)
    expected = trained_advantages(
        trainer.args, scores, truncated, kls.get("value", torch.zeros(len(scores))), GROUP, RANGES
    )
    assert output["advantages"].tolist() == pytest.approx(expected.tolist(), abs=1e-5)
    assert not violations(output["advantages"], scores, truncated, GROUP)
    if args.trl_advantage_scaling is not None:
        weights = torch.ones(2)
        trl = trl_advantages(
            trainer._last_rewards_per_func, weights, GROUP, args.scale_rewards, args.multi_objective_aggregation
        )
        assert output["advantages"].tolist() == pytest.approx(trl.tolist(), abs=1e-6)
