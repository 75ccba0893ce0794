"""The loss forward with each prompt run once (drgrpo/algorithm/shared_prompt.py): the same log-probs, entropies and
gradients as TRL's forward over every row; micro-batches grouped by prompt; the first update's ratio exactly 1."""

from __future__ import annotations

import json

import pytest
import torch
from datasets import Dataset

from drgrpo.algorithm.padding import bucket_micro_batches
from drgrpo.algorithm.shared_prompt import prompt_groups, shared_prompt_forward, shares_prompts


def test_prompt_groups_number_distinct_prompts_in_order_of_first_row():
    ids = torch.tensor([[0, 5, 6], [7, 8, 9], [0, 5, 6], [0, 0, 6], [7, 8, 9]])
    mask = (ids != 0).long()
    first, rows = prompt_groups(ids, mask)
    assert first.tolist() == [0, 1, 3] and rows.tolist() == [0, 1, 0, 2, 1]


@pytest.fixture(scope="module")
def fused_tiny(tiny_model_path):
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    return model


def rows_of(prompts: list[list[int]], completions: list[list[int]], pad: int):
    """Left-padded prompts, right-padded completions, as TRL lays out a loss micro-batch."""
    width, length = max(map(len, prompts)), max(map(len, completions))
    ids = torch.full((len(prompts), width + length), pad)
    mask = torch.zeros_like(ids)
    for row, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        ids[row, width - len(prompt) : width] = torch.tensor(prompt)
        ids[row, width : width + len(completion)] = torch.tensor(completion)
        mask[row, width - len(prompt) : width + len(completion)] = 1
    return ids, mask, length


def test_the_shared_forward_is_trls_forward_with_its_gradients(fused_tiny):
    model = fused_tiny
    torch.manual_seed(0)
    prompts = [[5, 9, 12, 40, 41], [5, 9, 12, 40, 41], [60, 61, 62], [5, 9, 12, 40, 41], [60, 61, 62]]
    completions = [torch.randint(10, 100, (n,)).tolist() for n in (4, 7, 2, 6, 5)]
    ids, mask, length = rows_of(prompts, completions, pad=0)
    assert shares_prompts(model, ids, mask, length)
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-length] = -100

    def run(shared: bool):
        model.zero_grad()
        if shared:
            out = shared_prompt_forward(model, ids, mask, length)
        else:
            out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        logps, entropy = out.log_probs[:, -length:], out.entropy[:, -length:]
        weights = torch.linspace(0.5, 2.0, logps.numel()).view_as(logps)
        (logps * weights * mask[:, -length:]).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return logps.detach(), entropy.detach(), grads

    trl_logps, trl_entropy, trl_grads = run(False)
    logps, entropy, grads = run(True)
    valid = mask[:, -length:].bool()
    assert torch.allclose(logps[valid], trl_logps[valid], atol=1e-5)
    assert torch.allclose(entropy[valid], trl_entropy[valid], atol=1e-5)
    assert grads.keys() == trl_grads.keys()
    for name, grad in grads.items():
        assert torch.allclose(grad, trl_grads[name], atol=1e-5, rtol=1e-4), name


def test_an_optimizer_step_is_grouped_by_prompt_then_by_length():
    prompts = torch.tensor([[1, 2], [3, 4], [1, 2], [3, 4], [1, 2], [3, 4]])
    lengths = [5, 1, 2, 4, 3, 6]
    completion_mask = torch.tensor([[1] * n + [0] * (6 - n) for n in lengths])
    batch = {
        "prompt_ids": prompts, "prompt_mask": torch.ones_like(prompts), "completion_ids": completion_mask * 7,
        "completion_mask": completion_mask, "advantages": torch.arange(6.0),
    }  # fmt: skip
    halves = [{k: v[i : i + 3] for k, v in batch.items()} for i in (0, 3)]
    grouped = bucket_micro_batches(halves, 2, sort=True, by_prompt=True)
    assert [b["prompt_ids"][:, 0].tolist() for b in grouped] == [[1, 1, 1], [3, 3, 3]]
    assert [b["completion_mask"].sum(1).tolist() for b in grouped] == [[2, 3, 5], [1, 4, 6]]
    assert [b["completion_mask"].size(1) for b in grouped] == [5, 6]  # each cut to its own longest


