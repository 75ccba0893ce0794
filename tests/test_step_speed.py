"""Less waste per step (issue 29): completions sorted by length within an optimizer step and cut to their
micro-batch's width (drgrpo/algorithm/padding.py), and TRL's fused LM head scoring only completion positions on CPU
(drgrpo/algorithm/step_speed.py). Each must leave the step's gradient as it was."""

from __future__ import annotations

import json

import pytest
import torch

from drgrpo.algorithm.padding import bucket_micro_batches, sort_within_steps, trim_padding, trimmable


def _micro_batch(completion_lengths: list[int], width: int = 6, prompt_width: int = 3, offset: int = 0) -> dict:
    rows = len(completion_lengths)
    completion_mask = torch.tensor([[1] * n + [0] * (width - n) for n in completion_lengths])
    return {
        "prompt_ids": torch.arange(rows * prompt_width).view(rows, prompt_width) + 100 * offset,
        "prompt_mask": torch.ones(rows, prompt_width, dtype=torch.long),
        "completion_ids": torch.arange(rows * width).view(rows, width) + 1000 * offset,
        "completion_mask": completion_mask,
        "old_per_token_logps": -torch.rand(rows, width),
        "advantages": torch.arange(rows, dtype=torch.float) + 10 * offset,
        "num_items_in_batch": torch.tensor(99),
    }


def test_trim_cuts_the_completion_columns_that_are_padding_in_every_row():
    batch = _micro_batch([2, 4, 1])
    trimmed = trim_padding(batch)
    assert trimmed["completion_ids"].shape == (3, 4) and trimmed["completion_mask"].shape == (3, 4)
    assert trimmed["old_per_token_logps"].shape == (3, 4)
    assert torch.equal(trimmed["completion_ids"], batch["completion_ids"][:, :4])
    assert torch.equal(trimmed["prompt_ids"], batch["prompt_ids"])  # prompt columns stay (positions count from 0)
    assert trimmed["num_items_in_batch"] is batch["num_items_in_batch"]
    assert trim_padding(_micro_batch([0, 0]))["completion_ids"].shape == (2, 1)  # at least one column


def test_sort_orders_each_step_by_length_and_keeps_rows_in_their_step():
    steps = [_micro_batch([5, 1], offset=0), _micro_batch([2, 6], offset=1), _micro_batch([3, 4], offset=2),
             _micro_batch([1, 1], offset=3)]  # fmt: skip
    out = sort_within_steps(steps, micro_batches_per_step=2)
    lengths = [b["completion_mask"].sum(1).tolist() for b in out]
    assert lengths == [[1, 2], [5, 6], [1, 1], [3, 4]]  # step 1 = micro-batches 0-1, step 2 = 2-3
    assert [b["advantages"].tolist() for b in out] == [[1.0, 10.0], [0.0, 11.0], [30.0, 31.0], [20.0, 21.0]]
    # every row kept its own tensors
    for batch in out:
        for row in range(2):
            source = int(batch["completion_ids"][row, 0]) // 1000
            assert int(batch["advantages"][row]) // 10 == source


def test_bucketing_leaves_unknown_batches_alone():
    batch = {**_micro_batch([1, 2]), "pixel_values": torch.zeros(2, 3)}
    assert not trimmable(batch)
    assert bucket_micro_batches([batch], 1, sort=True) == [batch]
    cut = bucket_micro_batches([_micro_batch([1, 2]), _micro_batch([6, 1])], 2, sort=True)
    assert [b["completion_ids"].shape[1] for b in cut] == [1, 6]
    unsorted = bucket_micro_batches([_micro_batch([1, 2]), _micro_batch([6, 1])], 2, sort=False)
    assert [b["completion_ids"].shape[1] for b in unsorted] == [2, 6]


def _trained(tmp_path, tiny_model_path, addition_data, **overrides):
    from datasets import Dataset

    from drgrpo.algorithm.config import DrGRPOConfig
    from drgrpo.algorithm.trainer import DrGRPOTrainer
    from rewards import get_reward_funcs

    torch.manual_seed(0)
    rows = [json.loads(line) for line in addition_data["train"].read_text().splitlines()][:32]
    dataset = Dataset.from_list([{"prompt": r["question"], "answer": r["answer"]} for r in rows])
    settings = dict(
        output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
        max_steps=1, per_device_train_batch_size=4, gradient_accumulation_steps=4, num_generations=4,
        max_completion_length=16, dr_grpo=True, seed=0, learning_rate=1.0, optim="sgd", logging_steps=1,
        disable_tqdm=True,
        temperature=1.0, extra_eos_tokens=[*"0123456789", " "],  # the random model's answers end at varied lengths
    )  # fmt: skip
    settings.update(overrides)
    trainer = DrGRPOTrainer(
        model=str(tiny_model_path), reward_funcs=get_reward_funcs(["tests/fixtures/digit_share.py:digit_share"]),
        args=DrGRPOConfig(**settings), train_dataset=dataset,
    )  # fmt: skip
    widths = []
    compute_loss = trainer._compute_loss

    def record(model, inputs):
        widths.append(inputs["completion_ids"].shape[1])
        return compute_loss(model, inputs)

    trainer._compute_loss = record
    trainer.train()
    return trainer, widths


@pytest.mark.parametrize("loss_type", ["dr_grpo", "bnpo"])
def test_sorting_cutting_and_the_compact_head_leave_the_step_unchanged(
    tmp_path, tiny_model_path, addition_data, loss_type
):
    """One optimizer step of the tiny model, the same rollouts (same seed): the gradient (SGD at learning rate 1, so
    the weights after the step are the weights minus it) agrees with and without the speed keys; the micro-batches
    were actually narrower. (Under Adam the first step is ~lr x sign(g), which turns float rounding of near-zero
    gradient entries into lr-sized differences.)"""
    extra = {} if loss_type == "dr_grpo" else {"dr_grpo": False, "loss_type": "bnpo"}
    plain, plain_widths = _trained(
        tmp_path / "plain", tiny_model_path, addition_data, sort_by_length=False, compact_lm_head=False, **extra
    )
    fast, fast_widths = _trained(tmp_path / "fast", tiny_model_path, addition_data, **extra)
    assert len(set(plain_widths)) == 1 and sum(fast_widths) < sum(plain_widths), (plain_widths, fast_widths)
    assert plain.state.log_history[0]["grad_norm"] > 0
    assert plain.state.log_history[0]["grad_norm"] == pytest.approx(fast.state.log_history[0]["grad_norm"], rel=1e-4)
    for (name, a), b in zip(plain.model.named_parameters(), fast.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5), name
