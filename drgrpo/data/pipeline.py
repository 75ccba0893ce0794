"""The pipeline: sources -> filter -> mixture -> held-out split -> template -> `max_prompt_tokens` -> gold check."""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from datasets import Dataset

from drgrpo.data.arguments import DataArguments
from drgrpo.data.gold_check import report_unparseable, reward_gold_check, unparseable_indices_once
from drgrpo.data.mixture import mix_sources
from drgrpo.data.sources import DataSource, Example, data_sources, load_source, source_examples
from drgrpo.data.templates import prompt_text, prompt_token_ids, render_prompt

logger = logging.getLogger(__name__)


_TOKEN_BATCH = 256  # prompts tokenized per call when counting prompt tokens


def _finish(
    examples: list[Example],
    args: DataArguments,
    which: str,
    tokenizer: Any,
    chat_template_kwargs: dict | None,
    gold_check: Callable[[list[str]], list[bool]] | None,
) -> Dataset:
    """Template, `max_prompt_tokens`, gold check: the `prompt` / `answer` dataset the trainer sees."""
    prompts = [
        render_prompt(example.question, args.prompt_template, args.system_prompt, args.chat_examples)
        for example in examples
    ]
    if args.max_prompt_tokens is not None:
        if tokenizer is None:
            raise ValueError("max_prompt_tokens needs the model's tokenizer to count prompt tokens; pass tokenizer=.")
        lengths = [
            len(ids)
            for start in range(0, len(prompts), _TOKEN_BATCH)
            for ids in prompt_token_ids(prompts[start : start + _TOKEN_BATCH], tokenizer, chat_template_kwargs)
        ]
        keep = [i for i, length in enumerate(lengths) if length <= args.max_prompt_tokens]
        dropped = len(prompts) - len(keep)
        if not keep:
            raise ValueError(
                f"max_prompt_tokens={args.max_prompt_tokens} drops every {which} prompt (the shortest has "
                f"{min(lengths)} tokens); raise max_prompt_tokens."
            )
        if dropped:
            logger.warning(
                "max_prompt_tokens=%d: dropped %d of %d %s prompts (longest: %d tokens).",
                args.max_prompt_tokens,
                dropped,
                len(prompts),
                which,
                max(lengths),
            )
        examples = [examples[i] for i in keep]
        prompts = [prompts[i] for i in keep]
    if gold_check is not None:
        # Main process only, result broadcast; cached by answers + grader version (drgrpo/data/gold_check.py).
        bad = unparseable_indices_once([example.answer for example in examples], gold_check)
        if bad:
            logger.warning(report_unparseable(examples, bad, which))
            if args.drop_unparseable_answers:
                if len(bad) == len(examples):
                    raise ValueError(f"drop_unparseable_answers: no {which} row has a parseable gold answer.")
                dropped = set(bad)
                examples = [e for i, e in enumerate(examples) if i not in dropped]
                prompts = [p for i, p in enumerate(prompts) if i not in dropped]
                logger.warning("drop_unparseable_answers: dropped %d %s rows.", len(bad), which)
        else:
            logger.info("All %d %s gold answers parse.", len(examples), which)
    columns = {"prompt": prompts, "answer": [example.answer for example in examples]}
    for column in (examples[0].extras or {}) if examples else {}:
        columns[column] = [_plain(example.extras[column]) for example in examples]
    return Dataset.from_dict(columns)


def _plain(value: Any) -> Any:
    """A kept column's value as one Arrow type across rows: mappings and lists as JSON strings (rows of a test-case
    column differ in structure, which Arrow cannot hold in one column)."""
    return json.dumps(value) if isinstance(value, dict | list) else value


