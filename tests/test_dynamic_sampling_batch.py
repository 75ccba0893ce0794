"""Dynamic sampling, issue 23: padding groups carry no signal whatever the KL and std settings (or the run stops,
`dynamic_sampling_exhausted: raise`), every logged figure and the completions table describe the batch trained on,
drops count drops only, and a rank holds no more rows than it trains on. Issue 30: a padded step is weighted by one
rule under every loss_type, the one TRL applies to all-equal groups without dynamic sampling."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
from datasets import Dataset
from test_dynamic_sampling import GROUP, PER_DEVICE, STEPS_PER_GENERATION, half_constant, make_trainer

from drgrpo.algorithm.advantages import group_advantages
from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.dynamic_sampling import exhausted_message, round_selection
from drgrpo.algorithm.trainer import DrGRPOTrainer
from drgrpo.core.errors import RecipeError

LOCAL_ROWS = PER_DEVICE * STEPS_PER_GENERATION  # one process: the generation batch, 8 groups of 4


def test_round_selection_by_hand():
    informative = [True, False, True, True, False, False]
    assert round_selection(informative, filled=0, target=6, final=False) == ([0, 2, 3], [])  # refill next round
    assert round_selection(informative, filled=4, target=6, final=True) == ([0, 2], [])  # surplus group 3 discarded
    # Rounds ran out with 3 groups missing: the round's 3 informative groups, then none missing; with 5 missing,
    # its first 2 all-equal groups pad the batch.
    assert round_selection(informative, filled=3, target=6, final=True) == ([0, 2, 3], [])
    assert round_selection(informative, filled=1, target=6, final=True) == ([0, 2, 3], [1, 4])


def test_exhausted_message_is_one_line_naming_the_keys():
    message = exhausted_message(4, 3, 16)
    assert (
        "\n" not in message
        and "dynamic_sampling_max_rounds" in message
        and "dynamic_sampling_exhausted: pad" in message
    )


def _record_rounds(trainer) -> list[dict]:
    """Each generation round's all-process rewards and sequence KLs, as `_score_generation` leaves them."""
    rounds, score = [], trainer._score_generation

    def record(inputs):
        output = score(inputs)
        kls = trainer._last_sequence_kls
        rounds.append(
            {"rewards": trainer._last_rewards_per_func[:, 0].clone(), "kls": None if kls is None else kls.clone()}
        )
        return output

    trainer._score_generation = record
    return rounds


