"""TRL's `rollout_func` for the Python tool: the multi-turn loop on the trainer's backend, returned as TRL wants it.

TRL 1.16 calls `rollout_func(prompts, trainer)` on every rank with its slice of the generation batch (each prompt
repeated `num_generations` times already) and expects `prompt_ids`, `completion_ids` and `logprobs` per row; any other
key is forwarded to the reward functions, and `env_mask` becomes TRL's `tool_mask` (0 on tokens left out of the
loss). So:
- `completion_ids`: generated ids and observation ids, in order, exactly as the policy saw them;
- `env_mask`: 1 on generated ids, 0 on observation ids; all 0 for a void answer under `tool_void_answers: mask`;
- `logprobs`: vLLM's per-token log-probs with 0.0 on observation ids (TRL's convention), or None (transformers);
- `tool_model_text` and `tool_model_ids`: the generated ids alone, as text and as ids, which
  `DrGRPOTrainer._calculate_rewards` gives the rewards as their `completions` and `completion_ids` instead of the
  whole trajectory, so an observation never earns reward and a length reward counts the policy's tokens only;
  `tool_calls`, `tool_errors`: per answer.
It also logs the `diag/tool/` metrics of the batch (all ranks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from drgrpo.algorithm.rollout.arguments import ToolArguments
from drgrpo.algorithm.rollout.generation import TrainerTurns, add_vllm_stop
from drgrpo.algorithm.rollout.loop import Answer, LoopSettings, ToolRunner, run_tool_loop
from drgrpo.algorithm.rollout.protocol import TurnReader, check_turn_reading
from drgrpo.algorithm.rollout.tool_metrics import answer_counts, tool_metrics

MODEL_TEXT = "tool_model_text"  # the rollout's column the trainer hands to the rewards as their completions
MODEL_IDS = "tool_model_ids"  # ... and as their completion_ids


def loss_mask(answer: Answer, mask_void: bool, marker: str) -> list[int]:
    """The answer's `env_mask`: its generated/observation mask, or all zeros for a void answer left out of the loss."""
    if mask_void and answer.is_void(marker):
        return [0] * len(answer.mask)
    return list(answer.mask)


def agree_across_ranks(accelerator: Any) -> Callable[[int], int]:
    """`agree` for the loop: the most open answers of any rank (one all-gather per turn, on every rank)."""

    def agree(count: int) -> int:
        counts = accelerator.gather(torch.tensor([count], device=accelerator.device))
        return int(counts.max().item())

    return agree


def make_rollout_func(settings: ToolArguments, tool: ToolRunner) -> Callable:
    """The `rollout_func` to give `DrGRPOTrainer` for a config with `python_tool: true`."""
    settings.check_tool_settings()
    mask_void = settings.tool_void_answers == "mask"
    state: dict[str, Any] = {}

    def rollout_func(prompts: list, trainer: Any) -> dict[str, list]:
        if "reader" not in state:  # first call: the trainer is built
            check_turn_reading(trainer._tokenizer)  # a tokenizer whose programs would not read as written: refused
            state["reader"] = TurnReader(trainer._tokenizer)
            if trainer.use_vllm:
                add_vllm_stop(trainer)
        prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
        loop_settings = LoopSettings(
            max_calls=settings.tool_max_calls,
            max_tokens=trainer.max_completion_length,
            eos_ids=tuple(trainer.eos_token_ids),
        )
        answers = run_tool_loop(
            prompt_ids,
            TrainerTurns(trainer, state["reader"]),
            tool,
            trainer._tokenizer,
            loop_settings,
            reader=state["reader"],
            agree=agree_across_ranks(trainer.accelerator),
        )
        mode = "train" if trainer.model.training else "eval"
        counts = answer_counts(answers, settings.tool_answer_marker).to(trainer.accelerator.device)
        counts = trainer.accelerator.gather(counts)
        for name, value in tool_metrics(counts.cpu()).items():
            trainer._metrics[mode][name].append(value)
        logprobs = [a.logprobs for a in answers]
        model_ids = [a.model_ids() for a in answers]
        return {
            "prompt_ids": [a.prompt_ids for a in answers],
            "completion_ids": [a.ids for a in answers],
            "logprobs": None if any(lp is None for lp in logprobs) else logprobs,
            "env_mask": [loss_mask(a, mask_void, settings.tool_answer_marker) for a in answers],
            MODEL_TEXT: trainer._tokenizer.batch_decode(model_ids, skip_special_tokens=True),
            MODEL_IDS: model_ids,
            "tool_calls": [a.calls for a in answers],
            "tool_errors": [a.errors for a in answers],
        }

    return rollout_func
