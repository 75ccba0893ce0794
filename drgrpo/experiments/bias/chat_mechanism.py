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
(a length change only follows where length changes the reward).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from drgrpo.algorithm.advantages import group_advantages
from drgrpo.experiments.bias.loss_weights import token_weights
from drgrpo.experiments.bias.mechanism import ALGORITHMS, mean_and_standard_error, sample_groups
from rewards.grading import grade_batch

logger = logging.getLogger(__name__)


@dataclass
class ChatMechanismSettings:
    """How many fixed batches, of what shape, sampled how, and how far each update moves the weights."""

    num_batches: int = 30
    prompts_per_batch: int = 4
    group_size: int = 8
    max_completion_length: int = 128
    temperature: float = 0.7
    step_norm: float = 0.02
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


def sequence_logps(model, prompt_ids, completion_ids, mask, temperature: float, micro_batch: int, grad: bool = False):
    """Sum over each completion's tokens (up to its end-of-sequence, `mask`) of log pi(token), at the sampling
    temperature as TRL scores them (logits / temperature); without a graph unless `grad`."""
    sums = []
    for start in range(0, completion_ids.shape[0], micro_batch):
        part = slice(start, start + micro_batch)
        with torch.set_grad_enabled(grad):
            input_ids = torch.cat([prompt_ids[part], completion_ids[part]], dim=1)
            logits = model(input_ids=input_ids, logits_to_keep=completion_ids.shape[1] + 1).logits[:, :-1]
            logps = (logits / temperature).log_softmax(-1).gather(-1, completion_ids[part].unsqueeze(-1)).squeeze(-1)
            sums.append((logps * mask[part]).sum(1))
    return torch.cat(sums)


