"""A rank's samples do not depend on the other ranks' open answers on the CPU engine (issue 42).

Every rank makes the same generation calls in the tool loop: a rank with fewer open answers pads its call with
inactive rows (budget 0) up to the most open answers of any rank (drgrpo/algorithm/rollout/loop.py). With TRL's
transformers generation those rows draw from the one shared random stream, so the real rows' samples change with the
width (drgrpo/algorithm/rollout/generation.py). The CPU engine samples each row from its own generator, seeded by
its owner (answer, turn), and does not generate a padding row: here one rank's rows are generated alone, padded to
other widths, and through the whole loop beside a simulated rank that keeps more answers open for longer; every real
row's ids and log-probs are the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from datasets import Dataset

from drgrpo.algorithm.rollout.generation import TrainerTurns
from drgrpo.algorithm.rollout.loop import LoopSettings, run_tool_loop
from drgrpo.algorithm.rollout.protocol import TurnReader

BUDGET = 10


@dataclass
class Ran:
    output: str
    status: str


class EchoTool:
    """A tool for the loop's signature; the random model writes no program, so it is not expected to run."""

    def run_many(self, programs):
        return [Ran("", "ok") for _ in programs]


def trainer_with_engine(tiny_model_path, addition_data, tmp_path):
    from rank_probe import digit_reward

    from drgrpo.algorithm.config import DrGRPOConfig
    from drgrpo.algorithm.trainer import DrGRPOTrainer

    rows = [json.loads(line) for line in open(addition_data["train"])][:8]
    dataset = Dataset.from_list([{"prompt": r["question"], "answer": r["answer"]} for r in rows])
    args = DrGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=True, report_to="none", per_device_train_batch_size=4,
        num_generations=4, max_completion_length=BUDGET, dr_grpo=True, seed=7, temperature=1.0,
    )  # fmt: skip
    trainer = DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[digit_reward], args=args, train_dataset=dataset)
    assert trainer._engine is not None  # generation_engine: auto on a CPU
    trainer.model.train()
    return trainer


def test_padding_rows_and_the_width_never_change_a_ranks_samples(tiny_model_path, addition_data, tmp_path):
    trainer = trainer_with_engine(tiny_model_path, addition_data, tmp_path)
    tokenizer = trainer._tokenizer
    reader = TurnReader(tokenizer)
    generate = TrainerTurns(trainer, reader)
    prompts = [tokenizer(text)["input_ids"] for text in ("12+7=", "3+45=", "9+9=")]
    rows = [p for p in prompts for _ in range(2)]
    owners = [(answer, 0) for answer in range(len(rows))]

    def call(padding: int, filler: int = 0):
        trainer._engine.calls = {}  # each world's first generation call of the step, as on a rank
        padded = rows + [rows[filler]] * padding
        return generate(padded, [BUDGET] * len(rows) + [0] * padding, owners + [None] * padding)

    alone = call(0)
    assert len({tuple(ids) for ids, _ in alone}) > 2  # the rows really sampled different answers
    for padding, filler in ((4, 0), (1, 5), (10, 3)):  # the widths another rank's open answers would set
        padded = call(padding, filler)
        assert padded[: len(rows)] == alone, (padding, filler)
        assert all(ids == [] for ids, _ in padded[len(rows) :])  # a padding row is not generated

    # The whole loop on this rank, alone and beside a rank with 9 open answers, then 4, after this rank has ended.
    settings = LoopSettings(max_calls=2, max_tokens=BUDGET, eos_ids=tuple(trainer.eos_token_ids))

    def loop(other_rank: list[int]):
        trainer._engine.calls = {}
        widths = []

        def agree(count: int) -> int:
            widths.append(max(count, other_rank.pop(0) if other_rank else 0))
            return widths[-1]

        answers = run_tool_loop(rows, generate, EchoTool(), tokenizer, settings, reader=reader, agree=agree)
        return [(a.ids, a.logprobs, a.end) for a in answers], widths

    own, own_widths = loop([])
    beside, widths = loop([9, 4])
    assert beside == own
    assert widths[0] == 9 and widths[1:] != own_widths[1:]  # the calls really were wider, and more of them
