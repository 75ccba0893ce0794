"""The CPU engine on a `GRPOTrainer`: which weights it samples from, with which seeds, inside which of TRL's contexts.

`TrainerEngine.generate(trainer, rows, budgets, owners, stop)` is what `DrGRPOTrainer._generate_single_turn` (plain
GRPO rollouts) and the Python tool's loop (`generation.TrainerTurns`) call instead of transformers' `generate`:

- the weights: inside TRL's `unwrap_model_for_generation` (the same context TRL's own generation uses: ZeRO-3
  parameters gathered, gradient checkpointing off), `GenerationWeights.for_generation` gives the trained model itself
  (float32, or its packed view) or its copy in bf16, cast once per optimizer step and dropped when the step's
  generation is done (a copy built per call and dropped under ZeRO-3 and FSDP, whose sharding a full copy held
  across calls would undo);
- the seeds: one per row, a hash of (run seed, train/eval, optimizer step, generation call of that mode at that step,
  rank, row or the tool loop's owner), so a row's random numbers depend on nothing another row does (a padding row
  included), and a resumed run samples what the uninterrupted one did, evaluation or not (calls are counted per mode:
  an evaluation never moves training's seeds);
- the metrics: `engine/weight_syncs` (casts into the copy so far) and `engine/weight_sync_seconds` (the last one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from drgrpo.algorithm.rollout.arguments import resolve_generation_engine
from drgrpo.algorithm.rollout.engine import GenerationEngine, Sampled
from drgrpo.algorithm.rollout.lora_merge import check_mergeable
from drgrpo.algorithm.rollout.sampler import SamplingParams, row_seed
from drgrpo.algorithm.rollout.weights import GenerationWeights, views_packed
from drgrpo.observe import metric_names as names

logger = logging.getLogger(__name__)


def generation_dtype(bf16: bool) -> torch.dtype | None:
    """The generation weights' dtype on a CPU: bfloat16 where training computes in bf16 (where the CPU has it
    natively, with `bf16: auto`), else None: the trained weights themselves, in their own dtype. Never a float16
    copy: a bf16-trained model's weights need not fit float16's range."""
    return torch.bfloat16 if bf16 else None


def owner_key(owner) -> object:
    """A row's seed key from the tool loop's owner (answer, turn): the answer's index for its first turn, so that an
    answer that writes no program samples exactly what it samples without the tool; (answer, turn) after that."""
    if owner is None:
        return None
    answer, turn = owner
    return answer if turn == 0 else f"{answer}:{turn}"


class TrainerEngine:
    """The engine, the generation weights and the seed counters of one trainer."""

    def __init__(self, trainer: Any) -> None:
        args = trainer.args
        self.engine = GenerationEngine(
            trainer.eos_token_ids,
            trainer._tokenizer.pad_token_id,
            SamplingParams(
                temperature=trainer.temperature,
                top_p=trainer.top_p,
                top_k=trainer.top_k or 0,
                min_p=trainer.min_p,
                repetition_penalty=trainer.repetition_penalty,
            ),
        )
        sharded = trainer._dist.is_zero3 or trainer.is_fsdp_enabled
        self.weights = GenerationWeights(generation_dtype(bool(args.bf16)), persistent=not sharded)
        # At start-up, not at the first generation: a LoRA variant the copy cannot merge is refused before any step.
        if self.weights.is_copy(trainer.model):
            check_mergeable(trainer.model)
        self.seed = args.seed
        # Per mode: (optimizer step, generation calls made at it). Training and evaluation count apart: transformers
        # evaluates before it saves at a step, so a shared count would give a resumed run's next training call
        # (which no evaluation preceded) another seed than the uninterrupted run's.
        self.calls: dict[str, tuple[int, int]] = {}

    def describe(self, model) -> str:
        """The start-up line: the engine, its weights (those of the trained `model` or a copy), their sync."""
        dtype = str(self.weights.dtype).removeprefix("torch.")
        if not self.weights.is_copy(model) and views_packed(model):
            weights = (
                "the trained float32 weights, its linear layers packed for oneDNN at each optimizer step (dropped "
                "once the step's generation is done)"
            )
        elif not self.weights.is_copy(model):
            trained = {str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.is_floating_point()}
            weights = f"the trained {'/'.join(sorted(trained))} weights themselves (no copy, nothing to sync)"
        elif self.weights.persistent:
            weights = (
                f"a {dtype} copy of the trained weights, cast once per optimizer step (dropped once the step's "
                "generation is done)"
            )
        else:
            weights = f"a {dtype} copy cast from the gathered weights at each generation call (sharded training)"
        return f"generation: the CPU engine (drgrpo/algorithm/rollout/engine.py) samples from {weights}"

    def _seeds(self, trainer: Any, count: int, owners: Sequence | None) -> list[int]:
        step = trainer.state.global_step
        mode = "train" if trainer.model.training else "eval"
        counted_step, made = self.calls.get(mode, (-1, 0))
        call = made if counted_step == step else 0
        self.calls[mode] = (step, call + 1)
        rank = trainer.accelerator.process_index
        keys = list(range(count)) if owners is None else [owner_key(owner) for owner in owners]
        return [row_seed(self.seed, mode, step, call, rank, key) for key in keys]

    def generate(
        self,
        trainer: Any,
        rows: Sequence[Sequence[int]],
        budgets: Sequence[int],
        owners: Sequence | None = None,
        stop: Callable[[int, int], bool] | None = None,
    ) -> list[Sampled]:
        """Each row's sampled ids and log-probs (module docstring); `owners` name the rows for their seeds (the tool
        loop's (answer, turn); a padding row has budget 0 and is not generated)."""
        from trl.extras.profiling import profiling_context
        from trl.models import unwrap_model_for_generation

        seeds = self._seeds(trainer, len(rows), owners)
        syncs = self.weights.syncs
        with (
            profiling_context(trainer, "drgrpo.engine.generate"),
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            ) as unwrapped_model,
            torch.no_grad(),
            trainer._dist.summon_full_params(trainer.model_wrapped, recurse=False),
        ):
            model = self.weights.for_generation(unwrapped_model, trainer.state.global_step)
            try:
                samples = self.engine.generate(model, rows, seeds, budgets, stop)
            finally:
                self.weights.release()
        mode = "train" if trainer.model.training else "eval"
        trainer._metrics[mode][names.ENGINE_WEIGHT_SYNCS].append(float(self.weights.syncs))
        if self.weights.syncs > syncs:
            trainer._metrics[mode][names.ENGINE_WEIGHT_SYNC_SECONDS].append(self.weights.last_sync_seconds)
        return samples


