"""One turn of generation with the trainer's own backend, stopped at the closing fence, eos or each row's budget.

- the CPU engine (`generation_engine: auto` on a CPU, drgrpo/algorithm/rollout/engine.py): each row ends at its
  closing fence (`TurnStop.ends_row`), an eos or its budget; each row is seeded by its owner (answer, turn), and a
  padding row (budget 0) is not generated, so a rank's samples never depend on another rank's open answers
  (tests/test_engine_padding_rows.py); the sampled tokens' log-probs come back for the importance-sampling correction.
- transformers (TRL's default without vLLM on a GPU; `generation_engine: trl` on a CPU):
  `GRPOTrainer._generate_single_turn`'s regular path, the same calls in the same order (left padding,
  `unwrap_model_for_generation` with ZeRO-3 gathering, `generate` with TRL's `generation_config`), plus one stopping
  criterion, `TurnStop`: each row stops at the token that closes its program's fence or at its own token budget. The
  criterion changes where rows stop, not how tokens are drawn: a turn without code is what TRL's `generate` samples
  for the same batch. But `generate` draws every row's token from one shared random stream at each step, rows that
  are done included (a padding row, budget 0, is done at once and still draws), so a row's sample depends on how
  many rows its call holds: a rank pads its calls to the most open answers of any rank, so with this backend its
  samples do depend on the other ranks' open answers (reproducible for a given world size, seed and data, not
  across them).
- vLLM (colocate or server) and transformers' continuous batching: TRL's `_generate_single_turn`, unchanged. vLLM is
  also given the stop string "```\\n" (with `include_stop_str_in_output`), so a turn usually stops at its fence; the
  loop cuts every row on its ids in any case (`protocol.cut_turn`), so a backend that stops late (or early) still
  gives the same trajectory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from drgrpo.algorithm.rollout.protocol import TurnReader

VLLM_STOP = "```\n"  # the usual closing fence; a false stop (an untagged block's opening) only pauses the turn


class TurnStop(StoppingCriteria):
    """transformers stopping criterion: a row is done at the token completing its ```python block's closing fence,
    at an eos token, or once it generated its `budget` tokens (budget 0: done at once, a padding row). Each row's turn
    is read on from the tail of its ids (`rows`: the prompt and the answer so far), as the loop's cut reads it."""

    def __init__(
        self,
        reader: TurnReader,
        rows: Sequence[Sequence[int]],
        budgets: Sequence[int],
        eos_ids: Sequence[int],
        start: int,
    ) -> None:
        self.budgets = list(budgets)
        self.eos = set(eos_ids)
        self.start = start
        self.scans = [reader.scan(row) for row in rows]
        self.done = [budget <= 0 for budget in budgets]

    def ends_row(self, row: int, token: int) -> bool:
        """Feed `row`'s next token to its fence scanner; True when it completes the closing fence (the engine's
        `stop`: the engine itself checks eos and budgets)."""
        return self.scans[row].feed(token)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        generated = input_ids.shape[1] - self.start
        last = input_ids[:, -1].tolist()
        for row, token in enumerate(last):
            if self.done[row]:
                continue
            if token in self.eos or self.ends_row(row, token) or generated >= self.budgets[row]:
                self.done[row] = True
        return torch.tensor(self.done, dtype=torch.bool, device=input_ids.device)


class TrainerTurns:
    """`generate(rows, budgets, owners)` for `loop.run_tool_loop`, with a `GRPOTrainer`'s backend: the CPU engine
    (rows seeded by their `owners`), vLLM, or transformers (one random stream for the whole call, padding rows
    included: `owners` is not used, and a row's sample depends on the call's width)."""

    def __init__(self, trainer: Any, reader: TurnReader) -> None:
        self.trainer = trainer
        self.reader = reader

    def __call__(
        self, rows: list[list[int]], budgets: list[int], owners: list | None = None
    ) -> list[tuple[list[int], list[float] | None]]:
        trainer = self.trainer
        engine = getattr(trainer, "_engine", None)
        if engine is not None:
            stop = TurnStop(self.reader, rows, budgets, trainer.eos_token_ids, 0)
            samples = engine.generate(trainer, rows, budgets, owners, stop.ends_row)
            return [(sample.ids, sample.logprobs) for sample in samples]
        if trainer.use_vllm or trainer.use_transformers_continuous_batching:
            ids, logprobs = trainer._generate_single_turn(rows, None, {}, num_generations=1)
            logprobs = [None] * len(ids) if logprobs is None else logprobs
            return [(list(i), None if lp is None else list(lp)) for i, lp in zip(ids, logprobs, strict=True)]
        return [(ids, None) for ids in self._transformers(rows, budgets)]

    def _transformers(self, rows: list[list[int]], budgets: list[int]) -> list[list[int]]:
        # TRL 1.16 GRPOTrainer._generate_single_turn, "Regular generation path" (no images), plus `TurnStop`.
        from transformers import Trainer
        from trl.extras.profiling import profiling_context
        from trl.models import unwrap_model_for_generation
        from trl.trainer.utils import pad

        trainer = self.trainer
        prompt_tensors = [torch.tensor(ids) for ids in rows]
        padded_ids = pad(
            prompt_tensors,
            padding_value=trainer._tokenizer.pad_token_id,
            padding_side="left",
            pad_to_multiple_of=trainer.pad_to_multiple_of,
        )
        attention_mask = pad(
            [torch.ones_like(t) for t in prompt_tensors],
            padding_value=0,
            padding_side="left",
            pad_to_multiple_of=trainer.pad_to_multiple_of,
        )
        generate_inputs = Trainer._prepare_inputs(trainer, {"input_ids": padded_ids, "attention_mask": attention_mask})
        prompt_length = generate_inputs["input_ids"].size(1)
        stop = TurnStop(self.reader, rows, budgets, trainer.eos_token_ids, prompt_length)
        with (
            profiling_context(trainer, "transformers.generate"),
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                generation_kwargs=trainer.generation_kwargs,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            ) as unwrapped_model,
            torch.no_grad(),
            trainer._dist.summon_full_params(trainer.model_wrapped, recurse=False),
        ):
            prompt_completion_ids = unwrapped_model.generate(
                **generate_inputs,
                generation_config=trainer.generation_config,
                stopping_criteria=StoppingCriteriaList([stop]),
            )
        # Rows that stopped early are padded to the longest: the loop's cut keeps each row's own tokens only.
        return prompt_completion_ids[:, prompt_length:].cpu().tolist()


def add_vllm_stop(trainer: Any) -> None:
    """Make the trainer's vLLM stop at the usual closing fence too (its stop strings, kept in the output)."""
    kwargs = dict(trainer.vllm_generation.generation_kwargs or {})
    stops = list(kwargs.get("stop") or [])
    if VLLM_STOP not in stops:
        stops.append(VLLM_STOP)
    kwargs["stop"] = stops
    kwargs["include_stop_str_in_output"] = True
    trainer.vllm_generation.generation_kwargs = kwargs