def algorithm_gradients(model, prompt_ids, completion_ids, mask, weights: dict, settings: ChatMechanismSettings):
    """{algorithm: gradient of `-sum_i w_i sum_t log pi(o_it)`} for each algorithm's per-token weights, from one
    forward pass per micro-batch (one backward per algorithm), so that memory stays that of one micro-batch."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads = {name: [torch.zeros_like(p) for p in params] for name in weights}
    for start in range(0, completion_ids.shape[0], settings.micro_batch):
        part = slice(start, start + settings.micro_batch)
        sums = sequence_logps(
            model, prompt_ids[part], completion_ids[part], mask[part], settings.temperature, settings.micro_batch, True
        )
        names = list(weights)
        for k, name in enumerate(names):
            loss = -(weights[name][part] * sums).sum()
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


def run_chat_mechanism(model_path: str, prompts: Sequence[str], golds: Sequence[str], settings) -> dict:
    """The fixed-batch experiment on the chat model in `model_path`; `prompts` are rendered prompt texts (chat template
    applied) of one token length, `golds` their answers.

    Returns `{algorithm: {tail_change_negative, ..._se, tail_change_positive, ..._se}}` (the names the tiny
    experiment's report reads: here the change of the mean length of fresh wrong, A < 0, and right, A > 0, answers, in
    tokens per update), plus `details` (counts, lengths, mean |log-ratio| per algorithm, settings, seconds)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model.eval()  # no dropout; gradients still flow
    start_weights = {k: v.clone() for k, v in model.state_dict().items()}
    G, C = settings.group_size, settings.max_completion_length
    changes = {name: {"negative": [], "positive": []} for name in ALGORITHMS}
    ratio_sizes = {name: [] for name in ALGORITHMS}
    kinds = ("update_wrong", "update_right", "probe_wrong", "probe_right", "truncated", "groups_flat")
    counts = dict.fromkeys(kinds, 0)
    lengths_seen = {"wrong": [], "right": []}
    begin = time.perf_counter()
    indices = list(range(len(prompts)))
    for batch_index in range(settings.num_batches):
        chosen = rng.sample(indices, settings.prompts_per_batch)
        batch_prompts = [prompts[i] for i in chosen]
        batch_golds = [golds[i] for i in chosen for _ in range(2 * G)]
        prompt_ids, completion_ids, mask, texts = sample_groups(
            model, tokenizer, batch_prompts, 2 * G, C, temperature=settings.temperature
        )
        lengths = mask.sum(1)
        ended = (completion_ids == tokenizer.eos_token_id).any(1)
        graded = grade_batch(texts, batch_golds, prompts=[p for p in batch_prompts for _ in range(2 * G)])
        correct = torch.tensor([bool(r.verdict) for r in graded]) & ended
        counts["truncated"] += int((~ended).sum())
        rows = torch.arange(len(texts)).view(settings.prompts_per_batch, 2 * G)
        update, probe = rows[:, :G].reshape(-1), rows[:, G:].reshape(-1)
        rewards = correct[update].double()
        counts["update_right"] += int(rewards.sum())
        counts["update_wrong"] += int((1 - rewards).sum())
        counts["probe_right"] += int(correct[probe].sum())
        counts["probe_wrong"] += int((~correct[probe]).sum())
        for i in probe.tolist():
            lengths_seen["right" if correct[i] else "wrong"].append(int(lengths[i]))
        weights = {}
        for name, (loss_type, scaled) in ALGORITHMS.items():
            advantages = group_advantages(rewards, G, scale_by_std=scaled)
            weights[name] = torch.tensor(token_weights(advantages.tolist(), lengths[update].tolist(), loss_type, C))
        counts["groups_flat"] += int((group_advantages(rewards, G, scale_by_std=False).view(-1, G) == 0).all(1).sum())
        if all(bool((w == 0).all()) for w in weights.values()):
            logger.warning("mechanism batch %d: every group all right or all wrong, no update", batch_index)
            continue
        params, grads = algorithm_gradients(
            model, prompt_ids[update], completion_ids[update], mask[update], weights, settings
        )
        probe_args = (prompt_ids[probe], completion_ids[probe], mask[probe], settings.temperature, settings.micro_batch)
        before = sequence_logps(model, *probe_args)
        for name in ALGORITHMS:
            apply_step(params, grads[name], settings.step_norm)
            log_ratios = (sequence_logps(model, *probe_args) - before).tolist()
            model.load_state_dict(start_weights)
            ratio_sizes[name].append(sum(abs(x) for x in log_ratios) / len(log_ratios))
            probe_lengths, probe_correct = lengths[probe].tolist(), correct[probe].tolist()
            for side, want in (("negative", False), ("positive", True)):
                per_prompt = []
                for p in range(settings.prompts_per_batch):
                    group = slice(p * G, (p + 1) * G)
                    per_prompt.append(length_change(
                        probe_lengths[group], log_ratios[group], [c == want for c in probe_correct[group]]
                    ))  # fmt: skip
                change = pooled_change(per_prompt)
                if change is not None:
                    changes[name][side].append(change)
        del grads
        logger.warning(
            "mechanism batch %d/%d (%.0f s): update %d right of %d; grpo wrong %+.3f right %+.3f, dr_grpo wrong %+.3f "
            "right %+.3f tokens (running means)", batch_index + 1, settings.num_batches, time.perf_counter() - begin,
            int(rewards.sum()), len(rewards), *[_running(changes[n][s]) for n in ALGORITHMS
                                                for s in ("negative", "positive")],
        )  # fmt: skip
    result = {}
    for name, sides in changes.items():
        result[name] = {}
        for side in ("negative", "positive"):
            mean, se = mean_and_standard_error(sides[side])
            result[name][f"tail_change_{side}"] = mean
            result[name][f"tail_change_{side}_se"] = se
    result["details"] = {
        "completions": counts,
        "batches": {side: len(changes["grpo"][side]) for side in ("negative", "positive")},
        "mean_abs_log_ratio": {name: sum(v) / max(1, len(v)) for name, v in ratio_sizes.items()},
        "probe_length_wrong": sum(lengths_seen["wrong"]) / max(1, len(lengths_seen["wrong"])),
        "probe_length_right": sum(lengths_seen["right"]) / max(1, len(lengths_seen["right"])),
        "per_batch": changes,
        "settings": asdict(settings),
        "seconds": round(time.perf_counter() - begin, 1),
    }
    return result


def _running(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
