"""TRL's per-generation logs for a batch that dynamic sampling assembles from several generation rounds.

For every generation round TRL's `GRPOTrainer._generate_and_score_completions` (1.16) logs `reward`, `reward_std`,
`frac_reward_zero_std`, `rewards/<name>/mean|std`, `completions/*` (lengths, `clipped_ratio`; in `_generate`),
`num_tokens`, `sampling/*` (vLLM importance sampling), `tools/*` and the metrics reward functions send through
`log_metric`, and appends the round's rows to the completions table (`_logs`). Under dynamic sampling a round also
holds the groups that are dropped, so those figures describe what was *generated*, not what was trained on. Here
each round's figures are moved to `dynamic_sampling/generated_<name>` (TRL's logger averages them over the rounds),
and TRL's names are logged again for the assembled batch, with TRL's own formulas (`nanstd`, ddof 1; lengths and
truncation by TRL's rule). The completions table is rebuilt from the rows of the assembled batch, in its order.
`tools/*` and the reward functions' own metrics cannot be recomputed from the batch: they stay under `generated_`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from trl.trainer.utils import nanstd

from drgrpo.algorithm.advantages import combine_rewards
from drgrpo.algorithm.sampler_correction import local_figures, trl_sampling_metrics
from drgrpo.observe import metric_names
from drgrpo.observe.diagnostics import completion_lengths_and_truncation

GENERATED = metric_names.DYNAMIC_SAMPLING_GENERATED_PREFIX
OURS = "dynamic_sampling/"  # the sampler's own per-rollout counters: not TRL's, never moved
ROW_LOGS = ("prompt", "completion", "advantages", "images")  # TRL's per-row table columns
NESTED_ROW_LOGS = ("rewards", "extra")  # per-row columns, one per reward function / extra column


# ----------------------------------------------------------------------------------------------------------------------
# Metrics: each round's figures under generated_*, the trained batch's under TRL's names
# ----------------------------------------------------------------------------------------------------------------------
def metric_marks(metrics: dict[str, list[float]]) -> dict[str, int]:
    """How many values each metric holds now, so that what one round appends can be told apart afterwards."""
    return {name: len(values) for name, values in metrics.items()}


def move_round_metrics(metrics: dict[str, list[float]], marks: dict[str, int]) -> None:
    """Move what a round appended to TRL's metric buffer (since `marks`) to `dynamic_sampling/generated_<name>`.

    `num_tokens` is a running total TRL *sets* (not appends); it is removed here and set for the trained batch later.
    Values logged before the round (another step's, with `logging_steps > 1`) stay where they are.
    """
    for name in list(metrics):
        if name.startswith(OURS):
            continue
        values = metrics[name]
        if name == metric_names.TRL_NUM_TOKENS:
            del metrics[name]
            continue
        start = marks.get(name, 0)
        new = values[start:]
        if not new:
            continue
        del values[start:]
        if not values:
            del metrics[name]  # TRL's logger would log an empty list as None
        metrics[GENERATED + name].extend(new)


def reward_metrics(
    rewards_per_func: torch.Tensor, weights: torch.Tensor, names: Sequence[str], group_size: int
) -> dict[str, float]:
    """TRL's reward figures for one batch (all processes' completions, group-contiguous), as TRL computes them:
    `rewards/<name>/mean|std` over each function's scored completions, `reward` / `reward_std` of the weighted
    sum (a completion no function scored left out), `frac_reward_zero_std` the share of groups whose summed
    rewards have std 0 (`nanstd`, ddof 1)."""
    metrics = {}
    for index, name in enumerate(names):
        metrics[f"rewards/{name}/mean"] = torch.nanmean(rewards_per_func[:, index]).item()
        metrics[f"rewards/{name}/std"] = nanstd(rewards_per_func[:, index]).item()
    rewards = combine_rewards(rewards_per_func, weights)
    metrics[metric_names.TRL_REWARD] = torch.nanmean(rewards).item()
    metrics["reward_std"] = nanstd(rewards).item()
    group_std = nanstd(rewards.view(-1, group_size), dim=1)
    metrics[metric_names.TRL_ZERO_STD_SHARE] = (
        torch.isclose(group_std, torch.zeros_like(group_std)).float().mean().item()
    )
    return metrics


def completion_metrics(lengths: torch.Tensor, truncated: torch.Tensor) -> dict[str, float]:
    """TRL's `completions/*` for one batch: lengths, the share truncated, lengths of those that ended (0 if none)."""
    lengths = lengths.float()
    ended = lengths[~truncated]
    if ended.numel() == 0:  # TRL's edge case: no completion ended
        ended = torch.zeros(1)
    return {
        "completions/mean_length": lengths.mean().item(),
        "completions/min_length": lengths.min().item(),
        "completions/max_length": lengths.max().item(),
        "completions/clipped_ratio": truncated.float().mean().item(),
        "completions/mean_terminated_length": ended.mean().item(),
        "completions/min_terminated_length": ended.min().item(),
        "completions/max_terminated_length": ended.max().item(),
    }


