"""The length bias measured on a real chat model's own answers, without training drift: fixed rollout batches, one
update per loss from the same weights, and the change of the mean length of *fresh* wrong and right answers.

The tiny model's mechanism (`drgrpo.experiments.bias.mechanism`) reads an exact expected tail length because its tail
is one repeated character. A real model's answer has no such tail, so here the length is that of whole answers, and
the change is estimated on answers the update never saw:

1. for each of `prompts_per_batch` prompts, sample `2 x group_size` answers from the policy (temperature as in
   training); the first `group_size` are the update's group, the other `group_size` the probe;
2. grade both halves with the training reward's grader (an answer cut off at the length limit counts as wrong, as
   `zero_reward_for_truncated` makes it in training);
3. for each algorithm (GRPO: std-scaled advantages, TRL's `grpo` loss with `1/|o_i|`; Dr.GRPO: no std, `dr_grpo`
   loss), one gradient step of parameter-space length `step_norm` on its loss from the *same* weights;
4. each probe answer's log-probability ratio `r = pi'(o) / pi(o)` under the updated weights gives, by self-normalised
   importance weighting, the mean length of the policy's wrong (right) answers to that prompt after the update:
   `sum_wrong |o| r / sum_wrong r`, minus the probe's plain mean before it. Averaged over a batch's prompts (weighted
   by their wrong, or right, probe answers), it is one batch's change; the mean and standard error over batches is
   the result.

Weighting within one prompt removes a change of *which* prompts are wrong; the probe answers being fresh removes the
update's direct pull on its own samples. What remains is what the end-to-end runs track: whether one update makes the
policy's wrong answers longer and its right ones shorter. Expected from the paper (section 3.1): GRPO lengthens the
wrong and shortens the right; Dr.GRPO, whose expected update is the policy gradient itself, moves neither by design
(a length change only follows where length changes the reward). Both algorithms' updates are scored on the same probe
answers, so their per-batch difference (GRPO minus Dr.GRPO) is also reported with its standard error: the probe's
sampling noise, shared by the two, partly cancels in it.

Each batch is drawn from its own seed (`settings.seed`, batch index) and kept as one line of a JSON-lines file as it
finishes, so a long measurement can be split over several commands (a `Deadline`, drgrpo/experiments/budget.py) and
continued, or extended by more batches, with the same numbers as one uninterrupted run.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from drgrpo.algorithm.advantages import group_advantages
from drgrpo.core.errors import RecipeError
from drgrpo.core.threads import adapt_torch_threads
from drgrpo.experiments.bias.loss_weights import token_weights
from drgrpo.experiments.bias.mechanism import ALGORITHMS, mean_and_standard_error, sample_groups
from drgrpo.experiments.budget import Deadline, OutOfTime
from drgrpo.experiments.load import load_average
from rewards.grading import grade_batch

logger = logging.getLogger(__name__)


@dataclass
class ChatMechanismSettings:
    """How many fixed batches, of what shape, sampled how, and how far each update moves the weights."""

    num_batches: int = 24
    prompts_per_batch: int = 4
    group_size: int = 8
    max_completion_length: int = 128
    temperature: float = 0.7
    # About 0.1 nats of mean |log-ratio| per probe answer on SmolLM2 (a pilot at 0.02 gave 0.65-0.84: importance
    # weights spread over e^+-0.8, outside the first-order regime the mechanism is about).
    step_norm: float = 0.0025
    micro_batch: int = 8
    seed: int = 0


def importance_weighted_mean(values: Sequence[float], log_ratios: Sequence[float]) -> float:
    """Self-normalised importance estimate of the mean of `values` under the updated policy from samples of the
    current one: `sum v_i exp(l_i) / sum exp(l_i)`, `l_i` the log-probability ratios (shifted by their maximum, which
    leaves the estimate unchanged, so that `exp` cannot overflow)."""
    if len(values) != len(log_ratios) or not values:
        raise ValueError(f"need one log-ratio per value, got {len(values)} values and {len(log_ratios)} ratios")
    top = max(log_ratios)
    weights = [torch.tensor(lr - top, dtype=torch.float64).exp().item() for lr in log_ratios]
    return sum(v * w for v, w in zip(values, weights, strict=True)) / sum(weights)


def length_change(lengths: Sequence[int], log_ratios: Sequence[float], selected: Sequence[bool]) -> tuple[float, int]:
    """(change of the mean length of the `selected` answers to one prompt, how many were selected): the importance
    estimate after the update minus the plain mean before. (NaN, 0) when none is selected."""
    chosen = [i for i, s in enumerate(selected) if s]
    if not chosen:
        return float("nan"), 0
    values = [float(lengths[i]) for i in chosen]
    after = importance_weighted_mean(values, [log_ratios[i] for i in chosen])
    return after - sum(values) / len(values), len(chosen)


def pooled_change(changes: Sequence[tuple[float, int]]) -> float | None:
    """A batch's change: the per-prompt changes averaged with their answer counts as weights (None if no answers)."""
    total = sum(n for _, n in changes)
    if total == 0:
        return None
    return sum(c * n for c, n in changes if n) / total