@pytest.mark.slow
@pytest.mark.parametrize("scale", ["group", "none"])
def test_padding_groups_get_exactly_zero_advantage(tiny_model_path, addition_data, tmp_path, scale):
    """One round (dynamic_sampling_max_rounds 1): the even-operand prompts' all-equal groups pad the batch. With a KL in
    the reward (0.1) their KL-only spread is not 0 once the policy has moved (the second batch), and std scaling
    (TRL's eps 1e-4) would blow it up: the padding rows must still get advantage 0. They keep their completion mask
    (counted in the normaliser as an all-equal group is, issue 30), and the padding tokens are logged apart."""
    settings = {"dr_grpo": scale == "none", "scale_rewards": scale, "kl_in_reward_coef": 0.1}
    trainer, trained, losses = make_trainer(
        tiny_model_path, addition_data, tmp_path, max_steps=4, dynamic_sampling_max_rounds=1, **settings
    )
    rounds = _record_rounds(trainer)
    trainer.train()
    assert len(trained) == len(rounds) == 2
    for batch in trained:
        output = batch["output"]
        equal = [len(set(batch["rewards"][s : s + GROUP])) == 1 for s in range(0, LOCAL_ROWS, GROUP)]
        assert any(equal) and equal == sorted(equal), "informative groups first, padding after"
        padding = torch.tensor(equal).repeat_interleave(GROUP)
        assert torch.equal(output["advantages"][padding], torch.zeros(int(padding.sum())))
        assert (output["completion_mask"].sum(dim=1) > 0).all(), "a row lost its place in the normaliser"
        assert output["advantages"][~padding].abs().sum() > 0
        assert output["num_items_in_batch"] == output["completion_mask"].sum()
        batch["padding_tokens"] = int(
            (output["prompt_mask"].sum(dim=1) + output["completion_mask"].sum(dim=1))[padding].sum()
        )
    # What the old padding trained on in the second batch: the all-equal groups' advantages from the KL alone.
    second = rounds[1]
    assert second["kls"].abs().max() > 0
    old = group_advantages(second["rewards"] - 0.1 * second["kls"], GROUP, scale_by_std=scale == "group")
    old_equal = [len(set(second["rewards"][s : s + GROUP].tolist())) == 1 for s in range(0, LOCAL_ROWS, GROUP)]
    assert old.view(-1, GROUP)[torch.tensor(old_equal)].abs().max() > 1e-4, "the case cannot tell old from new"
    # The optimizer-step batch and the dr_grpo normaliser's B are unchanged.
    assert all(record["inputs"]["completion_ids"].shape[0] == PER_DEVICE for record in losses)
    logs = [entry for entry in trainer.state.log_history if "dynamic_sampling/groups_padded" in entry]
    assert all(entry["dynamic_sampling/groups_padded"] > 0 for entry in logs)
    assert [entry["dynamic_sampling/padding_tokens"] for entry in logs] == [b["padding_tokens"] for b in trained]
    # Padding groups are not drops: with one round every all-equal group pads the batch.
    assert all(entry["dynamic_sampling/groups_dropped_all_wrong"] == 0 for entry in logs)
    assert all(entry["dynamic_sampling/groups_dropped_all_correct"] == 0 for entry in logs)


@pytest.mark.slow
def test_exhausted_raise_stops_with_one_line(tiny_model_path, addition_data, tmp_path):
    trainer, _, _ = make_trainer(
        tiny_model_path, addition_data, tmp_path, dynamic_sampling_max_rounds=1, dynamic_sampling_exhausted="raise"
    )
    with pytest.raises(
        RecipeError, match=r"dynamic_sampling: 1 generation rounds .* dynamic_sampling_exhausted"
    ) as info:
        trainer.train()
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_logs_and_completions_table_describe_the_trained_batch(tiny_model_path, addition_data, tmp_path):
    trainer, trained, _ = make_trainer(tiny_model_path, addition_data, tmp_path, max_steps=4, log_completions=True)
    trainer.train()
    assert len(trained) == 2
    history = {entry["step"]: entry for entry in trainer.state.log_history if "loss" in entry}
    # 2 optimizer steps per generation batch: the batches' figures are logged at steps 1 and 3.
    trained_tokens = 0
    for step, batch in zip((1, 3), trained, strict=True):
        entry, output = history[step], batch["output"]
        rewards = torch.tensor(batch["rewards"])
        assert entry["reward"] == pytest.approx(rewards.mean().item(), abs=1e-6)
        assert entry["frac_reward_zero_std"] == 0.0  # every trained group has spread
        assert entry["reward_std"] == pytest.approx(rewards.std().item(), abs=1e-6)
        # All rounds' figures have their own names; the dropped even-operand groups scored 0, so they are lower.
        assert entry["dynamic_sampling/generated_reward"] < entry["reward"]
        assert entry["dynamic_sampling/generated_frac_reward_zero_std"] > 0
        lengths = output["completion_mask"].sum(dim=1).float()
        assert entry["completions/mean_length"] == pytest.approx(lengths.mean().item())
        trained_tokens += int(output["prompt_mask"].sum() + output["completion_mask"].sum())
        assert entry["num_tokens"] == trained_tokens
        assert entry["dynamic_sampling/generated_num_tokens"] > entry["num_tokens"]
        # The completions table holds the trained rows, in the batch's order, with the advantages trained on.
        table = pd.read_parquet(tmp_path / "completions" / f"completions_{step:05d}.parquet")
        assert len(table) == LOCAL_ROWS
        assert table["half_constant"].tolist() == pytest.approx(batch["rewards"])
        assert table["advantage"].tolist() == pytest.approx(output["advantages"].tolist(), abs=1e-6)
        assert [p.strip() for p in table["prompt"]] == [p.strip() for p in batch["prompts"]]
        assert all(int(p.split("+")[0]) % 2 == 1 for p in table["prompt"]), "a dropped prompt's row in the table"
    assert any(entry["dynamic_sampling/rounds"] > 1 for entry in history.values() if "dynamic_sampling/rounds" in entry)
    # The rank kept only the rows it trains on, not every round's rows (the old sampler held rounds x 32).
    assert trainer._dynamic_sampler.rows_held_peak == LOCAL_ROWS
    assert not math.isnan(history[1]["diag/truncation_rate"])


