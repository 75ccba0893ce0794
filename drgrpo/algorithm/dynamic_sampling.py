"""DAPO dynamic sampling: train only on groups whose rewards differ, refilling the batch from fresh prompts.

A group whose completions all got the same reward has advantage 0 for every completion: it costs a forward and
backward pass and carries no policy-gradient signal (DAPO, Yu et al., arXiv 2503.14476, section 3.2; verl
`algorithm.filter_groups`). With `dynamic_sampling: true`, `DrGRPOTrainer` generates for the generation batch TRL
hands it, drops the all-equal groups, and generates for more prompts drawn from a dedicated, seeded stream over the
training set until it holds the generation batch's full number of groups (at most `dynamic_sampling_max_rounds`
rounds). The batch that is trained on has exactly the shape TRL expects, so the optimizer-step batch size, and with it
`dr_grpo`'s constant normaliser `B x max_completion_length`, never change.

Every decision is taken on the all-process rewards, which every rank holds, so all ranks keep the same groups; each
round's rows are gathered from all processes, the kept groups are laid out in TRL's order (group-contiguous,
process-major) and each rank takes back its own slice. The stream's position is saved next to each checkpoint and
restored on resume.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import broadcast_object_list
from transformers import TrainerCallback

from drgrpo.algorithm.advantages import combine_rewards
from drgrpo.observe import metric_names
from drgrpo.observe.diagnostics import correct_mask

logger = logging.getLogger(__name__)
STATE_FILE = "dynamic_sampling.json"
# Row-wise tensors of TRL's generation output, and how each is padded: (left-padded?, padding value). None as value
# means the tokenizer's pad token id.
ROW_KEYS: dict[str, tuple[bool, float | None]] = {
    "prompt_ids": (True, None),
    "prompt_mask": (True, 0),
    "completion_ids": (False, None),
    "completion_mask": (False, 0),
    "old_per_token_logps": (False, 0.0),
    "ref_per_token_logps": (False, 0.0),
    "sampling_per_token_logps": (False, 0.0),
    "importance_sampling_ratio": (False, 0.0),
    "tool_mask": (False, 1),
}


# ----------------------------------------------------------------------------------------------------------------------
# Pure pieces
# ----------------------------------------------------------------------------------------------------------------------
def informative_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """``(N,) -> (N / group_size,)`` bool: True where the group's scored rewards are not all equal.

    Unscored (NaN) completions are ignored; a group with fewer than two scored completions is not informative.
    """
    grouped = rewards.view(-1, group_size)
    valid = ~torch.isnan(grouped)
    high = torch.where(valid, grouped, torch.full_like(grouped, -math.inf)).amax(dim=1)
    low = torch.where(valid, grouped, torch.full_like(grouped, math.inf)).amin(dim=1)
    return (valid.sum(dim=1) >= 2) & (high > low)


def dropped_outcomes(
    correctness: torch.Tensor, informative: torch.Tensor, group_size: int, threshold: float
) -> tuple[int, int]:
    """(all-correct, all-wrong) counts among the dropped groups; a dropped group not all correct counts as all wrong."""
    correct = correct_mask(correctness, threshold).view(-1, group_size).all(dim=1)
    dropped = ~informative
    return int((dropped & correct).sum()), int((dropped & ~correct).sum())


def pad_rows(tensor: torch.Tensor, length: int, value: float, left: bool) -> torch.Tensor:
    """Pad the last dimension of a ``(rows, T)`` tensor to ``length`` on the left or the right."""
    missing = length - tensor.size(1)
    if missing <= 0:
        return tensor
    padding = torch.full((tensor.size(0), missing), value, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([padding, tensor] if left else [tensor, padding], dim=1)


def concat_rows(batches: list[dict[str, torch.Tensor]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Concatenate row-wise batches (same keys), padding every 2-D tensor to the longest as TRL pads it."""
    merged = {}
    for key in batches[0]:
        tensors = [batch[key] for batch in batches]
        if tensors[0].dim() == 2 and key in ROW_KEYS:  # (others, e.g. rewards per function, have a fixed width)
            left, value = ROW_KEYS[key]
            value = pad_token_id if value is None else value
            length = max(t.size(1) for t in tensors)
            tensors = [pad_rows(t, length, value, left) for t in tensors]
        merged[key] = torch.cat(tensors, dim=0)
    return merged


