"""The CPU engine's `sampling/` metrics mean what TRL's mean (issue 53): the weight TRL applies (after truncation or
masking; per completion in the sequence modes), once per generation batch, per rank and then over ranks as TRL
reduces them; the ratio before truncation and the share truncated are the engine's own, under `engine/sampler_ratio/`.

TRL's figures are written out here from TRL 1.16's `GRPOTrainer._generate_and_score_completions` (the lines after
"if self.use_vllm and self.vllm_importance_sampling_correction:" that fill `self._metrics[mode]["sampling/..."]`)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from datasets import Dataset

from drgrpo.algorithm.sampler_correction import (
    engine_ratio_metrics,
    local_figures,
    merge_figures,
    sampler_weights,
    trl_sampling_metrics,
)

LEARNER = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -3.0, 0.0]])
SAMPLER = torch.tensor([[-1.5, -1.0, -0.5], [-0.1, -0.5, 0.0]])  # differences 0.5, -1.0, 0; 0, -2.5, (masked)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
E = math.exp


def metrics_of(result) -> dict[str, float]:
    ranks = local_figures(result.logp_difference, result.applied, result.ratios, result.changed).unsqueeze(0)
    return {**trl_sampling_metrics(ranks), **engine_ratio_metrics(ranks)}


def test_token_truncate_logs_the_weight_applied_and_the_ratio_before_apart():
    logged = metrics_of(sampler_weights(LEARNER, SAMPLER, MASK, "token_truncate", None, 1.5))
    applied = [1.5, E(-1.0), 1.0, 1.0, E(-2.5)]  # exp(0.5) = 1.65 truncated to 1.5
    assert logged["sampling/importance_sampling_ratio/max"] == pytest.approx(1.5)
    assert logged["sampling/importance_sampling_ratio/mean"] == pytest.approx(sum(applied) / 5)
    assert logged["sampling/importance_sampling_ratio/min"] == pytest.approx(E(-2.5))
    assert logged["sampling/sampling_logp_difference/mean"] == pytest.approx((0.5 + 1.0 + 2.5) / 5)
    assert logged["sampling/sampling_logp_difference/max"] == pytest.approx(2.5)
    assert logged["engine/sampler_ratio/max"] == pytest.approx(E(0.5))
    assert logged["engine/sampler_ratio/mean"] == pytest.approx((E(0.5) + E(-1.0) + 2 + E(-2.5)) / 5)
    assert logged["engine/sampler_ratio/truncated_share"] == pytest.approx(1 / 5)


def test_the_sequence_modes_log_one_weight_per_completion():
    truncated = metrics_of(sampler_weights(LEARNER, SAMPLER, MASK, "sequence_truncate", None, 3.0))
    assert truncated["sampling/importance_sampling_ratio/mean"] == pytest.approx((E(-0.5) + E(-2.5)) / 2)
    assert truncated["sampling/importance_sampling_ratio/min"] == pytest.approx(E(-2.5))
    assert truncated["engine/sampler_ratio/truncated_share"] == 0.0
    masked = metrics_of(sampler_weights(LEARNER, SAMPLER, MASK, "sequence_mask", 0.1, 3.0))
    assert masked["sampling/importance_sampling_ratio/min"] == 0.0  # e^-2.5 = 0.08 < 0.1: masked to 0, as applied
    assert masked["sampling/importance_sampling_ratio/mean"] == pytest.approx(E(-0.5) / 2)
    assert masked["engine/sampler_ratio/min"] == pytest.approx(E(-2.5))
    assert masked["engine/sampler_ratio/truncated_share"] == pytest.approx(1 / 2)
    # The log-prob differences stay per token in every mode, as in TRL.
    assert masked["sampling/sampling_logp_difference/mean"] == pytest.approx(0.8)


def test_micro_batches_add_up_and_ranks_reduce_as_trl_reduces_them():
    first = sampler_weights(LEARNER[:1], SAMPLER[:1], MASK[:1], "token_truncate", None, 1.5)
    second = sampler_weights(LEARNER[1:], SAMPLER[1:], MASK[1:], "token_truncate", None, 1.5)
    whole = sampler_weights(LEARNER, SAMPLER, MASK, "token_truncate", None, 1.5)

    def figures(result):
        return local_figures(result.logp_difference, result.applied, result.ratios, result.changed)

    assert torch.allclose(merge_figures(figures(first), figures(second)), figures(whole))
    # Two ranks: TRL averages the ranks' means (3 tokens and 2 here), takes the extremes of their extremes.
    ranks = torch.stack([figures(first), figures(second)])
    logged = trl_sampling_metrics(ranks)
    means = [(1.5 + E(-1.0) + 1.0) / 3, (1.0 + E(-2.5)) / 2]
    assert logged["sampling/importance_sampling_ratio/mean"] == pytest.approx(sum(means) / 2)
    assert logged["sampling/sampling_logp_difference/mean"] == pytest.approx((1.5 / 3 + 2.5 / 2) / 2)
    # A rank without a token gives TRL's 0 (torch.tensor(0.0)), which takes part in the reduction.
    empty = local_figures(torch.zeros(0), torch.zeros(0))
    logged = trl_sampling_metrics(torch.stack([figures(whole), empty]))
    assert logged["sampling/importance_sampling_ratio/min"] == 0.0


def trl_figures(steps: list[list[tuple]], mode: str, clip_min, clip_max) -> list[dict[str, float]]:
    """TRL 1.16's figures for each generation batch (one rank), written from its source: the batch's learner and
    sampler log-probs and mask, its weight applied (clamped or masked), over masked tokens or per completion."""
    figures = []
    for micro_batches in steps:
        width = max(learner.shape[1] for learner, _, _ in micro_batches)

        def pad(tensor: torch.Tensor, width: int = width) -> torch.Tensor:  # TRL pads the batch to its widest
            return torch.nn.functional.pad(tensor.float(), (0, width - tensor.shape[1]))

        old = torch.cat([pad(learner) for learner, _, _ in micro_batches])
        sampling = torch.cat([pad(sampler) for _, sampler, _ in micro_batches])
        completion_mask = torch.cat([pad(mask) for _, _, mask in micro_batches])
        diff = torch.nan_to_num((old - sampling) * completion_mask, nan=0.0)
        sequence_level_is = mode in ["sequence_mask", "sequence_truncate"]
        ratio = torch.exp(diff.sum(dim=-1, keepdim=True) if sequence_level_is else diff)
        if mode in ["sequence_truncate", "token_truncate"]:
            ratio = torch.clamp(ratio, min=clip_min, max=clip_max)
        else:
            low = clip_min if clip_min is not None else -math.inf
            high = clip_max if clip_max is not None else math.inf
            ratio = ratio.masked_fill((ratio < low) | (ratio > high), value=0.0)
        delta = torch.abs(old - sampling)
        mask = completion_mask.bool()
        delta = delta[mask & ~torch.isnan(delta)]
        flat = ratio.flatten() if sequence_level_is else ratio[mask]
        figures.append(
            {
                "sampling/sampling_logp_difference/mean": delta.mean().item(),
                "sampling/sampling_logp_difference/max": delta.max().item(),
                "sampling/importance_sampling_ratio/min": flat.min().item(),
                "sampling/importance_sampling_ratio/mean": flat.mean().item(),
                "sampling/importance_sampling_ratio/max": flat.max().item(),
            }
        )
    return figures


@pytest.mark.parametrize("mode, clip_min, clip_max", [("token_truncate", None, 1.0), ("sequence_mask", 0.999, 1.001)])
def test_a_training_run_logs_trls_figures_of_each_generation_batch(
    tiny_model_path, addition_data, tmp_path, monkeypatch, mode, clip_min, clip_max
):
    """A bf16 run (its samples off-policy) of 2 steps of 2 micro-batches, with a cap that bites: each step's
    `sampling/` figures are TRL's for that step's whole generation batch."""
    from rank_probe import digit_reward

    from drgrpo.algorithm import trainer as trainer_module
    from drgrpo.algorithm.config import DrGRPOConfig
    from drgrpo.algorithm.trainer import DrGRPOTrainer

    rows = [json.loads(line) for line in open(addition_data["train"])][:16]
    dataset = Dataset.from_list([{"prompt": r["question"], "answer": r["answer"]} for r in rows])
    args = DrGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=True, report_to="none", save_strategy="no", max_steps=2,
        per_device_train_batch_size=4, gradient_accumulation_steps=2, num_generations=4, max_completion_length=6,
        logging_steps=1, seed=5, dr_grpo=True, temperature=1.0, vllm_importance_sampling_mode=mode,
        vllm_importance_sampling_clip_min=clip_min, vllm_importance_sampling_clip_max=clip_max,
    )  # fmt: skip
    trainer = DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[digit_reward], args=args, train_dataset=dataset)
    seen: list[tuple] = []
    real = trainer_module.sampler_weights

    def spy(learner, sampler, mask, *rest):
        seen.append((learner.detach().clone(), sampler.clone(), mask.clone()))
        return real(learner, sampler, mask, *rest)

    monkeypatch.setattr(trainer_module, "sampler_weights", spy)
    trainer.train()
    assert len(seen) == 4  # 2 steps x 2 micro-batches, each once
    expected = trl_figures([seen[:2], seen[2:]], mode, clip_min, clip_max)
    for name in expected[0]:
        logged = [entry[name] for entry in trainer.state.log_history if name in entry]
        assert logged == pytest.approx([figures[name] for figures in expected], abs=1e-6), name
    ratios = [
        entry["engine/sampler_ratio/max"] for entry in trainer.state.log_history if "engine/sampler_ratio/max" in entry
    ]
    shares = [
        e["engine/sampler_ratio/truncated_share"]
        for e in trainer.state.log_history
        if "engine/sampler_ratio/truncated_share" in e
    ]
    assert max(ratios) > clip_max and max(shares) > 0  # the cap bit: the ratio before it is the engine's own figure


@pytest.mark.parametrize("mode, clip_min, clip_max", [("token_truncate", None, 1.5), ("sequence_mask", 0.1, 3.0)])
def test_a_dynamic_sampling_batch_from_vllm_logs_trls_figures(mode, clip_min, clip_max):
    """`batch_logs.sampling_metrics` (vLLM's samples, a batch assembled by dynamic sampling) reduces with the same
    function: TRL's figures of the batch."""
    from types import SimpleNamespace

    from drgrpo.algorithm.batch_logs import sampling_metrics

    weights = sampler_weights(LEARNER, SAMPLER, MASK, mode, clip_min, clip_max).weights  # TRL's ratio, as applied
    batch = {
        "old_per_token_logps": LEARNER, "sampling_per_token_logps": SAMPLER, "completion_mask": MASK,
        "importance_sampling_ratio": weights,
    }  # fmt: skip
    trainer = SimpleNamespace(accelerator=SimpleNamespace(gather=lambda t: t), vllm_importance_sampling_mode=mode)
    expected = trl_figures([[(LEARNER, SAMPLER, MASK)]], mode, clip_min, clip_max)[0]
    assert sampling_metrics(trainer, batch) == pytest.approx(expected, abs=1e-6)