@pytest.mark.parametrize("loss_type", ["dr_grpo", "grpo", "dapo", "bnpo"])
def test_a_padded_step_gets_the_informative_rows_gradient_scaled_by_their_share(
    tiny_model_path, addition_data, tmp_path, loss_type
):
    """docs/grpo-family.md's rule: padding (advantage 0) counts in every loss_type's normaliser, so a step whose
    normaliser is a share p padding gets (1 - p) of the gradient its informative rows give as a batch of their own: p
    of the rows under dr_grpo and grpo, of the tokens under dapo and bnpo (one micro-batch here)."""
    rows = [json.loads(line) for line in open(addition_data["train"])][:8]
    prompts = [r["question"] for r in rows if int(r["question"].split("+")[0]) % 2 == 0][:2]
    prompts += [r["question"] for r in rows if int(r["question"].split("+")[0]) % 2 == 1][:2]
    args = DrGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", per_device_train_batch_size=16,
        num_generations=GROUP, max_completion_length=6, seed=5, dynamic_sampling=True, dynamic_sampling_max_rounds=1,
        diagnostics_warnings=False, **({"dr_grpo": True} if loss_type == "dr_grpo" else {"loss_type": loss_type}),
    )  # fmt: skip
    dataset = Dataset.from_list([{"prompt": p} for p in prompts])
    trainer = DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[half_constant], args=args, train_dataset=dataset)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    batch = trainer._generate_and_score_completions([{"prompt": p} for p in prompts for _ in range(GROUP)])
    rewards = trainer._last_rewards_per_func[:, 0].view(-1, GROUP)
    padding = (rewards == rewards[:, :1]).all(dim=1).repeat_interleave(GROUP)
    assert 0 < int(padding.sum()) < len(padding), "the case needs padding and informative rows"

    def gradient(inputs: dict) -> torch.Tensor:
        trainer.model.zero_grad()
        trainer._compute_loss(trainer.model, inputs).backward()
        return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])

    informative = {k: v[~padding] if torch.is_tensor(v) and v.dim() > 0 else v for k, v in batch.items()}
    informative["num_items_in_batch"] = informative["completion_mask"].sum()
    # Each completion's own tokens, up to its first end-of-sequence token (TRL's mask), whatever mask the batch carries.
    stops = torch.isin(batch["completion_ids"], torch.tensor(trainer.eos_token_ids))
    width = batch["completion_ids"].size(1)
    tokens = torch.where(stops.any(dim=1), stops.int().argmax(dim=1) + 1, width).float()
    assert torch.equal(batch["completion_mask"].sum(dim=1).float(), tokens), "padding rows left the normaliser"
    share = padding.float().mean() if loss_type in ("dr_grpo", "grpo") else tokens[padding].sum() / tokens.sum()
    full, alone = gradient(batch), gradient(informative)
    assert alone.abs().max() > 0
    assert torch.allclose(full, (1 - share) * alone, rtol=1e-4, atol=1e-7), (loss_type, float(share))
