"""Less padding in the trained micro-batches: sort completions by length within an optimizer step, and cut each
micro-batch to its own longest completion.

TRL pads a whole generation batch (every prompt left, every completion right) to its longest member, shuffles it and
splits it into micro-batches that all keep that width: a micro-batch of short answers still runs forward and backward
over the longest answer's width. Cutting the completion columns that are right padding in every row of a
micro-batch changes no term of the loss: causal attention never lets an earlier token see them, their mask is 0,
and `dr_grpo` divides by the constant `max_completion_length`, not by the width. It does change the forward's
rounding: the kernels compute a narrower or differently composed micro-batch in another order, so its log-probs
differ from the full-width ones in the last bits: about 1e-6 in float32, up to 0.4 in bf16 (issue 42).

That is harmless where pi_old is the loss forward's own output, detached (TRL does so unless it recomputes pi_old):
the ratio pi_theta / pi_old is then exactly 1 at the first update, whatever the layout. Where TRL recomputes pi_old
(`drgrpo.algorithm.family.recomputes_old_logprobs`: gradient_accumulation_steps not a multiple of
steps_per_generation x num_iterations, so rollouts are trained after an update, or vLLM's importance-sampling
correction) it does so in its own micro-batches at the whole batch's width, and a loss forward over other rows at
another width read a first-update ratio of 1.0005 in bf16 (max |log ratio| 0.417, 0.83% of the tokens clipped). So
nothing is sorted or cut there (`micro_batch_layout`): the loss sees TRL's micro-batches and its ratio is TRL's,
exactly 1 at the first update (tests/test_micro_batch_layout.py, bf16 and float32). Computing pi_old again on our
micro-batches would keep the speed-up there for one more forward pass over the batch.

(Prompt columns are kept: the training forward numbers positions from the first column, so cutting left padding
would shift every position, and in bf16 pi_theta/pi_old at the first update moved off 1 by up to 0.4% when it did.)
Sorting by completion length first, within the micro-batches of one optimizer step only, puts similar lengths
together so that more columns go; the step's loss is the same for every loss whose micro-batch terms do not depend on
which completions share a micro-batch. Those that do (`grouping_changes_the_loss`) keep TRL's order and are only cut.
"""

from __future__ import annotations

import torch

from drgrpo.algorithm.shared_prompt import prompt_groups

# Tensors TRL puts in a text-only training batch: prompt-width, completion-width and per-row ones. A batch with any
# other key (images, token type ids) is left as TRL made it.
PROMPT_KEYS = ("prompt_ids", "prompt_mask")
COMPLETION_KEYS = (
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "tool_mask",
    "importance_sampling_ratio",
)
ROW_KEYS = ("advantages", "num_items_in_batch")
KNOWN_KEYS = frozenset(PROMPT_KEYS + COMPLETION_KEYS + ROW_KEYS)
GROUPING_DEPENDENT_LOSSES = frozenset({"bnpo"})


def grouping_changes_the_loss(
    loss_type: str, top_entropy_quantile: float, entropy_bonus: bool, router_aux_loss: bool
) -> bool:
    """Whether a micro-batch's loss term depends on which completions share the micro-batch (TRL 1.16
    `GRPOTrainer._compute_loss`), so that sorting would change the step's loss: `bnpo` divides by the micro-batch's
    own token count; `top_entropy_quantile < 1` trains the tokens above the micro-batch's entropy quantile; the
    entropy bonus (`entropy_coef`, adaptive or not) is the micro-batch's token mean of the entropy (issue 42: step
    loss -0.490677 in TRL's grouping, -0.490693 sorted, at 0.1); a MoE router's load-balancing loss is the
    micro-batch's. Each is over the unmasked tokens only, so cutting padding columns leaves it as it was."""
    return loss_type in GROUPING_DEPENDENT_LOSSES or top_entropy_quantile < 1.0 or entropy_bonus or router_aux_loss


