"""DAPO dynamic sampling: train only on groups whose rewards differ, refilling the batch from fresh prompts.

A group whose completions all got the same reward has advantage 0 for every completion: it costs a forward and
backward pass and carries no policy-gradient signal (DAPO, Yu et al., arXiv 2503.14476, section 3.2; verl
`algorithm.filter_groups`). With `dynamic_sampling: true`, `DrGRPOTrainer` generates for the generation batch TRL
hands it, drops the all-equal groups, and generates for more prompts drawn from a dedicated, seeded stream over the
training set until it holds the generation batch's full number of groups (at most `dynamic_sampling_max_rounds`
rounds). If the rounds run out, `dynamic_sampling_exhausted` decides: `pad` fills the batch with the last round's
all-equal groups, with advantage exactly 0, or `raise` stops the run (verl). The batch that is trained on has exactly
the shape TRL expects, so the optimizer-step batch size, and with it `dr_grpo`'s constant normaliser
`B x max_completion_length`, never change. A padding row is trained as TRL trains any all-equal group without dynamic
sampling: no policy-gradient term (advantage 0), but its rows and tokens count in every `loss_type`'s normaliser and
`beta`'s KL applies to it, so one rule holds for every `loss_type` (docs/grpo-family.md).

Every decision is taken on the all-process rewards, which every rank holds, so all ranks keep the same groups and
know where each kept row goes in the batch (group-contiguous, process-major, TRL's order). Each rank keeps only the
rows of its own slice: after a round, every rank in turn broadcasts its rows that the batch takes, and each rank
keeps those that fall in its slice. So a rank holds at most its slice (its `per_device_train_batch_size x
steps_per_generation` rows) plus, during a round's exchange, one rank's selected rows (at most as many), never the
all-process rows of a round. TRL's logs are re-done for the assembled batch (drgrpo/algorithm/batch_logs.py). The
stream's position is saved next to each checkpoint and restored on resume.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import broadcast, broadcast_object_list
from transformers import TrainerCallback
from trl.trainer.utils import pad

from drgrpo.algorithm import batch_logs
from drgrpo.algorithm.advantages import combine_rewards
from drgrpo.core.errors import RecipeError
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
    correctness: torch.Tensor, kept: torch.Tensor, group_size: int, threshold: float
) -> tuple[int, int]:
    """(all-correct, all-wrong) counts among the dropped groups, those not `kept` (informative, or used as padding); a
    dropped group not all correct counts as all wrong."""
    correct = correct_mask(correctness, threshold).view(-1, group_size).all(dim=1)
    dropped = ~kept
    return int((dropped & correct).sum()), int((dropped & ~correct).sum())


def round_selection(informative: list[bool], filled: int, target: int, final: bool) -> tuple[list[int], list[int]]:
    """Which groups of one round go into the batch, in batch order: (kept, padding) group indices.

    `kept`: the round's informative groups in order, up to the `target - filled` the batch still misses (a surplus
    is discarded). `padding`: only in the `final` round and only while the batch is still short, the round's first
    all-equal groups, as many as it misses. The batch is laid out as kept groups of round 1, round 2, ..., then the
    last round's padding, so a group's place in the batch is known as soon as its round is scored.
    """
    missing = target - filled
    kept = [group for group, useful in enumerate(informative) if useful][:missing]
    if not final or len(kept) == missing:
        return kept, []
    equal = [group for group, useful in enumerate(informative) if not useful]
    return kept, equal[: missing - len(kept)]


def concat_rows(batches: list[dict[str, torch.Tensor]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Concatenate row-wise batches (same keys), every 2-D tensor's rows padded to the longest by TRL's own
    `trl.trainer.utils.pad` (as its generation pads them: prompts on the left, the rest on the right)."""
    merged = {}
    for key in batches[0]:
        tensors = [batch[key] for batch in batches]
        if tensors[0].dim() == 2 and key in ROW_KEYS:  # (others, e.g. rewards per function, have a fixed width)
            left, value = ROW_KEYS[key]
            value = pad_token_id if value is None else value
            merged[key] = pad([row for tensor in tensors for row in tensor], value, "left" if left else "right")
        else:
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
    all-process rewards of that batch in `trainer._last_rewards_per_func` (and, with a KL in the reward, the
    all-process sequence KLs in `trainer._last_sequence_kls`).
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
        self.generated_tokens = 0  # prompt + completion tokens of every round generated (TRL counts trained ones)
        self.rows_held_peak = 0  # most batch rows this rank held at once (its slice: at most local rows)
        self.rows_received_peak = 0  # most rows of one rank's broadcast this rank received at once
        self.warned = False
        trainer.add_callback(_ResumeStreamPosition(self))

    def write_state(self, folder: Path) -> None:
        """Write the refill stream's position (`consumed` prompts, `generated_tokens`) into checkpoint `folder`."""
        state = {"consumed": self.consumed, "generated_tokens": self.generated_tokens}
        (folder / STATE_FILE).write_text(json.dumps(state))

    def fill(self, inputs: list[dict], score) -> dict[str, Any]:
        trainer, args = self.trainer, self.trainer.args
        group_size, local_rows = trainer.num_generations, len(inputs)
        all_rows = local_rows * trainer.accelerator.num_processes
        target = all_rows // group_size
        metrics = trainer._metrics["train"]
        tokens_seen = trainer.state.num_input_tokens_seen
        pieces: list[dict] = []  # this rank's rows of the batch, in batch order
        table: list[dict] = []  # per round: its completions-table rows that the batch takes
        rewards_parts: list[torch.Tensor] = []  # per round: all-process rewards of its rows the batch takes
        kl_parts: list[torch.Tensor] = []
        padding: list[bool] = []  # per batch row: a padding row (advantage 0)
        filled = rounds = dropped_correct = dropped_wrong = padded = 0
        while True:
            rounds += 1
            marks, seen_before = batch_logs.metric_marks(metrics), trainer.state.num_input_tokens_seen
            output = score(inputs)
            self.generated_tokens += trainer.state.num_input_tokens_seen - seen_before
            batch_logs.move_round_metrics(metrics, marks)
            round_table = batch_logs.take_round_rows(trainer._logs, all_rows)
            rewards_per_func = trainer._last_rewards_per_func
            rewards = combine_rewards(rewards_per_func, trainer.reward_weights)
            informative = informative_groups(rewards, group_size)
            final = rounds >= args.dynamic_sampling_max_rounds or filled + int(informative.sum()) >= target
            kept, pads = round_selection(informative.tolist(), filled, target, final)
            if pads and args.dynamic_sampling_exhausted == "raise":
                raise RecipeError(exhausted_message(rounds, filled + len(kept), target))
            not_dropped = informative.clone()
            not_dropped[pads] = True
            correctness = (
                rewards if trainer._correctness_index is None else rewards_per_func[:, trainer._correctness_index]
            )
            correct, wrong = dropped_outcomes(correctness, not_dropped, group_size, args.correctness_threshold)
            dropped_correct, dropped_wrong = dropped_correct + correct, dropped_wrong + wrong
            sources = [group * group_size + i for group in kept + pads for i in range(group_size)]
            pad_rows_here = {group * group_size + i for group in pads for i in range(group_size)}
            padding += [row in pad_rows_here for row in sources]
            rewards_parts.append(rewards_per_func[sources])
            if trainer._last_sequence_kls is not None:
                kl_parts.append(trainer._last_sequence_kls[sources])
            table.append(batch_logs.select_rows(round_table, sources, pad_rows_here))
            pieces += self._take_slice(output, sources, first_slot=filled * group_size, local_rows=local_rows)
            self.rows_held_peak = max(self.rows_held_peak, sum(len(piece["advantages"]) for piece in pieces))
            filled += len(kept) + len(pads)
            padded += len(pads)
            if final:
                break
            inputs = self._refill(local_rows)
        if padded and not self.warned:
            self.warned = True
            logger.warning(
                "dynamic_sampling: %d rounds gave %d of %d informative groups; %d groups with all-equal rewards fill "
                "the batch with advantage 0 (no policy-gradient term). Raise dynamic_sampling_max_rounds, check the "
                "task's difficulty, or set dynamic_sampling_exhausted: raise (this warning is shown once; "
                "dynamic_sampling/groups_padded counts every step).",
                rounds,
                target - padded,
                target,
                padded,
            )
        local = concat_rows(pieces, trainer._tokenizer.pad_token_id)
        trainer._last_rewards_per_func = torch.cat(rewards_parts)
        start = trainer.accelerator.process_index * local_rows
        local_padding = torch.tensor(padding[start : start + local_rows], device=local["advantages"].device)
        # The batch's figures under TRL's names (and diag/): every row is trained, padding included (advantage 0).
        self._log_trained_batch(local, torch.cat(kl_parts) if kl_parts else None, tokens_seen)
        batch_logs.put_rows(trainer._logs, table)
        trainer._log_batch_diagnostics(local, "train", group_size)
        local["advantages"] = local["advantages"].masked_fill(local_padding, 0.0)
        # The padding rows keep their completion mask: counted in every loss_type's normaliser, as TRL counts an
        # all-equal group (the tokens TRL's loss divides by under dapo, whole batch, all processes).
        loss_mask = local["completion_mask"] * local.get("tool_mask", 1)
        local["num_items_in_batch"] = trainer.accelerator.gather(loss_mask.sum()).sum()
        padding_tokens = (local["prompt_mask"].sum(dim=1) + loss_mask.sum(dim=1))[local_padding].sum()
        metrics[metric_names.DYNAMIC_SAMPLING_PADDING_TOKENS].append(
            float(trainer.accelerator.gather(padding_tokens).sum())
        )
        metrics[metric_names.DYNAMIC_SAMPLING_ROUNDS].append(float(rounds))
        metrics[metric_names.DYNAMIC_SAMPLING_DROPPED_ALL_CORRECT].append(float(dropped_correct))
        metrics[metric_names.DYNAMIC_SAMPLING_DROPPED_ALL_WRONG].append(float(dropped_wrong))
        metrics[metric_names.DYNAMIC_SAMPLING_PROMPTS_CONSUMED].append(float(rounds * target))
        metrics[metric_names.DYNAMIC_SAMPLING_GROUPS_PADDED].append(float(padded))
        return local

    def _take_slice(self, output: dict[str, Any], sources: list[int], first_slot: int, local_rows: int) -> list[dict]:
        """This rank's rows among a round's `sources` (all-process row numbers, in batch order from `first_slot`).

        Each rank in turn broadcasts its own rows that the batch takes; every rank keeps those that land in its
        slice `[rank x local_rows, (rank + 1) x local_rows)`. Returns the kept rows, as one or more row batches in
        batch order (their widths may differ; `concat_rows` pads them).
        """
        accelerator = self.trainer.accelerator
        unknown = set(output) - set(ROW_KEYS) - {"advantages", "num_items_in_batch"}
        if unknown:
            raise ValueError(
                f"dynamic_sampling cannot regroup the generation outputs {sorted(unknown)} (multimodal inputs are not "
                "supported yet); set dynamic_sampling: false."
            )
        keys = sorted(key for key in output if key != "num_items_in_batch")
        rank, world = accelerator.process_index, accelerator.num_processes
        mine = range(rank * local_rows, (rank + 1) * local_rows)
        slots = range(first_slot, first_slot + len(sources))
        if world == 1:
            rows = [row for slot, row in zip(slots, sources, strict=True) if slot in mine]
            return [{key: output[key][rows] for key in keys}] if rows else []
        # Every rank's row widths, so that receivers can allocate what a sender broadcasts.
        widths = accelerator.gather(
            torch.tensor(
                [output[key].size(1) if output[key].dim() == 2 else -1 for key in keys], device=accelerator.device
            )
        ).view(world, len(keys))
        received = []
        for sender in range(world):
            sent = [(slot, row) for slot, row in zip(slots, sources, strict=True) if row // local_rows == sender]
            if not sent:
                continue
            if sender == rank:
                rows = [row - sender * local_rows for _, row in sent]
                buffer = {key: output[key][rows].contiguous() for key in keys}
            else:
                buffer = {
                    key: torch.empty(
                        (len(sent), int(widths[sender, k])) if widths[sender, k] >= 0 else (len(sent),),
                        dtype=output[key].dtype,
                        device=output[key].device,
                    )
                    for k, key in enumerate(keys)
                }
            buffer = broadcast(buffer, from_process=sender)
            self.rows_received_peak = max(self.rows_received_peak, len(sent))
            keep = [j for j, (slot, _) in enumerate(sent) if slot in mine]
            if keep:
                received.append(([sent[j][0] for j in keep], {key: value[keep] for key, value in buffer.items()}))
        if not received:
            return []
        # Rows from several senders, back in batch order.
        slots_here = [slot for part_slots, _ in received for slot in part_slots]
        merged = concat_rows([part for _, part in received], self.trainer._tokenizer.pad_token_id)
        order = sorted(range(len(slots_here)), key=slots_here.__getitem__)
        return [{key: value[order] for key, value in merged.items()}]

    def _log_trained_batch(self, local: dict, sequence_kls: torch.Tensor | None, tokens_seen: int) -> None:
        """TRL's figures (reward, frac_reward_zero_std, completions/*, sampling/*, num_tokens) and the KL in the
        reward for the assembled batch; `dynamic_sampling/generated_num_tokens` counts every round's tokens."""
        trainer = self.trainer
        gather = trainer.accelerator.gather
        lengths, truncated = batch_logs.trl_lengths(trainer, local)
        values = batch_logs.reward_metrics(
            trainer._last_rewards_per_func, trainer.reward_weights, trainer.reward_func_names, trainer.num_generations
        )
        values.update(batch_logs.completion_metrics(gather(lengths).cpu(), gather(truncated).cpu()))
        values.update(batch_logs.sampling_metrics(trainer, local))
        if sequence_kls is not None:
            values[metric_names.KL_IN_REWARD] = sequence_kls.float().mean().item()
        metrics = trainer._metrics["train"]
        for name, value in values.items():
            metrics[name].append(value)
        tokens = gather(local["prompt_mask"].sum() + lengths.sum()).sum().item()
        trainer.state.num_input_tokens_seen = tokens_seen + tokens
        metrics[metric_names.TRL_NUM_TOKENS] = [trainer.state.num_input_tokens_seen]
        metrics[batch_logs.GENERATED + metric_names.TRL_NUM_TOKENS] = [self.generated_tokens]

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


def exhausted_message(rounds: int, informative: int, target: int) -> str:
    """The one-line error of `dynamic_sampling_exhausted: raise`."""
    return (
        f"dynamic_sampling: {rounds} generation rounds (dynamic_sampling_max_rounds) gave {informative} of the "
        f"{target} groups whose rewards differ that the batch needs, and dynamic_sampling_exhausted: raise stops here, "
        "as verl does. Fix: raise dynamic_sampling_max_rounds, train on prompts of mixed difficulty, or set "
        "dynamic_sampling_exhausted: pad (the batch is then filled with all-equal groups of advantage 0)."
    )


class _ResumeStreamPosition(TrainerCallback):
    """Reads the refill stream's position back from the checkpoint a run resumes from.

    The position is written by `DynamicSampler.write_state`, which `DrGRPOTrainer` calls while it stages a checkpoint
    (drgrpo/algorithm/checkpoint_save.py), so the file is part of the same atomic save as the weights: a checkpoint
    `find_resumable_checkpoint` calls complete always holds it."""

    def __init__(self, sampler: DynamicSampler) -> None:
        self.sampler = sampler

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:
            return
        # Only the main process wrote the file (`write_state`), to its own disk: on several nodes without shared storage
        # the other ranks' disks lack it, and a rank that restarted the stream would refill from other prompts than
        # rank 0. So the main process reads it and every rank takes its value.
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}" / STATE_FILE
        is_main = self.sampler.trainer.accelerator.is_main_process
        saved = [read_stream_state(path) if is_main else None]
        saved_state = broadcast_object_list(saved, from_process=0)[0]
        if saved_state is not None:
            consumed = self.sampler.consumed = saved_state["consumed"]
            self.sampler.generated_tokens = saved_state.get("generated_tokens", 0)
            if is_main:
                logger.info("dynamic_sampling: refill stream resumes after %d prompts", consumed)
        elif is_main:
            logger.warning("dynamic_sampling: %s is missing; the refill stream restarts from its beginning", path)


def read_stream_state(path: Path) -> dict[str, int] | None:
    """A checkpoint's `STATE_FILE`: the refill stream's position (`consumed` prompts) and the tokens generated so far
    (`generated_tokens`, absent in older checkpoints), or None if the file is missing."""
    return json.loads(path.read_text()) if path.exists() else None
