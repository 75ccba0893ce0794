"""Prompt templates: how a question becomes the prompt the policy sees.

Each template is data. `r1` and `qwen_math` are the exact strings studied in Liu et al. (arXiv 2503.20783).
"""

from __future__ import annotations

R1 = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant solves it. The "
    "Assistant first thinks about the reasoning process in the mind and then provides the User with the answer. The "
    "reasoning process is enclosed within <think> </think> and answer is enclosed within <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.\nUser: {question}\n"
    "Assistant: <think>"
)
QWEN_MATH = (
    "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{{}}.<|im_end|>\n"
    "<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
)
PLAIN = "{question}"

TEXT_TEMPLATES = {"r1": R1, "qwen_math": QWEN_MATH, "plain": PLAIN}
TEMPLATES = ("chat", *TEXT_TEMPLATES)


def render_prompt(question: str, template: str, system_prompt: str | None = None) -> str | list[dict]:
    """The prompt for `question`: a string for text templates, a message list for `chat`.

    `chat` prompts stay conversational so that TRL applies the tokenizer's chat template (with the recipe's
    `chat_template_kwargs`) itself.
    """
    if template == "chat":
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        return [*messages, {"role": "user", "content": question}]
    if template not in TEXT_TEMPLATES:
        raise ValueError(f"Unknown prompt_template {template!r}. Choose one of: {', '.join(TEMPLATES)}.")
    return TEXT_TEMPLATES[template].format(question=question)
