"""`zero_reward_for_truncated` with the recipe's `extra_eos_tokens` (issue 42): an answer that ends in an extra end
token (`</answer>` here; `<|im_end|>` on a base model whose eos is `<|endoftext|>`) ended, so it keeps its reward.

The trainer's truncation rule must read the same stop list as TRL's completion mask (`trainer.eos_token_ids`, which
the extra tokens joined, and the pad token): built from the tokenizer's eos alone, every right answer ending in an
extra token would be called truncated and scored 0. The generation is scripted through the CPU engine's seam, so
each case (ended by the extra token, ended by eos, cut at the budget, wrong) is there on purpose.
"""

from __future__ import annotations

import pytest
from datasets import Dataset

from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.rollout.engine import Sampled
from drgrpo.algorithm.trainer import DrGRPOTrainer
from drgrpo.observe import metric_names

GROUP = 4
BUDGET = 8
# Per group: (text, end token or None, right, truncated); the budget row fills max_completion_length with no end.
SCRIPT = [("42", "</answer>", True, False), ("42", "<|im_end|>", True, False), ("42" * 4, None, True, True),
          ("17", "</answer>", False, False)]  # fmt: skip


def right_answer(completions, answer, **kwargs) -> list[float]:
    return [1.0 if text.strip().startswith(str(a)) else 0.0 for text, a in zip(completions, answer, strict=True)]


right_answer.reward_range = (0.0, 1.0)


def test_an_answer_ending_in_an_extra_end_token_keeps_its_reward(tiny_model_path, tmp_path):
    prompts = ["40+2=", "39+3="]
    dataset = Dataset.from_list([{"prompt": p, "answer": "42"} for p in prompts])
    args = DrGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", num_generations=GROUP,
        per_device_train_batch_size=len(prompts) * GROUP, max_completion_length=BUDGET, dr_grpo=True, seed=0,
        zero_reward_for_truncated=True, extra_eos_tokens=["</answer>"],
    )  # fmt: skip
    trainer = DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[right_answer], args=args, train_dataset=dataset)
    tokenizer = trainer._tokenizer
    extra = tokenizer.convert_tokens_to_ids("</answer>")
    assert extra != tokenizer.eos_token_id and extra in trainer.eos_token_ids  # an extra token, not the model's eos

    def scripted(trainer_, rows, budgets, owners=None, stop=None):
        samples = []
        for row, budget in enumerate(budgets):
            text, end, _, _ = SCRIPT[row % GROUP]
            ids = tokenizer(text)["input_ids"] + ([tokenizer.convert_tokens_to_ids(end)] if end else [])
            assert len(ids) <= budget
            samples.append(Sampled(ids, [-0.5] * len(ids)))
        return samples

    trainer._engine.generate = scripted
    trainer.model.train()
    batch = [{"prompt": p, "answer": "42"} for p in prompts for _ in range(GROUP)]
    output = trainer._generate_and_score_completions(batch)

    rewards = trainer._last_rewards_per_func[:, 0].tolist()
    expected = [1.0 if right and not cut else 0.0 for _, _, right, cut in SCRIPT] * len(prompts)
    assert rewards == expected  # the </answer> answer kept its 1; the cut one scored the lowest, 0
    assert trainer._last_truncated.tolist() == [cut for *_, cut in SCRIPT] * len(prompts)
    advantages = output["advantages"].view(-1, GROUP)
    assert (advantages[:, 0] > 0).all() and advantages[:, 0].tolist() == pytest.approx(advantages[:, 1].tolist())
    # TRL's clipped ratio and our truncation diagnostic read the same list: one cut answer in four.
    assert trainer._metrics["train"]["completions/clipped_ratio"][-1] == 0.25
    assert trainer._metrics["train"][metric_names.TRUNCATION_RATE][-1] == 0.25
