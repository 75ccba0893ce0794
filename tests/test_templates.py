"""Prompt templates: the exact R1 / Qwen-Math strings, the chat path, `chat_template_kwargs`, and the errors."""

from __future__ import annotations

import pytest

from drgrpo.data.templates import (
    TEMPLATES,
    check_template,
    prompt_text,
    prompt_token_ids,
    render_prompt,
    render_prompt_text,
)
from drgrpo.experiments.tiny import build_tokenizer

QUESTION = "What is $\\frac{1}{2} + \\frac{1}{3}$?"

# Golden strings, typed out from the background note (section 3, "Prompt templates studied in the paper").
R1_GOLDEN = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant solves it. The Assistant "
    "first thinks about the reasoning process in the mind and then provides the User with the answer. The reasoning "
    "process is enclosed within <think> </think> and answer is enclosed within <answer> </answer> tags, respectively, "
    "i.e., <think> reasoning process here </think> <answer> answer here </answer>.\n"
    "User: What is $\\frac{1}{2} + \\frac{1}{3}$?\n"
    "Assistant: <think>"
)
QWEN_MATH_GOLDEN = (
    "<|im_start|>system\n"
    "Please reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
    "<|im_start|>user\n"
    "What is $\\frac{1}{2} + \\frac{1}{3}$?<|im_end|>\n"
    "<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def test_r1_golden_string():
    assert render_prompt(QUESTION, "r1") == R1_GOLDEN


def test_qwen_math_golden_string():
    assert render_prompt(QUESTION, "qwen_math") == QWEN_MATH_GOLDEN


def test_plain_is_the_question_alone():
    assert render_prompt(QUESTION, "plain") == QUESTION


def test_braces_and_placeholder_text_in_the_question_are_kept_verbatim():
    # str.format would choke on `{}` or substitute `{question}`; the templates insert the question literally.
    question = "Simplify {question} + \\boxed{} + {0}"
    assert render_prompt(question, "plain") == question
    assert render_prompt(question, "qwen_math").count(question) == 1
    assert "User: Simplify {question} + \\boxed{} + {0}\nAssistant: <think>" in render_prompt(question, "r1")


def test_text_templates_render_without_a_tokenizer():
    assert render_prompt_text(QUESTION, "qwen_math") == QWEN_MATH_GOLDEN


def test_chat_without_system_prompt(tokenizer):
    assert render_prompt("2+3=", "chat") == [{"role": "user", "content": "2+3="}]
    text = render_prompt_text("2+3=", "chat", tokenizer=tokenizer)
    assert text == "<|im_start|>user\n2+3=<|im_end|>\n<|im_start|>assistant\n"


def test_chat_with_system_prompt(tokenizer):
    assert render_prompt("2+3=", "chat", "Add.") == [
        {"role": "system", "content": "Add."},
        {"role": "user", "content": "2+3="},
    ]
    text = render_prompt_text("2+3=", "chat", "Add.", tokenizer=tokenizer)
    assert text == "<|im_start|>system\nAdd.<|im_end|>\n<|im_start|>user\n2+3=<|im_end|>\n<|im_start|>assistant\n"


def test_chat_template_kwargs_reach_the_template(tokenizer):
    # The tiny tokenizer's template, like Qwen3's, closes an empty thinking block when enable_thinking is false.
    off = render_prompt_text("2+3=", "chat", tokenizer=tokenizer, chat_template_kwargs={"enable_thinking": False})
    on = render_prompt_text("2+3=", "chat", tokenizer=tokenizer, chat_template_kwargs={"enable_thinking": True})
    default = render_prompt_text("2+3=", "chat", tokenizer=tokenizer)
    assert off == "<|im_start|>user\n2+3=<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert on == default == "<|im_start|>user\n2+3=<|im_end|>\n<|im_start|>assistant\n"


def test_prompt_token_ids_match_the_rendered_text(tokenizer):
    kwargs = {"enable_thinking": False}
    chat = [render_prompt("2+3=", "chat", "Add."), render_prompt("10+11=", "chat")]
    ids = prompt_token_ids(chat, tokenizer, kwargs)
    for prompt, prompt_ids in zip(chat, ids, strict=True):
        text = prompt_text(prompt, tokenizer, kwargs)
        assert prompt_ids == tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(prompt_ids) == text
    [qwen_ids] = prompt_token_ids([render_prompt("2+3=", "qwen_math")], tokenizer)
    # Special tokens written as text are single tokens: 5 ChatML markers, not their characters.
    assert qwen_ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3
    assert tokenizer.decode(qwen_ids) == render_prompt("2+3=", "qwen_math")


def test_unknown_template_lists_the_choices():
    with pytest.raises(ValueError, match="Unknown prompt_template 'r2'.*chat, r1, qwen_math, plain"):
        render_prompt("1+1=", "r2")
    assert TEMPLATES == ("chat", "r1", "qwen_math", "plain")


@pytest.mark.parametrize("template", ["r1", "qwen_math", "plain"])
def test_system_prompt_with_a_text_template_is_an_error(template):
    with pytest.raises(ValueError, match=f"system_prompt is set but prompt_template is '{template}'"):
        check_template(template, "Be brief.")


def test_chat_needs_a_tokenizer_with_a_chat_template(tokenizer):
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        render_prompt_text("1+1=", "chat")
    bare = build_tokenizer()
    bare.chat_template = None
    with pytest.raises(ValueError, match="has no chat template.*qwen_math, r1 or plain"):
        render_prompt_text("1+1=", "chat", tokenizer=bare)


def test_non_string_question_is_an_error():
    with pytest.raises(TypeError, match="question must be a string, got int"):
        render_prompt(12, "plain")


def test_mixed_prompt_kinds_are_an_error(tokenizer):
    with pytest.raises(ValueError, match="mix of chat"):
        prompt_token_ids([render_prompt("1", "chat"), render_prompt("1", "plain")], tokenizer)


@pytest.mark.slow
@pytest.mark.parametrize("template", ["chat", "r1", "qwen_math", "plain"])
def test_tiny_recipe_trains_with_each_template(template, tiny_model_path, addition_data, tmp_path):
    """One key switches the template; the run trains, and TRL tokenizes the prompts exactly as we render them."""
    import math

    from drgrpo.recipe.cli import parse_recipe
    from drgrpo.run.training import train

    argv = [
        "recipes/tiny_drgrpo.yaml",
        "--model_name_or_path", str(tiny_model_path),
        "--dataset_path", str(addition_data["train"]),
        "--output_dir", str(tmp_path),
        "--prompt_template", template,
        "--max_steps", "1", "--logging_steps", "1",
        "--per_device_train_batch_size", "8", "--num_generations", "4",
    ]  # fmt: skip
    if template == "chat":
        argv += ["--system_prompt", "Add.", "--chat_template_kwargs", '{"enable_thinking": false}']
    script, training, model = parse_recipe(argv)
    trainer = train(script, training, model)

    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 1 and math.isfinite(losses[0])
    prompts = trainer.train_dataset["prompt"][:4]
    kwargs = training.chat_template_kwargs
    trl_ids, _, _ = trainer._tokenize_prompts(prompts)
    assert [list(ids) for ids in trl_ids] == prompt_token_ids(prompts, trainer.processing_class, kwargs)
    text = prompt_text(prompts[0], trainer.processing_class, kwargs)
    question = text.split("<|im_start|>user\n")[-1].split("<|im_end|>")[0].split("User: ")[-1].split("\n")[0]
    assert question.endswith("=") and "+" in question
    expected = {
        "chat": f"<|im_start|>system\nAdd.<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n",
        "r1": R1_GOLDEN.replace("What is $\\frac{1}{2} + \\frac{1}{3}$?", question),
        "qwen_math": QWEN_MATH_GOLDEN.replace("What is $\\frac{1}{2} + \\frac{1}{3}$?", question),
        "plain": question,
    }[template]
    assert text == expected
