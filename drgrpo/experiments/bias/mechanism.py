"""The length bias measured on a model, without training drift: fixed rollout batches, one update per loss from the
same weights, and the exact change of the expected tail length after wrong (A < 0) and right (A > 0) answers.

For each batch: sample `prompts_per_batch x group_size` completions from the warm-started policy, grade them with the
training reward's grader, form the group advantages of each algorithm (GRPO: std-scaled; Dr.GRPO: not), and take one
gradient step of fixed parameter-space norm `step_norm` on that algorithm's loss from the *same* weights. The loss is
`-sum_i w_i sum_t log pi(o_it)` with `w_i` the per-token weights of
`drgrpo.experiments.bias.loss_weights.token_weights`: at ratio 1 its gradient is TRL 1.16's
(`tests/test_bias_loss_weights.py` checks the weights against TRL's own loss). The step is normalised so that both
algorithms move the weights equally far and only the direction differs.

The tail after an answer is a run of one filler character (`drgrpo.experiments.bias.task`); its expected length under a
policy follows exactly from the per-position probabilities of writing one more filler character
(`expected_tail_length`), so each update's effect is measured without sampling noise. What remains is the batch-to-batch
spread, reported as a standard error over the batches.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from drgrpo.algorithm.advantages import group_advantages
from drgrpo.experiments.bias.loss_weights import token_weights
from drgrpo.experiments.bias.task import ANSWER_END, guess_checks_out, split_completion, tail_filler
from rewards.grading import grade_batch

logger = logging.getLogger(__name__)

ALGORITHMS = {"grpo": ("grpo", True), "dr_grpo": ("dr_grpo", False)}  # name -> (TRL loss_type, std-scaled A)


@dataclass
class MechanismSettings:
    """How many fixed batches, of what shape, and how far each update moves the weights."""

    num_batches: int = 60
    prompts_per_batch: int = 8
    group_size: int = 8
    max_completion_length: int = 40
    step_norm: float = 0.05
    seed: int = 0


def expected_tail_length(continue_probs: Sequence[float]) -> float:
    """E[k] of a tail that, after `j` filler characters, writes another with probability `continue_probs[j]` and
    stops otherwise, at most `len(continue_probs)` long: `sum_{j>=1} prod_{i<j} continue_probs[i]`."""
    expected, survive = 0.0, 1.0
    for prob in continue_probs:
        survive *= prob
        expected += survive
    return expected


def mean_and_standard_error(values: Sequence[float]) -> tuple[float, float]:
    """Sample mean and its standard error (sample std with ddof 1 over sqrt(n)); NaN error for fewer than 2 values."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(variance / n)


class TailProbe:
    """Expected tail length of many (prompt + answer, filler) contexts under the current weights of `model`."""

    def __init__(self, model, tokenizer, max_completion_length: int) -> None:
        self.model, self.tokenizer, self.max_completion_length = model, tokenizer, max_completion_length

    @torch.no_grad()
    def expected_lengths(self, prefixes: Sequence[str], fillers: Sequence[str], answer_tokens: Sequence[int]):
        """One forward pass over `prefix + filler * K` (K the tail budget left after the answer and the EOS)."""
        if not prefixes:  # a batch without one readable answer (e.g. a barely trained model) has no tail to measure
            return []
        budgets = [self.max_completion_length - n - 1 for n in answer_tokens]
        texts = [p + f * b for p, f, b in zip(prefixes, fillers, budgets, strict=True)]
        encoded = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        width = max(len(ids) for ids in encoded)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids in encoded])
        attention = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in encoded])
        probs = self.model(input_ids=input_ids, attention_mask=attention).logits.softmax(-1)
        results = []
        for row, (prefix, filler, budget) in enumerate(zip(prefixes, fillers, budgets, strict=True)):
            start = len(self.tokenizer(prefix, add_special_tokens=False)["input_ids"])
            filler_id = self.tokenizer.convert_tokens_to_ids(filler)
            positions = range(start - 1, start - 1 + budget)  # the distribution after j = 0..budget-1 fillers
            results.append(expected_tail_length([probs[row, p, filler_id].item() for p in positions]))
        return results