def micro_batch_layout(
    sort_by_length: bool, recomputes_old_logprobs: bool, grouping_dependent: bool
) -> tuple[bool, bool]:
    """(cut, sort): whether the trainer cuts each micro-batch's padding columns, and whether it sorts an optimizer
    step's completions by length first (module docstring). Neither where TRL recomputes pi_old in its own
    micro-batches; no sorting where `grouping_changes_the_loss`."""
    cut = sort_by_length and not recomputes_old_logprobs
    return cut, cut and not grouping_dependent


def trimmable(batch: dict) -> bool:
    """Whether `batch` holds only the text tensors this module knows how to cut."""
    return set(batch) <= KNOWN_KEYS and all(key in batch for key in ("prompt_mask", "completion_mask"))


def trim_padding(batch: dict) -> dict:
    """`batch` without the completion columns that are right padding in every row (at least one column is kept).
    Prompt columns and per-row entries are unchanged."""
    completion_used = batch["completion_mask"].bool().any(dim=0)
    completion_end = int(completion_used.nonzero().max()) + 1 if completion_used.any() else 1
    width = batch["completion_mask"].size(1)
    out = {}
    for key, value in batch.items():
        if key in COMPLETION_KEYS and torch.is_tensor(value) and value.dim() == 2 and value.size(1) == width:
            out[key] = value[:, :completion_end]
        else:
            out[key] = value
    return out


def _rows(batch: dict, index: torch.Tensor) -> dict:
    return {k: v[index] if torch.is_tensor(v) and v.dim() > 0 else v for k, v in batch.items()}


def _concat(batches: list[dict]) -> dict:
    return {
        k: torch.cat([b[k] for b in batches]) if torch.is_tensor(v) and v.dim() > 0 else v
        for k, v in batches[0].items()
    }


def sort_within_steps(micro_batches: list[dict], micro_batches_per_step: int, by_prompt: bool = False) -> list[dict]:
    """The same rows, re-split so that within each run of `micro_batches_per_step` consecutive micro-batches (one
    optimizer step) the completions are ordered by length (tokens in `completion_mask`, then prompt length; a stable
    sort), or with `by_prompt` by prompt first (the rows of one prompt together, each prompt's by length: the loss
    forward then computes each prompt once, drgrpo/algorithm/shared_prompt.py). The micro-batch sizes and which step
    each row is trained in are unchanged."""
    out = []
    for start in range(0, len(micro_batches), micro_batches_per_step):
        window = micro_batches[start : start + micro_batches_per_step]
        sizes = [b["completion_mask"].size(0) for b in window]
        merged = _concat(window)
        lengths = merged["completion_mask"].sum(dim=1) * (merged["prompt_mask"].size(1) + 1) + merged[
            "prompt_mask"
        ].sum(dim=1)
        if by_prompt:
            _, prompts = prompt_groups(merged["prompt_ids"], merged["prompt_mask"])
            lengths = prompts * (int(lengths.max()) + 1) + lengths
        ordered = _rows(merged, torch.argsort(lengths, stable=True))
        offset = 0
        for size in sizes:
            out.append({k: v[offset : offset + size] if torch.is_tensor(v) and v.dim() > 0 else v
                        for k, v in ordered.items()})  # fmt: skip
            offset += size
    return out


def bucket_micro_batches(
    micro_batches: list[dict], micro_batches_per_step: int, *, sort: bool, by_prompt: bool = False
) -> list[dict]:
    """`sort_within_steps` (when `sort` and every micro-batch is trimmable and whole steps fit; `by_prompt`: grouped
    by prompt first), then `trim_padding` on each trimmable micro-batch; anything else is returned as TRL made it."""
    if not micro_batches or not all(trimmable(b) for b in micro_batches):
        return micro_batches
    if sort and micro_batches_per_step > 1 and len(micro_batches) % micro_batches_per_step == 0:
        micro_batches = sort_within_steps(micro_batches, micro_batches_per_step, by_prompt)
    return [trim_padding(b) for b in micro_batches]
