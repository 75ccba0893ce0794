"""What a run checks and loads before its model: one function for training and for `--explain`.

`before_model` resolves the recipe's rewards (a misspelt name, an unimportable file, one weight for two rewards, a
reward whose lowest score `zero_reward_for_truncated` needs but cannot know), the model's name and files, the
generation budget against the model's context (its config.json), the tokenizer with the recipe's extra end-of-answer
tokens, and the training data (every source, its columns, filters, the held-out set, `max_prompt_tokens`, the gold
answers). `drgrpo.run.training.train` calls it and goes on with what it loaded; `python scripts/train.py RECIPE
--explain` (`drgrpo.recipe.preflight.explain_recipe`) calls it with `inspect=True` and prints the family card.

With `inspect=True` nothing is downloaded and nothing of the run is written (no output_dir, no lock, no run record):
what only the hub holds (a hub model or dataset that is not in the local cache) is named in `not_checked` instead of
failing, and so is what then cannot be checked (the tokenizer, `max_prompt_tokens`, the context). Checks of the
machine training runs on, not of the recipe, stay with training: the output_dir's state (another run's model, a
resume on other data), GPUs (`use_vllm`), the Python tool's sandbox. Caches shared with training fill as training
fills them (datasets' Arrow files of a local file, the gold-answer check's result).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from transformers import AutoTokenizer
from trl import ModelConfig

from drgrpo.algorithm.advantages import lowest_scores
from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.eos import extra_eos_token_ids
from drgrpo.algorithm.rollout.python_tool import tool_reward_funcs
from drgrpo.algorithm.sampling_keys import check_context_length
from drgrpo.core.models import cache_only, read_model_config, resolve_model, uncached_hub_id
from drgrpo.data import load_prompt_dataset
from drgrpo.data.sources import HubDataUnavailable, data_sources
from drgrpo.run.arguments import ScriptArguments
from rewards import get_reward_funcs

logger = logging.getLogger(__name__)


@dataclass
class RunInputs:
    """What `before_model` loaded: the run's rewards, its model (the path `from_pretrained` loads; None when only the
    hub has it and `inspect` is on), tokenizer and datasets, and what could not be checked here, and why."""

    reward_funcs: list
    model_path: str | None
    tokenizer: Any | None
    train_dataset: Any | None
    eval_dataset: Any | None
    sources: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)


def model_init_kwargs(model_args: ModelConfig) -> dict:
    """`from_pretrained` keyword arguments from the recipe's model settings."""
    kwargs = {"revision": model_args.model_revision}
    if model_args.dtype not in (None, "auto"):
        kwargs["dtype"] = model_args.dtype
    if model_args.attn_implementation is not None:
        kwargs["attn_implementation"] = model_args.attn_implementation
    return kwargs


def resolve_rewards(script_args: ScriptArguments, training_args: DrGRPOConfig) -> list:
    """The recipe's reward functions (plus the tool's error penalty, weight 1), their weights checked against them;
    with `zero_reward_for_truncated`, each reward's lowest score must be known."""
    reward_funcs = get_reward_funcs(
        script_args.reward_funcs,
        settings=script_args,
        max_completion_length=training_args.max_completion_length,
        reward_weights=training_args.reward_weights,
    )
    if extra := tool_reward_funcs(training_args):  # tool_error_penalty: one more reward, weight 1
        reward_funcs += extra
        if training_args.reward_weights is not None:
            training_args.reward_weights = [*training_args.reward_weights, *[1.0] * len(extra)]
    if training_args.zero_reward_for_truncated:
        weights = training_args.reward_weights or [1.0] * len(reward_funcs)
        lowest_scores(
            [f.__name__ for f in reward_funcs], [getattr(f, "reward_range", None) for f in reward_funcs], weights
        )
    return reward_funcs