def stream_indices(dataset_size: int, seed: int, start: int, count: int) -> list[int]:
    """Prompt indices ``start .. start + count`` of an endless stream of seeded permutations of the dataset.

    Epoch ``e`` of the stream is ``randperm(dataset_size)`` seeded with ``seed + e``; the same on every rank.
    """
    indices = []
    position = start
    while len(indices) < count:
        epoch, offset = divmod(position, dataset_size)
        order = torch.randperm(dataset_size, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
        take = order[offset : offset + count - len(indices)]
        indices.extend(take)
        position += len(take)
    return indices


# ----------------------------------------------------------------------------------------------------------------------
# The trainer side
# ----------------------------------------------------------------------------------------------------------------------
class DynamicSampler:
    """Fills a generation batch with informative groups for `DrGRPOTrainer` (see the module docstring).

    `score` is the trainer's normal generate-and-score path for one batch of local inputs; it must leave the
    all-process rewards of that batch in `trainer._last_rewards_per_func`.
    """

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        dataset = trainer.train_dataset
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise ValueError(
                "dynamic_sampling needs a map-style training dataset (it draws refill prompts by index); got "
                f"{type(dataset).__name__}. Load the data without streaming, or set dynamic_sampling: false."
            )
        self.dataset = dataset
        self.seed = trainer.args.seed + 1  # a stream of its own, not the order of TRL's sampler
        self.consumed = 0  # refill prompts taken from the stream so far (all processes together)
        self.warned = False
        trainer.add_callback(_SaveStreamPosition(self))

    def fill(self, inputs: list[dict], score) -> dict[str, Any]:
        trainer = self.trainer
        args = trainer.args
        group_size = trainer.num_generations
        local_rows = len(inputs)
        world = trainer.accelerator.num_processes
        target = local_rows * world // group_size
        kept: list[dict] = []  # per round: gathered rows of the kept groups
        spare: list[dict] = []  # per round: gathered rows of the dropped groups (fill-up past the last round)
        kept_groups = dropped_correct = dropped_wrong = rounds = 0
        while True:
            rounds += 1
            output = score(inputs)
            rewards_per_func = trainer._last_rewards_per_func
            rewards = combine_rewards(rewards_per_func, trainer.reward_weights)
            informative = informative_groups(rewards, group_size)
            if trainer._correctness_index is not None:
                correctness = rewards_per_func[:, trainer._correctness_index]
            else:
                correctness = rewards
            correct, wrong = dropped_outcomes(correctness, informative, group_size, args.correctness_threshold)
            dropped_correct, dropped_wrong = dropped_correct + correct, dropped_wrong + wrong
            rows = self._gather(output, rewards_per_func)
            row_keep = informative.repeat_interleave(group_size).to(rows["advantages"].device)
            kept.append({key: value[row_keep] for key, value in rows.items()})
            spare.append({key: value[~row_keep] for key, value in rows.items()})
            kept_groups += int(informative.sum())
            if kept_groups >= target or rounds >= args.dynamic_sampling_max_rounds:
                break
            inputs = self._refill(local_rows)
        padded = max(0, target - kept_groups)
        if padded and not self.warned:
            self.warned = True
            logger.warning(
                "dynamic_sampling: %d rounds gave %d of %d informative groups; %d groups with all-equal rewards (no "
                "reward signal) fill the batch. Raise dynamic_sampling_max_rounds, or check the task's difficulty "
                "(this warning is shown once; dynamic_sampling/groups_padded counts every step).",
                rounds,
                kept_groups,
                target,
                padded,
            )
        batch = concat_rows(kept + spare[::-1], trainer._tokenizer.pad_token_id)
        batch = {key: value[: target * group_size] for key, value in batch.items()}
        trainer._last_rewards_per_func = batch.pop("rewards_per_func")
        start = trainer.accelerator.process_index * local_rows
        local = {key: value[start : start + local_rows] for key, value in batch.items()}
        loss_mask = batch["completion_mask"] * batch.get("tool_mask", 1)
        local["num_items_in_batch"] = loss_mask.sum()
        metrics = trainer._metrics["train"]
        metrics[metric_names.DYNAMIC_SAMPLING_ROUNDS].append(float(rounds))
        metrics[metric_names.DYNAMIC_SAMPLING_DROPPED_ALL_CORRECT].append(float(dropped_correct))
        metrics[metric_names.DYNAMIC_SAMPLING_DROPPED_ALL_WRONG].append(float(dropped_wrong))
        metrics[metric_names.DYNAMIC_SAMPLING_PROMPTS_CONSUMED].append(float(rounds * target))
        metrics[metric_names.DYNAMIC_SAMPLING_GROUPS_PADDED].append(float(padded))
        return local

    def _gather(self, output: dict[str, Any], rewards_per_func: torch.Tensor) -> dict[str, torch.Tensor]:
        """All processes' rows of one round's output (process order = TRL's all-process order), plus the rewards."""
        accelerator = self.trainer.accelerator
        unknown = set(output) - set(ROW_KEYS) - {"advantages", "num_items_in_batch"}
        if unknown:
            raise ValueError(
                f"dynamic_sampling cannot regroup the generation outputs {sorted(unknown)} (multimodal inputs are not "
                "supported yet); set dynamic_sampling: false."
            )
        rows = {}
        for key, value in output.items():
            if key == "num_items_in_batch":
                continue
            if value.dim() == 2:
                left, pad = ROW_KEYS[key]
                pad = self.trainer._tokenizer.pad_token_id if pad is None else pad
                value = accelerator.pad_across_processes(value, dim=1, pad_index=pad, pad_first=left)
            rows[key] = accelerator.gather(value)
        rows["rewards_per_func"] = rewards_per_func.to(rows["advantages"].device)
        return rows

    def _refill(self, local_rows: int) -> list[dict]:
        """This process's slice of the next round: fresh prompts from the stream, each repeated `num_generations`
        times, laid out as TRL's `RepeatSampler` lays out a generation batch."""
        group_size = self.trainer.num_generations
        prompts = local_rows * self.trainer.accelerator.num_processes // group_size
        indices = stream_indices(len(self.dataset), self.seed, self.consumed, prompts)
        self.consumed += prompts
        rows = [index for index in indices for _ in range(group_size)]
        start = self.trainer.accelerator.process_index * local_rows
        return [self.dataset[index] for index in rows[start : start + local_rows]]


class _SaveStreamPosition(TrainerCallback):
    """Writes the refill stream's position into each checkpoint and reads it back when training resumes."""

    def __init__(self, sampler: DynamicSampler) -> None:
        self.sampler = sampler

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / STATE_FILE).write_text(json.dumps({"consumed": self.sampler.consumed}))

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:
            return
        # Only the main process wrote the file (`on_save`), to its own disk: on several nodes without shared storage
        # the other ranks' disks lack it, and a rank that restarted the stream would refill from other prompts than
        # rank 0. So the main process reads it and every rank takes its value.
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}" / STATE_FILE
        is_main = self.sampler.trainer.accelerator.is_main_process
        saved = [read_stream_position(path) if is_main else None]
        consumed = broadcast_object_list(saved, from_process=0)[0]
        if consumed is not None:
            self.sampler.consumed = consumed
            if is_main:
                logger.info("dynamic_sampling: refill stream resumes after %d prompts", consumed)
        elif is_main:
            logger.warning("dynamic_sampling: %s is missing; the refill stream restarts from its beginning", path)


def read_stream_position(path: Path) -> int | None:
    """The refill stream's saved position (prompts consumed) in a checkpoint's `STATE_FILE`, or None if missing."""
    return json.loads(path.read_text())["consumed"] if path.exists() else None