def completion_mask(completion_ids: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """1 on each completion's tokens up to and including its first end-of-sequence token, 0 after it (TRL's
    completion mask); a completion without one (cut at the length limit) is all 1s.

    (The first version built the no-eos position with `full_like` of a *bool* row, which made it 1: a cut-off answer
    was masked to its first 2 tokens, its length read as 2 and its gradient taken over those 2 tokens.)"""
    is_eos = completion_ids == eos_token_id
    no_eos = torch.full((completion_ids.shape[0],), completion_ids.shape[1], dtype=torch.long)
    first_eos = torch.where(is_eos.any(1), is_eos.long().argmax(1), no_eos)
    positions = torch.arange(completion_ids.shape[1]).unsqueeze(0)
    return (positions <= first_eos.unsqueeze(1)).long()


def sample_groups(
    model, tokenizer, prompts: Sequence[str], group_size: int, max_completion_length: int, temperature: float = 1.0
):
    """`group_size` completions per prompt at `temperature` (TRL's sampling: no top-k/top-p), group-contiguous.

    Returns (prompt ids, completion ids, completion mask, completion texts); the mask covers the tokens up to and
    including the first end-of-sequence, as TRL's."""
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    if len({len(ids) for ids in encoded}) != 1:
        raise ValueError("the mechanism batches need prompts of one token length (the bias task's are: `ab+cd=`)")
    prompt_ids = torch.tensor(encoded).repeat_interleave(group_size, dim=0)
    with torch.no_grad():
        generated = model.generate(
            input_ids=prompt_ids,
            attention_mask=torch.ones_like(prompt_ids),
            do_sample=True,
            temperature=temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_completion_length,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    completion_ids = generated[:, prompt_ids.shape[1] :]
    mask = completion_mask(completion_ids, tokenizer.eos_token_id)
    padded = completion_ids * mask + tokenizer.pad_token_id * (1 - mask)
    texts = tokenizer.batch_decode(padded, skip_special_tokens=True)
    return prompt_ids, completion_ids, mask, texts


def completion_logps(model, prompt_ids: torch.Tensor, completion_ids: torch.Tensor) -> torch.Tensor:
    """Per-token log-probabilities of the completion tokens (temperature 1), with the graph for the gradient."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    logits = model(input_ids=input_ids).logits[:, prompt_ids.shape[1] - 1 : -1]
    return logits.log_softmax(-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)


def normalised_step(model, loss: torch.Tensor, step_norm: float) -> None:
    """One gradient-descent step of parameter-space length `step_norm` on `loss` (weights changed in place)."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params)
    norm = torch.sqrt(sum((g**2).sum() for g in grads))
    with torch.no_grad():
        for p, g in zip(params, grads, strict=True):
            p.sub_(step_norm * g / norm)


def run_mechanism(model_dir: str, rows: Sequence[dict], settings: MechanismSettings) -> dict:
    """The fixed-batch experiment on the model in `model_dir`, prompts drawn from `rows` ({question, answer}).

    Returns `{algorithm: {tail_change_negative, tail_change_negative_se, tail_change_positive,
    tail_change_positive_se}}` in tokens per update, plus `details` (batch counts, settings)."""
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64)
    model.eval()  # no dropout; gradients still flow
    start_weights = {k: v.clone() for k, v in model.state_dict().items()}
    probe = TailProbe(model, tokenizer, settings.max_completion_length)
    changes = {name: {"negative": [], "positive": []} for name in ALGORITHMS}
    counts = {"negative": 0, "positive": 0, "no_signal": 0, "unmeasured": 0}
    C = settings.max_completion_length
    for _ in range(settings.num_batches):
        batch = rng.sample(list(rows), settings.prompts_per_batch)
        prompts = [row["question"] for row in batch]
        golds = [row["answer"] for row in batch for _ in range(settings.group_size)]
        prompt_ids, completion_ids, mask, texts = sample_groups(model, tokenizer, prompts, settings.group_size, C)
        correct = torch.tensor([bool(r.verdict) for r in grade_batch(texts, golds)], dtype=torch.float64)
        lengths = mask.sum(1).tolist()
        prompt_texts = [p for p in prompts for _ in range(settings.group_size)]
        # The context of each tail: the prompt, the answer as written, and the filler its own written check calls for.
        # Completions without a readable guess and ones sum or without an end-of-answer mark have no tail to measure.
        answers = [split_completion(t)[0] for t in texts]
        flags = [guess_checks_out(t) for t in texts]
        measured = [f is not None and a.endswith(ANSWER_END) for f, a in zip(flags, answers, strict=True)]
        keep = [i for i, m in enumerate(measured) if m]
        counts["unmeasured"] += len(texts) - len(keep)
        prefixes = [prompt_texts[i] + answers[i] for i in keep]
        fillers = [tail_filler(flags[i]) for i in keep]
        answer_tokens = [len(answers[i]) for i in keep]  # one token per character (the tiny model's tokenizer)
        before = probe.expected_lengths(prefixes, fillers, answer_tokens)
        for name, (loss_type, scaled) in ALGORITHMS.items():
            advantages = group_advantages(correct, settings.group_size, scale_by_std=scaled)
            weights = torch.tensor(token_weights(advantages.tolist(), lengths, loss_type, C), dtype=torch.float64)
            logps = completion_logps(model, prompt_ids, completion_ids)
            loss = -(weights * (logps * mask).sum(1)).sum()
            normalised_step(model, loss, settings.step_norm)
            after = probe.expected_lengths(prefixes, fillers, answer_tokens)
            model.load_state_dict(start_weights)
            for side, selected in (("negative", advantages < 0), ("positive", advantages > 0)):
                chosen = [bool(selected[i]) for i in keep]
                deltas = [a - b for a, b, s in zip(after, before, chosen, strict=True) if s]
                if deltas:
                    changes[name][side].append(sum(deltas) / len(deltas))
        advantages = group_advantages(correct, settings.group_size, scale_by_std=False)
        counts["negative"] += int((advantages < 0).sum())
        counts["positive"] += int((advantages > 0).sum())
        counts["no_signal"] += int((advantages == 0).sum())
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
        "settings": asdict(settings),
    }
    return result
