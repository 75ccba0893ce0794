"""Prompt templates: how a question becomes the prompt the policy sees.

Every template is data in this one module. `r1` and `qwen_math` are the exact strings studied in Liu et al.,
"Understanding R1-Zero-Like Training: A Critical Perspective" (arXiv 2503.20783), as quoted in the project's background
note; `plain` is the paper's "no template". `chat` is the model's own chat template, applied by the tokenizer.

Two kinds of prompt come out of `render_prompt`:
- text templates (`r1`, `qwen_math`, `plain`) give the final string; TRL tokenizes it as it is;
- `chat` gives a message list; TRL applies the tokenizer's chat template to it (with `add_generation_prompt=True`
  and the recipe's `chat_template_kwargs`, e.g. `enable_thinking: false` for Qwen3).
`render_prompt_text` and `prompt_token_ids` reproduce both paths exactly, for `--show_prompts`, `max_prompt_tokens`
and evaluation with `transformers.generate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Prompt = str | list[dict[str, str]]

QUESTION = "{question}"  # the placeholder; replaced literally, so braces in questions and templates need no escaping

R1 = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant solves it. The "
    "Assistant first thinks about the reasoning process in the mind and then provides the User with the answer. The "
    "reasoning process is enclosed within <think> </think> and answer is enclosed within <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.\nUser: {question}\n"
    "Assistant: <think>"
)
QWEN_MATH = (
    "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
    "<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
)
PLAIN = "{question}"

TEXT_TEMPLATES: dict[str, str] = {"r1": R1, "qwen_math": QWEN_MATH, "plain": PLAIN}
TEMPLATES: tuple[str, ...] = ("chat", *TEXT_TEMPLATES)


def check_template(template: str, system_prompt: str | None = None, examples: Sequence[Any] | None = None) -> None:
    """Raise a `ValueError` for an unknown `prompt_template`, or a `system_prompt` or `chat_examples` that the
    template would ignore, or examples that are not {question, answer} pairs of strings."""
    if template not in TEMPLATES:
        raise ValueError(f"Unknown prompt_template {template!r}. Choose one of: {', '.join(TEMPLATES)}.")
    for key, value in (("system_prompt", system_prompt), ("chat_examples", examples)):
        if value and template != "chat":
            raise ValueError(
                f"{key} is set but prompt_template is {template!r}: only 'chat' uses it ('r1' and 'qwen_math' carry "
                f"their own fixed instruction, 'plain' has none). Remove {key} or use prompt_template: chat."
            )
    for index, example in enumerate(examples or []):
        if not (
            isinstance(example, dict)
            and set(example) == {"question", "answer"}
            and all(isinstance(v, str) for v in example.values())
        ):
            raise ValueError(
                f"chat_examples[{index}] must be a mapping {{question: ..., answer: ...}} of two strings, got "
                f"{example!r}."
            )


def render_prompt(
    question: str, template: str, system_prompt: str | None = None, examples: Sequence[dict] | None = None
) -> Prompt:
    """The prompt for `question`: the final string for text templates, a message list for `chat`.

    `chat` prompts stay conversational so that TRL applies the tokenizer's chat template (with the recipe's
    `chat_template_kwargs`) itself, exactly as it does for any conversational dataset. `examples` (the recipe's
    `chat_examples`, few-shot demonstrations) come first as user/assistant turns, after the system message.
    """
    check_template(template, system_prompt, examples)
    if not isinstance(question, str):
        raise TypeError(f"question must be a string, got {type(question).__name__}: {question!r}")
    if template == "chat":
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        for example in examples or []:
            messages += [
                {"role": "user", "content": example["question"]},
                {"role": "assistant", "content": example["answer"]},
            ]
        return [*messages, {"role": "user", "content": question}]
    return TEXT_TEMPLATES[template].replace(QUESTION, question)


def is_chat_prompt(prompt: Prompt) -> bool:
    """True for a conversational prompt (a list of {role, content} messages), False for a plain string."""
    return isinstance(prompt, list)


def _check_chat_template(tokenizer: Any) -> None:
    if tokenizer is None:
        raise ValueError("prompt_template 'chat' needs the model's tokenizer to render the prompt; pass tokenizer=...")
    if getattr(tokenizer, "chat_template", None) is None:
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise ValueError(
            f"The tokenizer of {name!r} has no chat template, so prompt_template 'chat' cannot be used. Use a text "
            "template instead: prompt_template: qwen_math, r1 or plain."
        )


def prompt_text(prompt: Prompt, tokenizer: Any = None, chat_template_kwargs: dict | None = None) -> str:
    """The exact text the policy is prompted with: the string itself, or the chat template applied to the messages.

    For messages this is what TRL's `GRPOTrainer` tokenizes: `apply_chat_template(..., add_generation_prompt=True,
    **chat_template_kwargs)`.
    """
    if not is_chat_prompt(prompt):
        return prompt
    _check_chat_template(tokenizer)
    return tokenizer.apply_chat_template(
        prompt, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
    )


def render_prompt_text(
    question: str,
    template: str,
    system_prompt: str | None = None,
    tokenizer: Any = None,
    chat_template_kwargs: dict | None = None,
) -> str:
    """`render_prompt` followed by `prompt_text`: the final prompt string, ready for `tokenizer(...)` + `generate`.

    `tokenizer` is needed only for `chat`. Tokenize the result with `add_special_tokens=False` for `chat` (the chat
    template already wrote them) and with the tokenizer's defaults for text templates, as TRL does; or use
    `prompt_token_ids` on the `render_prompt` output, which does exactly that.
    """
    return prompt_text(render_prompt(question, template, system_prompt), tokenizer, chat_template_kwargs)


def prompt_token_ids(
    prompts: Sequence[Prompt], tokenizer: Any, chat_template_kwargs: dict | None = None
) -> list[list[int]]:
    """Token ids of rendered prompts, computed the way TRL 1.16's `GRPOTrainer._tokenize_prompts` computes them.

    Conversational prompts: `apply_chat_template(conversation=..., add_generation_prompt=True, tokenize=True,
    **chat_template_kwargs)`; strings: `tokenizer(text=...)` (the tokenizer's default special tokens, e.g. a BOS).
    """
    prompts = list(prompts)
    if not prompts:
        return []
    kinds = {is_chat_prompt(p) for p in prompts}
    if len(kinds) != 1:
        raise ValueError("prompt_token_ids got a mix of chat (message list) and text prompts; render them one way.")
    if kinds.pop():
        _check_chat_template(tokenizer)
        tokenized = tokenizer.apply_chat_template(
            conversation=prompts,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            **(chat_template_kwargs or {}),
        )
        return [list(ids) for ids in tokenized["input_ids"]]
    return [list(ids) for ids in tokenizer(text=prompts)["input_ids"]]