def test_a_step_with_shared_prompts_trains_as_trls_forward_does(tiny_model_path, addition_data, tmp_path):
    """One SGD step of the tiny model with the key on and off: the same rollouts (same seeds), the same gradient and
    weights after it; the first update's ratio is exactly 1 with the key on; the shared path really ran."""
    from rank_probe import digit_reward

    from drgrpo.algorithm.config import DrGRPOConfig
    from drgrpo.algorithm.trainer import DrGRPOTrainer

    rows = [json.loads(line) for line in open(addition_data["train"])][:8]
    dataset = Dataset.from_list([{"prompt": r["question"], "answer": r["answer"]} for r in rows])

    def trained(folder: str, share: bool, **extra):
        args = DrGRPOConfig(
            output_dir=str(tmp_path / folder), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
            max_steps=1, per_device_train_batch_size=4, gradient_accumulation_steps=4, num_generations=4,
            max_completion_length=8, dr_grpo=True, seed=1, learning_rate=1.0, optim="sgd", logging_steps=1,
            share_prompt_forward=share, extra_eos_tokens=[*"0123456789"],
            **{"gradient_checkpointing": False, **extra},
        )  # fmt: skip
        trainer = DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[digit_reward], args=args,
                                train_dataset=dataset)  # fmt: skip
        calls = []
        shared = trainer._shared_prompt_logps
        trainer._shared_prompt_logps = lambda *a, **k: calls.append(result := shared(*a, **k)) or result
        trainer.train()
        return trainer, [c is not None for c in calls]

    plain, plain_calls = trained("plain", False)
    fast, fast_calls = trained("fast", True)
    assert not any(plain_calls) and all(fast_calls) and len(fast_calls) == 4
    checkpointed, calls = trained("checkpointed", True, gradient_checkpointing=True)
    assert not any(calls)  # transformers drops a checkpointed layer's cache: TRL's forward runs
    assert plain.state.log_history[0]["grad_norm"] > 0
    assert fast.state.log_history[0]["grad_norm"] == pytest.approx(plain.state.log_history[0]["grad_norm"], rel=1e-4)
    for (name, a), b in zip(plain.model.named_parameters(), fast.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5), name


def test_select_rows_is_transformers_selection_with_a_backward_that_repeats_its_bits(two_torch_threads):
    # CPU `index_put_` (the indexing's backward) accumulates with parallel atomics only at 2 threads or more.
    from transformers import DynamicCache

    from drgrpo.algorithm.shared_prompt import select_rows

    torch.manual_seed(0)
    keys, values = torch.randn(2, 3, 48, 64), torch.randn(2, 3, 48, 64)
    rows = torch.tensor([0, 0, 0, 0, 1, 1, 1, 0])
    grad = torch.randn(8, 3, 48, 64)
    reference = DynamicCache()
    reference.update(keys, values, layer_idx=0)
    reference.batch_select_indices(rows)
    gradients = set()
    for _ in range(40):
        k, v = keys.clone().requires_grad_(), values.clone().requires_grad_()
        cache = DynamicCache()
        cache.update(k, v, layer_idx=0)
        select_rows(cache, rows)
        assert torch.equal(cache.layers[0].keys, reference.layers[0].keys)
        assert torch.equal(cache.layers[0].values, reference.layers[0].values)
        (cache.layers[0].keys * grad).sum().backward()
        gradients.add(k.grad.numpy().tobytes())
    assert len(gradients) == 1


def test_the_shared_forward_gives_the_same_gradients_every_time_at_two_threads(fused_tiny, two_torch_threads):
    """16 rows on 2 prompts of 65 tokens: each layer's selected cache holds 65,536 keys, past the size where the
    index's backward went parallel (two runs of the SmolLM2 demo's step 2 differed in 265 of 272 gradients)."""
    model = fused_tiny
    torch.manual_seed(1)
    prompts = [torch.randint(10, 100, (65,)).tolist() for _ in range(2)]
    completions = [torch.randint(10, 100, (n,)).tolist() for n in torch.randint(2, 8, (16,)).tolist()]
    ids, mask, length = rows_of([prompts[row % 2] for row in range(16)], completions, pad=0)
    gradients = set()
    for _ in range(24):
        model.zero_grad()
        out = shared_prompt_forward(model, ids, mask, length)
        (out.log_probs * torch.linspace(-1, 1, out.log_probs.numel()).view_as(out.log_probs)).sum().backward()
        gradients.add(b"".join(p.grad.numpy().tobytes() for p in model.parameters() if p.grad is not None))
    model.zero_grad()
    assert len(gradients) == 1


def test_select_rows_keeps_transformers_selection_off_the_cpu(monkeypatch):
    """On CUDA `index_select`'s backward is the nondeterministic one and the indexing's is sorted: kept as it was."""
    from transformers import DynamicCache

    from drgrpo.algorithm.shared_prompt import select_rows

    called = []
    monkeypatch.setattr(DynamicCache, "batch_select_indices", lambda self, rows: called.append(rows.device.type))
    cache = DynamicCache()
    cache.update(torch.zeros(2, 1, 3, 4, device="meta"), torch.zeros(2, 1, 3, 4, device="meta"), layer_idx=0)
    select_rows(cache, torch.tensor([0, 0, 1], device="meta"))
    assert called == ["meta"]
    select_rows(DynamicCache(), torch.tensor([0, 0, 1]))
    assert called == ["meta"]  # on CPU its own path