def eval_source(args: DataArguments, sources: list[DataSource]) -> DataSource | None:
    """The held-out source named by `dataset_test_split` / `dataset_test_path` (None when neither is set)."""
    if args.dataset_test_split is None and args.dataset_test_path is None:
        return None
    if args.dataset_test_split is not None:
        if len(sources) != 1 or sources[0].name is None:
            raise ValueError(
                "dataset_test_split names a split of dataset_name; with dataset_path or dataset_mixture use "
                "dataset_test_path (a local file) or dataset_test_size (rows held out of the training data)."
            )
        return replace(sources[0], split=args.dataset_test_split, weight=None)
    if len(sources) == 1:  # the training source's column mapping, filter and extraction, read from another file
        return replace(sources[0], name=None, config=None, path=args.dataset_test_path, weight=None)
    # A mixture has no single mapping: the top-level keys describe the held-out file.
    return DataSource(
        path=args.dataset_test_path,
        prompt_column=args.prompt_column,
        answer_column=args.answer_column,
        answer_extraction=args.answer_extraction,
        dataset_filter=args.dataset_filter,
        keep_columns=sources[0].keep_columns,
    )


def kept_share(examples: list[Example], source: DataSource, rng: random.Random) -> list[Example]:
    """A source's rows, or with `fraction` f the int(rows x f) of them that open-r1 keeps (a sample, in order)."""
    if source.fraction is None:
        return examples
    count = int(len(examples) * source.fraction)
    if count < 1:
        raise ValueError(f"{source.label}: fraction {source.fraction:g} of its {len(examples)} rows keeps none.")
    logger.info("dataset_mixture: %s keeps %d of its %d rows (fraction %g).", source.label, count, len(examples),
                source.fraction)  # fmt: skip
    return [examples[i] for i in sorted(rng.sample(range(len(examples)), count))]


def load_prompt_dataset(
    args: DataArguments,
    seed: int = 42,
    tokenizer: Any = None,
    chat_template_kwargs: dict | None = None,
    gold_check: Callable[[list[str]], list[bool]] | None = None,
) -> tuple[Dataset, Dataset | None]:
    """The training set and the optional held-out set, as `prompt` / `answer` datasets (see the module docstring).

    `tokenizer` is needed for `max_prompt_tokens` (and to check that a `chat` prompt can be rendered);
    `chat_template_kwargs` is the recipe's (TRL's `GRPOConfig.chat_template_kwargs`). `gold_check` decides whether a
    batch of distinct gold answers is usable (default: `reward_gold_check(args)`, when `check_gold_answers` is on).
    """
    held_out_keys = [k for k in ("dataset_test_split", "dataset_test_path", "dataset_test_size") if getattr(args, k)]
    if len(held_out_keys) > 1:
        raise ValueError(f"Set at most one of {', '.join(held_out_keys)} (they all name the held-out set).")
    if args.prompt_template == "chat" and tokenizer is not None:
        probe = render_prompt("1+1=", "chat", args.system_prompt, args.chat_examples)
        prompt_text(probe, tokenizer, chat_template_kwargs)
    sources = data_sources(args)
    held_out_source = eval_source(args, sources)  # checked before any loading, so a bad recipe fails fast
    rng = random.Random(seed if args.dataset_mixture_seed is None else args.dataset_mixture_seed)
    per_source = [kept_share(source_examples(load_source(source), source), source, rng) for source in sources]
    weights = [s.weight for s in sources] if sources[0].weight is not None else None
    examples = mix_sources(per_source, weights, args.dataset_mixture_size, rng)
    rng.shuffle(examples)

    eval_examples = (
        None if held_out_source is None else source_examples(load_source(held_out_source, "held-out"), held_out_source)
    )
    if args.dataset_test_size is not None:
        size = args.dataset_test_size
        held = size if size >= 1 else math.ceil(size * len(examples))  # a share: rounded up, as train_test_split
        if held >= len(examples):
            raise ValueError(
                f"dataset_test_size={size} holds out every training row (there are {len(examples)}); make it smaller."
            )
        eval_examples, examples = examples[:held], examples[held:]
    if args.max_train_samples is not None:
        examples = examples[: args.max_train_samples]
    logger.info("Training prompts: %d rows from %s.", len(examples), ", ".join(s.label for s in sources))

    if not args.check_gold_answers or args.answer_column is None:
        gold_check = None
    elif gold_check is None:
        gold_check = reward_gold_check(args)
    train = _finish(examples, args, "training", tokenizer, chat_template_kwargs, gold_check)
    held_out = None
    if eval_examples is not None:
        held_out = _finish(eval_examples, args, "held-out", tokenizer, chat_template_kwargs, gold_check)
    return train, held_out