def trl_lengths(trainer: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's completion lengths and truncation flags as TRL counts them (tool tokens left out)."""
    stop_token_ids = [*trainer.eos_token_ids, trainer._tokenizer.pad_token_id]
    lengths, truncated = completion_lengths_and_truncation(
        batch["completion_ids"], batch["completion_mask"], stop_token_ids, trainer.max_completion_length
    )
    if "tool_mask" in batch:
        model_tokens = (batch["completion_mask"] * batch["tool_mask"]).sum(dim=1).long()
        lengths = torch.where(batch["completion_mask"].sum(dim=1) > 0, model_tokens, lengths)
    return lengths, truncated


def sampling_metrics(trainer: Any, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """TRL's `sampling/*` (vLLM's log-probs against the trainer's, and the importance weights) for one batch; empty
    when TRL's importance-sampling correction is off. Per process, then reduced over processes as TRL does
    (`sampler_correction.trl_sampling_metrics`)."""
    if "importance_sampling_ratio" not in batch or "sampling_per_token_logps" not in batch:
        return {}
    mask = batch["completion_mask"] * batch.get("tool_mask", 1)
    mask = mask.bool()
    delta = (batch["old_per_token_logps"] - batch["sampling_per_token_logps"]).abs()
    delta = delta[mask & ~torch.isnan(delta)]
    ratio = batch["importance_sampling_ratio"]
    ratio = ratio.flatten() if trainer.vllm_importance_sampling_mode.startswith("sequence") else ratio[mask]
    local = local_figures(delta.double(), ratio.double()).to(mask.device).unsqueeze(0)
    return trl_sampling_metrics(trainer.accelerator.gather(local).cpu())


# ----------------------------------------------------------------------------------------------------------------------
# The completions table: each round's rows taken out, the trained batch's put back in its order
# ----------------------------------------------------------------------------------------------------------------------
def _pop_tail(buffer, count: int) -> list:
    tail = [buffer.pop() for _ in range(min(count, len(buffer)))]
    return tail[::-1]


def take_round_rows(logs: dict[str, Any], count: int) -> dict[str, Any]:
    """Remove the `count` rows a round just appended to TRL's table buffers (`_logs`) and return them."""
    taken: dict[str, Any] = {key: _pop_tail(logs[key], count) for key in ROW_LOGS}
    for key in NESTED_ROW_LOGS:
        taken[key] = {name: _pop_tail(column, count) for name, column in logs[key].items()}
    return taken


def select_rows(rows: dict[str, Any], indices: Sequence[int], zero_advantage: set[int]) -> dict[str, Any]:
    """The table rows at `indices` (a round's all-process row numbers), in that order; the rows whose index is in
    `zero_advantage` (padding) show advantage 0, as trained. A column the round did not fill (images) stays empty."""

    def pick(column: list) -> list:
        return [column[i] for i in indices] if len(column) >= len(rows["prompt"]) and column else []

    selected = {key: pick(rows[key]) for key in ROW_LOGS}
    if selected["advantages"]:
        selected["advantages"] = [
            0.0 if i in zero_advantage else a for i, a in zip(indices, selected["advantages"], strict=True)
        ]
    for key in NESTED_ROW_LOGS:
        selected[key] = {name: pick(column) for name, column in rows[key].items()}
    return selected


def put_rows(logs: dict[str, Any], parts: Sequence[dict[str, Any]]) -> None:
    """Append the selected rows of every round, in batch order, to TRL's table buffers."""
    for part in parts:
        for key in ROW_LOGS:
            logs[key].extend(part[key])
        for key in NESTED_ROW_LOGS:
            for name, values in part[key].items():
                logs[key][name].extend(values)
