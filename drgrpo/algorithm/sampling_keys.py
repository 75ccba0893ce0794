"""The valid ranges of the sampling keys, one table for training, evaluation and `--explain`, checked before any model
loads.

Out of range, each key failed late and far from its cause: `temperature: 0` generated a whole step and then divided
by zero in TRL's loss (`1 / temperature`); `temperature: 1e-40` or `nan` made every logit infinite, every weight NaN,
and the run exited 0 having saved that model; `min_p: 1.5` or `repetition_penalty: 0` reached a traceback from
transformers after the model loaded; `max_completion_length: 1000000000` ran 78 s before asking for 512 GB. Here
each is one line naming the key, the value and its range, from `drgrpo.recipe.cli.recipe_values` (the recipe and
command line of `train.py`, `--explain`, `--show_prompts`, `plan.py`), `DrGRPOConfig.__post_init__` (configs built
in Python) and the evaluation's arguments; `check_context_length` checks the lengths against the model's
`max_position_embeddings`, read from its `config.json` without its weights.

Training and evaluation differ in one place: temperature 0 (greedy) is how evaluation asks for pass@1, and training
refuses it (and anything below `MIN_TRAINING_TEMPERATURE`, and `top_k: 1`), because greedy decoding makes every
completion of a group the same: rewards all equal, advantages all 0, no learning signal. Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from drgrpo.algorithm.schedule_keys import fix_hint
from drgrpo.core.errors import UsageError

# Below this a group's completions are near-copies of the greedy one, and TRL's log-probs are the logits times
# 1/temperature (> 100): gradients that large end in NaN weights (a 1e-40 run did).
MIN_TRAINING_TEMPERATURE = 0.01
TRAINING, EVALUATION = "training", "evaluation"


def _number(value: Any) -> float | None:
    """`value` as a float when it is a number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


@dataclass(frozen=True)
class SamplingRange:
    """What a sampling key does, its valid values in words (per purpose), and the test of a value."""

    meaning: str
    valid: Callable[[float, str], bool]  # (value, purpose) -> within range
    training: str  # the valid range for training, in words
    evaluation: str | None = None  # for evaluation, where it differs
    whole: bool = False  # a whole number
    optional: bool = False  # null (unset) allowed

    def describe(self, purpose: str) -> str:
        return self.evaluation if purpose == EVALUATION and self.evaluation else self.training


def _temperature_ok(value: float, purpose: str) -> bool:
    if purpose == EVALUATION and value == 0:
        return True
    return math.isfinite(value) and value >= MIN_TRAINING_TEMPERATURE


SAMPLING_KEYS: dict[str, SamplingRange] = {
    "temperature": SamplingRange(
        "divides the logits before sampling",
        _temperature_ok,
        f"a finite number of at least {MIN_TRAINING_TEMPERATURE} for training (0 is greedy: every completion of a "
        "group would be the same, rewards all equal, no learning signal)",
        f"0 (greedy) or a finite number of at least {MIN_TRAINING_TEMPERATURE}",
    ),
    "top_p": SamplingRange(
        "keeps the most likely tokens up to this probability mass",
        lambda value, purpose: 0 < value <= 1,
        "a number in (0, 1] (1 turns it off)",
    ),
    "top_k": SamplingRange(
        "keeps this many most likely tokens",
        lambda value, purpose: value >= 0 and (purpose == EVALUATION or value != 1),
        "a whole number >= 0, not 1 for training (0 turns it off, vLLM's -1; 1 is greedy: no learning signal)",
        "a whole number >= 0 (0 turns it off)",
        whole=True,
    ),
    "min_p": SamplingRange(
        "drops tokens less likely than this share of the most likely one",
        lambda value, purpose: 0 <= value <= 1,
        "a number in [0, 1], or null (off)",
        optional=True,
    ),
    "repetition_penalty": SamplingRange(
        "divides the logits of tokens already in the prompt or the completion",
        lambda value, purpose: math.isfinite(value) and value > 0,
        "a finite number above 0 (1 turns it off)",
    ),
}
# TRL's `generation_kwargs` reach the sampler too and override these keys: checked with the same table.
GENERATION_KWARGS = "generation_kwargs"


def sampling_value_problem(key: str, value: Any, purpose: str = TRAINING) -> str | None:
    """Why `value` is out of range for sampling key `key` ("1.5 is not allowed: ..."), or None when it is fine (or
    `key` is not a sampling key)."""
    spec = SAMPLING_KEYS.get(key)
    if spec is None:
        return None
    if value is None and spec.optional:
        return None
    number = _number(value)
    if number is not None and (not spec.whole or number.is_integer()) and spec.valid(number, purpose):
        return None
    return f"{value!r} is not allowed: it {spec.meaning}, so it takes {spec.describe(purpose)}"


def check_sampling_values(
    values: Mapping[str, Any], where: str, sources: Mapping[str, str] | None = None, purpose: str = TRAINING
) -> None:
    """Raise a `UsageError` for the first sampling key of `values` (or of its `generation_kwargs`) out of range: one
    line with the key, value, place and fix. `where` names the place ("recipe r.yaml", "command line", "config");
    `sources` may name another place for single keys (the command line for an override)."""
    extra = values.get(GENERATION_KWARGS)
    nested = (
        {f"{GENERATION_KWARGS}.{k}": v for k, v in extra.items() if k in SAMPLING_KEYS}
        if isinstance(extra, Mapping)
        else {}
    )
    for key, value in {**values, **nested}.items():
        problem = sampling_value_problem(key.rpartition(".")[2], value, purpose)
        if problem is not None:
            top_key = key.partition(".")[0]
            place = (sources or {}).get(top_key, where)
            raise UsageError(f"{place}: {key}: {problem}.{fix_hint(top_key, place)}")


def model_context_length(config: Any) -> int | None:
    """The most positions a model attends to (`max_position_embeddings`, or GPT-2's `n_positions`), from its
    transformers config (its text part for a multimodal one), or None when the config does not say."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(text, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def context_length_problem(
    context: int | None,
    completion_tokens: int | None,
    prompt_tokens: int | None,
    completion_key: str,
    prompt_key: str = "max_prompt_tokens",
) -> str | None:
    """Why a completion budget (and prompt budget, `prompt_key`, when set) does not fit a model that attends to
    `context` positions, or None: a prompt takes at least one position."""
    if context is None or completion_tokens is None:
        return None
    prompt = prompt_tokens if prompt_tokens is not None else 1
    if completion_tokens + prompt <= context:
        return None
    where = f"the {context} positions the model attends to (max_position_embeddings in its config.json)"
    if prompt >= context:
        return f"{prompt_key} {prompt} leaves no room for a completion in {where}; keep it below {context}"
    prompts = f" plus {prompt_key} {prompt_tokens}" if prompt_tokens is not None else " plus a prompt"
    most = context - prompt
    return f"{completion_key} {completion_tokens}{prompts} is more than {where}; set {completion_key} to at most {most}"


def check_context_length(
    config: Any,
    model: str,
    completion_tokens: int | None,
    prompt_tokens: int | None = None,
    completion_key: str = "max_completion_length",
    prompt_key: str = "max_prompt_tokens",
) -> None:
    """Raise a `UsageError` naming the model when the generation budget does not fit its context."""
    context = model_context_length(config)
    problem = context_length_problem(context, completion_tokens, prompt_tokens, completion_key, prompt_key)
    if problem is not None:
        raise UsageError(f"model {model!r}: {problem}.")