def before_model(
    script_args: ScriptArguments, training_args: DrGRPOConfig, model_args: ModelConfig, *, inspect: bool = False
) -> RunInputs:
    """Every check a run makes before its model loads, in training's order (the module docstring), and what they
    loaded. `inspect` (`--explain`): local files only, nothing downloaded; see `RunInputs.not_checked`."""
    if not model_args.model_name_or_path:
        raise ValueError("The recipe names no model: set model_name_or_path (hub id or local folder).")
    # Rewards before the tokenizer and data: a custom reward that cannot be imported fails in seconds.
    inputs = RunInputs(resolve_rewards(script_args, training_args), None, None, None, None)
    training_args.model_init_kwargs = {**model_init_kwargs(model_args), **(training_args.model_init_kwargs or {})}
    # --explain reads the Hugging Face cache only (a cached hub model's files too: no update check, no download).
    with cache_only() if inspect else contextlib.nullcontext():
        _model_checks(inputs, script_args, training_args, model_args, inspect)
        _load_data(inputs, script_args, training_args, inspect)
    return inputs


def _model_checks(
    inputs: RunInputs, script_args: ScriptArguments, training_args: DrGRPOConfig, model_args: ModelConfig, inspect: bool
) -> None:
    """The model's name and files, its context against the generation budget, its tokenizer and extra eos tokens."""
    name, revision = model_args.model_name_or_path, model_args.model_revision
    if inspect and uncached_hub_id(name, revision):
        inputs.not_checked.append(
            f"model_name_or_path {name!r} is a hub model that is not in the local cache: its context length and "
            "tokenizer (extra_eos_tokens, max_prompt_tokens, the chat template) are checked when training loads it"
        )
    else:
        # A short name becomes its cached folder; a missing folder or an uncached hub id offline fails here in one
        # line (drgrpo/core/models.py), before any weights load.
        inputs.model_path = resolve_model(name, revision)
        # The generation budget must fit the model's context (its config.json; drgrpo/algorithm/sampling_keys.py).
        if (model_config := read_model_config(inputs.model_path, revision)) is not None:
            budget = training_args.max_completion_length
            check_context_length(model_config, name, budget, script_args.max_prompt_tokens)
        inputs.tokenizer = AutoTokenizer.from_pretrained(inputs.model_path, revision=revision)
        if inputs.tokenizer.pad_token is None:
            inputs.tokenizer.pad_token = inputs.tokenizer.eos_token
        extra_eos_token_ids(inputs.tokenizer, training_args.extra_eos_tokens)  # an unknown token fails here


def _load_data(inputs: RunInputs, script_args: ScriptArguments, training_args: DrGRPOConfig, inspect: bool) -> None:
    """The training and held-out data, as training loads them; with `inspect`, a hub dataset only the hub holds is
    named in `not_checked`."""
    # Counting prompt tokens needs the tokenizer: without one here (said above), the rest of the data is checked.
    data_args = script_args if inputs.tokenizer is not None else replace(script_args, max_prompt_tokens=None)
    inputs.sources = [source.label for source in data_sources(script_args)]
    try:
        inputs.train_dataset, inputs.eval_dataset = load_prompt_dataset(
            data_args,
            seed=training_args.seed,
            tokenizer=inputs.tokenizer,
            chat_template_kwargs=training_args.chat_template_kwargs,
        )
    except HubDataUnavailable as error:
        if not inspect:
            raise
        inputs.not_checked.append(
            f"the data: {error.source.label} is a hub dataset that is not in the local cache (training downloads it; "
            "--explain reads local files only)"
        )


def vllm_without_gpu(training_args: DrGRPOConfig) -> str | None:
    """The one line for `use_vllm: true` on a run without a GPU (`use_cpu`, or none that torch sees), else None. A
    check of this machine, not of the recipe: training runs it, `--explain` (any target machine) does not. Without it
    TRL fails at its first weight sync (a CPU build of vLLM) or on its import (none)."""
    if not training_args.use_vllm:
        return None
    import torch

    if training_args.use_cpu:
        why = "use_cpu is set"
    elif not torch.cuda.is_available():
        why = "torch sees no GPU here"
    else:
        return None
    return (
        f"use_vllm: true needs a GPU (vLLM generates on it and TRL syncs the trained weights into it), and {why}. On "
        "a CPU: --use_vllm false, and generation_engine: auto generates with the project's CPU engine (or "
        "generation_engine: trl, TRL's transformers generate)."
    )