def micro_batches(mask: torch.Tensor, micro_batch: int):
    """(rows, width) groups of at most `micro_batch` completions, shortest first, each cut to its longest completion:
    padding columns would cost forward and backward compute for nothing (the model is causal and pads on the right)."""
    lengths = mask.sum(1)
    order = torch.argsort(lengths, stable=True)
    for start in range(0, len(order), micro_batch):
        rows = order[start : start + micro_batch]
        yield rows, int(lengths[rows].max())


def _summed_logps(model, prompt_ids, completion_ids, mask, temperature: float) -> torch.Tensor:
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    logits = model(input_ids=input_ids, logits_to_keep=completion_ids.shape[1] + 1).logits[:, :-1]
    logps = (logits / temperature).log_softmax(-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    return (logps * mask).sum(1)


def sequence_logps(model, prompt_ids, completion_ids, mask, temperature: float, micro_batch: int) -> torch.Tensor:
    """Sum over each completion's tokens (up to its end-of-sequence, `mask`) of log pi(token), at the sampling
    temperature as TRL scores them (logits / temperature), without a graph; in the completions' order."""
    sums = torch.empty(completion_ids.shape[0], dtype=torch.float32)
    with torch.no_grad():
        for rows, width in micro_batches(mask, micro_batch):
            sums[rows] = _summed_logps(
                model, prompt_ids[rows], completion_ids[rows, :width], mask[rows, :width], temperature
            )
    return sums


def algorithm_gradients(model, prompt_ids, completion_ids, mask, weights: dict, settings: ChatMechanismSettings):
    """{algorithm: gradient of `-sum_i w_i sum_t log pi(o_it)`} for each algorithm's per-token weights, from one
    forward pass per micro-batch (one backward per algorithm), so that memory stays that of one micro-batch."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads = {name: [torch.zeros_like(p) for p in params] for name in weights}
    names = list(weights)
    for rows, width in micro_batches(mask, settings.micro_batch):
        sums = _summed_logps(
            model, prompt_ids[rows], completion_ids[rows, :width], mask[rows, :width], settings.temperature
        )
        for k, name in enumerate(names):
            loss = -(weights[name][rows] * sums).sum()
            for acc, g in zip(grads[name], torch.autograd.grad(loss, params, retain_graph=k < len(names) - 1),
                              strict=True):  # fmt: skip
                acc += g
    return params, grads


def apply_step(params, grads, step_norm: float) -> None:
    """`normalised_step` for an already accumulated gradient: move the weights `step_norm` along minus it."""
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).item()
    with torch.no_grad():
        for p, g in zip(params, grads, strict=True):
            p.sub_(step_norm * g / norm)


SIDES = {"negative": False, "positive": True}  # A < 0: the wrong answers; A > 0: the right ones
COUNTS = ("update_wrong", "update_right", "probe_wrong", "probe_right", "truncated", "groups_flat")


def measure_batch(model, tokenizer, prompts, golds, settings: ChatMechanismSettings, index: int, start_weights):
    """Batch `index`: sample, grade, one update per algorithm from `start_weights` (restored after each), and the
    importance-weighted change of the probe's wrong / right answer lengths. A JSON-able record (`summarise`)."""
    begin = time.perf_counter()
    adapt_torch_threads()  # the cores other processes leave free (drgrpo/core/threads.py)
    rng = random.Random(f"{settings.seed}-{index}")  # each batch its own prompts and samples: resumable
    torch.manual_seed(settings.seed * 1_000_003 + index)
    G, C, P = settings.group_size, settings.max_completion_length, settings.prompts_per_batch
    chosen = rng.sample(range(len(prompts)), P)
    batch_prompts = [prompts[i] for i in chosen]
    batch_golds = [golds[i] for i in chosen for _ in range(2 * G)]
    prompt_ids, completion_ids, mask, texts = sample_groups(
        model, tokenizer, batch_prompts, 2 * G, C, temperature=settings.temperature
    )
    lengths = mask.sum(1)
    ended = (completion_ids == tokenizer.eos_token_id).any(1)
    graded = grade_batch(texts, batch_golds, prompts=[p for p in batch_prompts for _ in range(2 * G)])
    correct = torch.tensor([bool(r.verdict) for r in graded]) & ended
    rows = torch.arange(len(texts)).view(P, 2 * G)
    update, probe = rows[:, :G].reshape(-1), rows[:, G:].reshape(-1)
    rewards = correct[update].double()
    probe_lengths, probe_correct = lengths[probe].tolist(), correct[probe].tolist()
    record = {
        "batch": index,
        "settings": _comparable(settings),
        "counts": {
            "update_right": int(rewards.sum()), "update_wrong": int((1 - rewards).sum()),
            "probe_right": int(correct[probe].sum()), "probe_wrong": int((~correct[probe]).sum()),
            "truncated": int((~ended).sum()),
            "groups_flat": int((group_advantages(rewards, G, scale_by_std=False).view(-1, G) == 0).all(1).sum()),
        },
        "probe_lengths": {side: [n for n, c in zip(probe_lengths, probe_correct, strict=True) if c == want]
                          for side, want in SIDES.items()},
        "changes": {name: dict.fromkeys(SIDES) for name in ALGORITHMS},
        "mean_abs_log_ratio": dict.fromkeys(ALGORITHMS),
    }  # fmt: skip
    weights = {}
    for name, (loss_type, scaled) in ALGORITHMS.items():
        advantages = group_advantages(rewards, G, scale_by_std=scaled)
        weights[name] = torch.tensor(token_weights(advantages.tolist(), lengths[update].tolist(), loss_type, C))
    if all(bool((w == 0).all()) for w in weights.values()):
        logger.warning("mechanism batch %d: every group all right or all wrong, no update", index)
    else:
        params, grads = algorithm_gradients(
            model, prompt_ids[update], completion_ids[update], mask[update], weights, settings
        )
        probe_args = (prompt_ids[probe], completion_ids[probe], mask[probe], settings.temperature, settings.micro_batch)
        before = sequence_logps(model, *probe_args)
        for name in ALGORITHMS:
            apply_step(params, grads[name], settings.step_norm)
            log_ratios = (sequence_logps(model, *probe_args) - before).tolist()
            model.load_state_dict(start_weights)
            record["mean_abs_log_ratio"][name] = sum(abs(x) for x in log_ratios) / len(log_ratios)
            for side, want in SIDES.items():
                per_prompt = [
                    length_change(probe_lengths[g], log_ratios[g], [c == want for c in probe_correct[g]])
                    for g in (slice(p * G, (p + 1) * G) for p in range(P))
                ]
                record["changes"][name][side] = pooled_change(per_prompt)
    record["seconds"] = round(time.perf_counter() - begin, 1)
    record["load"] = load_average()
    return record


def summarise(records: Sequence[dict], settings: ChatMechanismSettings) -> dict:
    """`{algorithm: {tail_change_negative, ..._se, tail_change_positive, ..._se}}` over the batch records (the names
    the tiny experiment's report reads: here the change of the mean length of fresh wrong, A < 0, and right, A > 0,
    answers, in tokens per update), plus `details`: the paired difference GRPO minus Dr.GRPO, counts, probe lengths,
    mean |log-ratio| per algorithm, settings, seconds and load."""
    result: dict = {}
    for name in ALGORITHMS:
        result[name] = {}
        for side in SIDES:
            mean, se = mean_and_standard_error(_values(records, name, side))
            result[name][f"tail_change_{side}"], result[name][f"tail_change_{side}_se"] = mean, se
    difference = {}
    for side in SIDES:
        pairs = [
            r["changes"] for r in records if None not in (r["changes"]["grpo"][side], r["changes"]["dr_grpo"][side])
        ]
        mean, se = mean_and_standard_error([c["grpo"][side] - c["dr_grpo"][side] for c in pairs])
        difference[f"tail_change_{side}"], difference[f"tail_change_{side}_se"] = mean, se
    lengths = {side: [n for r in records for n in r["probe_lengths"][side]] for side in SIDES}
    ratios = {name: [r["mean_abs_log_ratio"][name] for r in records if r["mean_abs_log_ratio"][name] is not None]
              for name in ALGORITHMS}  # fmt: skip
    seconds = sum(r["seconds"] for r in records)
    # Time-weighted; a batch timed at 0.0 s (rounded, on the tiny model) still counts.
    loads = [(max(r["seconds"], 1e-3), r["load"]) for r in records if r["load"] is not None]
    result["details"] = {
        "grpo_minus_dr_grpo": difference,
        "completions": {k: sum(r["counts"][k] for r in records) for k in COUNTS},
        "batches": {side: len(_values(records, "grpo", side)) for side in SIDES},
        "batches_measured": len(records),
        "mean_abs_log_ratio": {name: sum(v) / max(1, len(v)) for name, v in ratios.items()},
        "probe_length_wrong": sum(lengths["negative"]) / max(1, len(lengths["negative"])),
        "probe_length_right": sum(lengths["positive"]) / max(1, len(lengths["positive"])),
        "per_batch": {name: {side: _values(records, name, side) for side in SIDES} for name in ALGORITHMS},
        "settings": asdict(settings),
        "seconds": round(seconds, 1),
        "load": round(sum(t * v for t, v in loads) / sum(t for t, _ in loads), 2) if loads else None,
    }
    return result


def run_chat_mechanism(
    model_path: str,
    prompts: Sequence[str],
    golds: Sequence[str],
    settings: ChatMechanismSettings,
    batches_file: str | Path | None = None,
    deadline: Deadline | None = None,
) -> dict:
    """The fixed-batch experiment on the chat model in `model_path`; `prompts` are rendered prompt texts (chat template
    applied) of one token length, `golds` their answers. Returns `summarise`'s result over `settings.num_batches`.

    With `batches_file`, the batches already in it are kept and each new one is appended as it finishes; a batch
    that would not finish before `deadline` (judged by the mean batch time so far) is not started: `OutOfTime`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    deadline = deadline or Deadline()
    done = read_batches(batches_file, settings) if batches_file else {}
    todo = [i for i in range(settings.num_batches) if i not in done]
    if todo:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        model.eval()  # no dropout; gradients still flow
        start_weights = {k: v.clone() for k, v in model.state_dict().items()}
    for index in todo:
        timed = [r["seconds"] for r in done.values()]
        if deadline.remaining() < (sum(timed) / len(timed) if timed else 0.0):
            raise OutOfTime(
                f"mechanism: {len(done)} of {settings.num_batches} batches kept in {batches_file}; batch {index + 1} "
                "would not finish within the time budget"
            )
        done[index] = record = measure_batch(model, tokenizer, prompts, golds, settings, index, start_weights)
        if batches_file:
            with open(batches_file, "a") as f:
                f.write(json.dumps(record) + "\n")
        logger.warning(
            "mechanism batch %d/%d (%.0f s, load %s): update %d right of %d; change of wrong / right answer length: "
            "grpo %s / %s, dr_grpo %s / %s tokens", index + 1, settings.num_batches, record["seconds"], record["load"],
            record["counts"]["update_right"], settings.prompts_per_batch * settings.group_size,
            *[_signed(record["changes"][n][s]) for n in ALGORITHMS for s in SIDES],
        )  # fmt: skip
    return summarise([done[i] for i in range(settings.num_batches)], settings)


def read_batches(path: str | Path, settings: ChatMechanismSettings) -> dict[int, dict]:
    """{batch index: record} of the batches kept in `path` ({} if missing); batches measured with other settings
    (other than their number) are refused in one line."""
    path = Path(path)
    if not path.is_file():
        return {}
    records = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill mid-write: that batch is measured again
            logger.warning("%s line %d is not complete JSON: measuring that batch again", path, number)
            continue
        if record["settings"] != _comparable(settings):
            raise RecipeError(
                f"{path} holds mechanism batches measured with other settings ({record['settings']}, now "
                f"{_comparable(settings)}): delete it to measure again, or pass the same settings."
            )
        records[record["batch"]] = record
    return records


def _comparable(settings: ChatMechanismSettings) -> dict:
    """The settings a kept batch must share with the current run (all but how many batches there are)."""
    return {k: v for k, v in asdict(settings).items() if k != "num_batches"}


def _values(records: Sequence[dict], name: str, side: str) -> list[float]:
    return [r["changes"][name][side] for r in records if r["changes"][name][side] is not None]


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"