def build_trainer_engine(trainer: Any) -> TrainerEngine | None:
    """The trainer's engine where its config resolved to the CPU engine and the built trainer allows it (ZeRO-3 must
    gather for generation; TRL's `generation_kwargs`, which only `generate` reads, must be unset); else None, and
    `args.engine` / `args.engine_reason` say so."""
    args = trainer.args
    if getattr(args, "engine", "trl") != "cpu":
        return None
    engine, reason = resolve_generation_engine(
        args.generation_engine,
        on_cpu=trainer.accelerator.device.type == "cpu",
        use_vllm=args.use_vllm,
        continuous_batching=args.use_transformers_continuous_batching,
        gathers_for_generation=args.ds3_gather_for_generation or not trainer._dist.is_zero3,
    )
    if engine == "cpu" and args.generation_kwargs:
        keys = ", ".join(sorted(args.generation_kwargs))
        if args.generation_engine == "cpu":
            raise ValueError(
                f"generation_engine: cpu does not read generation_kwargs ({keys}); remove them or set "
                "generation_engine: trl."
            )
        engine, reason = "trl", f"generation_engine: auto, TRL's generation: generation_kwargs ({keys}) are set"
    args.engine, args.engine_reason = engine, reason
    return TrainerEngine(trainer) if engine == "cpu" else None
