"""`--show_prompts N`: the first prompts exactly as the trainer renders them, with token counts and gold answers."""

from __future__ import annotations

from typing import Any

from datasets import Dataset

from drgrpo.core.models import load_pretrained
from drgrpo.data.arguments import DataArguments
from drgrpo.data.pipeline import load_prompt_dataset
from drgrpo.data.templates import prompt_text, prompt_token_ids


def format_prompts(
    dataset: Dataset, count: int, tokenizer: Any = None, chat_template_kwargs: dict | None = None
) -> str:
    """The first `count` prompts as the trainer renders them, with their token counts and gold answers."""
    blocks = []
    count = min(count, len(dataset))
    for i in range(count):
        text = prompt_text(dataset[i]["prompt"], tokenizer, chat_template_kwargs)
        tokens = ""
        if tokenizer is not None:
            tokens = f", {len(prompt_token_ids([dataset[i]['prompt']], tokenizer, chat_template_kwargs)[0])} tokens"
        # The text is printed raw; its ending (spaces, newlines) decides what the model writes first, so show it quoted.
        blocks.append(
            f"===== prompt {i + 1} of {count}{tokens} =====\n{text}\n===== ends with: {text[-40:]!r} =====\n"
            f"gold answer: {dataset[i]['answer']}"
        )
    return "\n\n".join(blocks)


def preview_prompts(
    args: DataArguments,
    *,
    model_name_or_path: str | None,
    revision: str | None = None,
    seed: int = 42,
    chat_template_kwargs: dict | None = None,
) -> str:
    """`--show_prompts N`: load the tokenizer (not the model) and the data, and format the first N training prompts."""
    from transformers import AutoTokenizer

    if not model_name_or_path:
        raise ValueError("show_prompts needs the model's tokenizer: set model_name_or_path.")
    # Once, from the cache first: a model that cannot be had is one line naming it, with no retries offline.
    tokenizer = load_pretrained(AutoTokenizer.from_pretrained, model_name_or_path, revision, tokenizer_only=True)
    train, _ = load_prompt_dataset(args, seed=seed, tokenizer=tokenizer, chat_template_kwargs=chat_template_kwargs)
    header = (
        f"prompt_template={args.prompt_template!r}, chat_template_kwargs={chat_template_kwargs or {}}, "
        f"{len(train)} training prompts; the first {min(args.show_prompts, len(train))}, exactly as the trainer "
        "renders them:"
    )
    return header + "\n\n" + format_prompts(train, args.show_prompts, tokenizer, chat_template_kwargs)
