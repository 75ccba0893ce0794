"""The `diag/code/` metrics of a batch rewarded by the built-in `code` reward: what the policy's programs did, one
outcome per answer (`drgrpo.observe.code_metrics`), summed over every rank, and the sandbox's throughput.

`DrGRPOTrainer._calculate_rewards` calls `code_batch_metrics` right after TRL scored the batch: the `code` reward's
wrapper (`rewards.registry.SafeReward`) still holds its note on each of this rank's answers (`last_report`) and how
long it took (`last_seconds`); the scores are TRL's own, before the truncation rule floors them (the metrics say what
the programs did, not what they earned). A run without a reward named `code` logs none of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from drgrpo.observe.code_metrics import answer_counts, counts_vector, shares
from rewards.code import extract_program
from rewards.extract import completion_text

CODE_REWARD = "code"


def code_reward_index(reward_func_names: Sequence[str]) -> int | None:
    """The position of the built-in `code` reward among a trainer's reward functions, or None."""
    names = list(reward_func_names)
    return names.index(CODE_REWARD) if CODE_REWARD in names else None


def code_batch_metrics(
    trainer: Any, index: int, completions: Sequence[Any], rewards_per_func: torch.Tensor
) -> dict[str, float]:
    """The `diag/code/` metrics of this generation round. `rewards_per_func`: TRL's all-process scores (NaN for
    None), this rank's rows at `process_index * len(completions)`; `completions`: this rank's, as the rewards read
    them. The counts are summed over ranks; the throughput is this rank's test runs over its reward's seconds."""
    reward = trainer.reward_funcs[index]
    report = getattr(reward, "last_report", None)
    local = len(completions)
    if report is None or report.size != local:  # not our wrapper, or it scored another batch: nothing to read
        return {}
    start = trainer.accelerator.process_index * local
    scores = [None if math.isnan(v) else v for v in rewards_per_func[start : start + local, index].tolist()]
    settings = getattr(getattr(reward, "func", None), "settings", None)  # the CodeReward's own (code_language)
    programs = [extract_program(completion_text(c), getattr(settings, "code_language", "python")) for c in completions]
    counts = answer_counts(programs, scores, report.details)
    device = rewards_per_func.device
    summed = trainer.accelerator.gather(torch.tensor([counts_vector(counts)], device=device)).sum(dim=0).tolist()
    metrics = shares(summed)
    seconds = getattr(reward, "last_seconds", None)
    if seconds:
        metrics |= {
            key: value
            for key, value in shares(counts_vector(counts), seconds).items()
            if key.endswith("programs_per_second")
        }
    return metrics
