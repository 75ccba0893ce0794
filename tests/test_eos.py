"""`extra_eos_tokens`: the ids, the merge into TRL's and vLLM's lists, and a tiny-model run where a completion that
ends in the extra token counts as terminated (TRL's clipped_ratio, our diag/ truncation rate), not truncated."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset

from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.eos import extra_eos_token_ids, merge_token_ids, with_stop_token_ids
from drgrpo.algorithm.trainer import DrGRPOTrainer
from drgrpo.experiments.tiny import SPECIAL_TOKENS, build_tokenizer
from drgrpo.observe import metric_names

EXTRA = "</answer>"  # a special token of the tiny tokenizer that is not its eos (<|im_end|>) nor its pad


def test_ids_of_extra_tokens_in_order():
    tokenizer = build_tokenizer()
    assert extra_eos_token_ids(tokenizer, ["</answer>", "<|im_start|>"]) == [
        SPECIAL_TOKENS.index("</answer>"),
        SPECIAL_TOKENS.index("<|im_start|>"),
    ]
    assert extra_eos_token_ids(tokenizer, None) == [] and extra_eos_token_ids(tokenizer, []) == []


@pytest.mark.parametrize("token", ["<|eot_id|>", "ab"])  # unknown; a string the tokenizer would split in two
def test_token_not_in_vocabulary_is_a_one_line_error(token):
    tokenizer = build_tokenizer()
    tokenizer.name_or_path = "outputs/demo/sft"
    with pytest.raises(ValueError) as error:
        extra_eos_token_ids(tokenizer, [token])
    message = str(error.value)
    assert "\n" not in message and repr(token) in message and "'outputs/demo/sft'" in message


def test_merge_keeps_order_and_drops_duplicates():
    assert merge_token_ids(None, [5, 3]) == [5, 3]
    assert merge_token_ids(2, [5, 2]) == [2, 5]
    assert merge_token_ids([2, 5], [5, 7, 7]) == [2, 5, 7]


def test_vllm_stop_token_ids_extended_without_touching_the_recipe_dict():
    recipe_kwargs = {"stop_token_ids": [151643], "min_tokens": 1}
    merged = with_stop_token_ids(recipe_kwargs, [151645, 151643])
    assert merged == {"stop_token_ids": [151643, 151645], "min_tokens": 1}
    assert recipe_kwargs == {"stop_token_ids": [151643], "min_tokens": 1}
    assert with_stop_token_ids(None, [151645]) == {"stop_token_ids": [151645]}
    assert with_stop_token_ids(None, []) == {}


def train_one_step(tiny_model_path, tmp_path, extra_eos_tokens):
    """One step on the tiny model, its sampler forced to write only the EXTRA token (every other id suppressed)."""
    tokenizer = build_tokenizer()
    extra_id = tokenizer.convert_tokens_to_ids(EXTRA)
    suppressed = [i for i in range(len(tokenizer)) if i != extra_id]
    args = DrGRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        save_strategy="no",
        max_steps=1,
        logging_steps=1,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=5,
        generation_kwargs={"suppress_tokens": suppressed},
        extra_eos_tokens=extra_eos_tokens,
        diagnostics_warnings=False,
    )
    dataset = Dataset.from_list([{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(4)])
    trainer = DrGRPOTrainer(
        model=str(tiny_model_path),
        reward_funcs=lambda completions, **kw: [float(len(c)) for c in completions],
        args=args,
        train_dataset=dataset,
    )
    trainer.train()
    return trainer, trainer.state.log_history[0], extra_id


def test_completion_ending_in_extra_token_is_terminated(tiny_model_path, tmp_path):
    trainer, logs, extra_id = train_one_step(tiny_model_path, tmp_path, [EXTRA])
    assert extra_id in trainer.eos_token_ids and extra_id in trainer.generation_config.eos_token_id
    assert trainer.generation_kwargs["eos_token_id"] == trainer.generation_config.eos_token_id
    # generate stopped at the first token, and TRL and our diagnostics count it as an ending, not a cut-off
    assert logs["completions/mean_length"] == 1.0
    assert logs["completions/clipped_ratio"] == 0.0
    assert logs["completions/mean_terminated_length"] == 1.0
    assert logs[metric_names.TRUNCATION_RATE] == 0.0


def test_without_the_key_the_same_completions_run_to_the_budget(tiny_model_path, tmp_path):
    trainer, logs, extra_id = train_one_step(tiny_model_path, tmp_path, None)
    assert extra_id not in trainer.eos_token_ids
    assert logs["completions/mean_length"] == 5.0
    assert logs["completions/clipped_ratio"] == 1.0
    assert logs[metric_names.TRUNCATION_RATE] == 1.0


@pytest.fixture(scope="module")
def endoftext_model(tmp_path_factory):
    """The tiny model with its final norm zeroed: every logit is 0, so greedy decoding writes token 0,
    `<|endoftext|>`, forever (the tiny tokenizer's eos is `<|im_end|>`)."""
    import torch
    from transformers import AutoModelForCausalLM

    from drgrpo.experiments.tiny import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("endoftext-model"), seed=0)
    model = AutoModelForCausalLM.from_pretrained(path)
    with torch.no_grad():
        model.model.norm.weight.zero_()
    model.save_pretrained(path)
    return path


@pytest.mark.parametrize("from_recipe", [False, True])
def test_evaluator_stops_at_the_extra_token(endoftext_model, tmp_path, from_recipe):
    from drgrpo.evaluation import evaluate

    data = tmp_path / "test.jsonl"
    data.write_text('{"question": "1+1=", "answer": "2"}\n{"question": "2+2=", "answer": "4"}\n')
    common = {"prompt_template": "plain", "max_new_tokens": 6, "backend": "transformers", "progress": False}
    if from_recipe:
        recipe = tmp_path / "recipe.yaml"
        recipe.write_text("extra_eos_tokens: ['<|endoftext|>']\n")
        extra = {"recipe": str(recipe)}
    else:
        extra = {"extra_eos_tokens": ["<|endoftext|>"]}
    stopped = evaluate(endoftext_model, data, output_dir=str(tmp_path / "with"), **common, **extra)
    rows = [json.loads(line) for line in open(tmp_path / "with" / "samples.jsonl")]
    assert [(r["num_tokens"], r["truncated"]) for r in rows] == [(1, False), (1, False)]
    assert stopped["extra_eos_tokens"] == ["<|endoftext|>"]

    evaluate(endoftext_model, data, output_dir=str(tmp_path / "without"), **common)
    rows = [json.loads(line) for line in open(tmp_path / "without" / "samples.jsonl")]
    assert [(r["num_tokens"], r["truncated"]) for r in rows] == [(6, True), (6, True)]


def test_evaluator_unknown_extra_token_is_a_one_line_error(endoftext_model, tmp_path):
    from drgrpo.evaluation import evaluate

    data = tmp_path / "test.jsonl"
    data.write_text('{"question": "1+1=", "answer": "2"}\n')
    with pytest.raises(ValueError, match=r"extra_eos_tokens: '<\|eot_id\|>' is not a single token of the tokenizer"):
        evaluate(
            endoftext_model,
            data,
            output_dir=str(tmp_path / "o"),
            backend="transformers",
            extra_eos_tokens=["<|eot_id|>"],
        )
