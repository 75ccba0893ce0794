"""Training with the Python tool (python_tool: true): the trainer trains on generated ids plus observation ids with the
observations masked, the rewards read the policy's own text, and with no code written nothing changes.

The model that calls the tool is tests/tool_model.py's scripted bigram model: prompts ending in ':' make one call per
answer, prompts ending in '!' none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT
from datasets import Dataset
from tool_model import build_tool_model

from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.rollout.python_tool import build_python_tool
from drgrpo.algorithm.rollout.trl_rollout import make_rollout_func
from drgrpo.algorithm.trainer import DrGRPOTrainer
from drgrpo.observe import metric_names as m


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory):
    return build_tool_model(tmp_path_factory.mktemp("tool-model"))


def digit_share(completions, **kwargs) -> list[float]:
    """A reward that varies within groups of the random tiny model (the share of digits in the text)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(1, len(t)) for t in texts]


def reads_tool_output(completions, **kwargs) -> list[float]:
    """1.0 when the text a reward sees holds a tool output (the scripted program prints 1; the policy never does)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [float("```output" in t or "1" in t.replace("print(1)", "")) for t in texts]


def config(tmp_path, **overrides) -> DrGRPOConfig:
    values = dict(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", dr_grpo=True, num_generations=4,
        per_device_train_batch_size=8, max_completion_length=24, max_steps=2, logging_steps=1, seed=0,
        save_strategy="no", learning_rate=1e-3,
    )  # fmt: skip
    values.update(overrides)
    return DrGRPOConfig(**values)


def recorded_run(model, prompts, args, reward_funcs, with_tool: bool) -> tuple[DrGRPOTrainer, list[dict]]:
    """Train `args.max_steps` steps; every generation batch's tensors as the loss received them. `prompts`: prompt
    strings, or dataset rows (a prompt and its other columns)."""
    dataset = Dataset.from_list([p if isinstance(p, dict) else {"prompt": p} for p in prompts])
    rollout = make_rollout_func(args, build_python_tool(args)) if with_tool else None
    trainer = DrGRPOTrainer(
        model=str(model), reward_funcs=reward_funcs, args=args, train_dataset=dataset, rollout_func=rollout
    )
    batches = []
    original = trainer._generate_and_score_completions

    def record(inputs):
        output = original(inputs)
        batches.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in output.items()})
        return output

    trainer._generate_and_score_completions = record
    trainer.train()
    return trainer, batches


def losses(trainer) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def test_with_no_code_written_the_tool_changes_no_completion_and_no_loss(tiny_model_path, tmp_path):
    """The random tiny model never writes a ```python block: on and off, the same completions, advantages and loss.
    Off, the trainer gets no rollout_func (the CPU engine generates each row); on, the rollout's first turn asks the
    engine for the same rows with the same seeds (an answer's first turn is seeded as its row without the tool), so
    it samples the same tokens. (Its answers have no \\boxed{}, so
    they are void answers: trained on here, as without the tool.)"""
    prompts = [f"{a}+{b}=" for a in range(4) for b in range(4)]
    off, batches_off = recorded_run(tiny_model_path, prompts, config(tmp_path / "off"), [digit_share], False)
    on_args = config(tmp_path / "on", python_tool=True, tool_void_answers="train")
    on, batches_on = recorded_run(tiny_model_path, prompts, on_args, [digit_share], True)
    assert len(batches_off) == len(batches_on) == 2
    for a, b in zip(batches_off, batches_on, strict=True):
        assert torch.equal(a["completion_ids"], b["completion_ids"])
        assert torch.equal(a["completion_mask"], b["completion_mask"])
        assert torch.equal(a["advantages"], b["advantages"])
        assert "tool_mask" not in a and bool(b["tool_mask"].all())
    assert losses(off) == losses(on) and len(losses(on)) == 2
    assert any(value != 0 for value in losses(on))
    history = on.state.log_history[0]
    assert history[m.TOOL_CALLS_PER_ANSWER] == 0.0 and history[m.TOOL_OUTPUT_TOKENS] == 0.0


def test_observations_are_masked_and_the_rewards_never_see_them(tool_model, tmp_path):
    prompts = ["call 0:", "skip 0!", "call 1:", "skip 1!"]
    args = config(tmp_path, python_tool=True, tool_answer_marker="ok", max_steps=1, per_device_train_batch_size=16)
    trainer, batches = recorded_run(tool_model, prompts, args, [reads_tool_output], True)
    tokenizer = trainer.processing_class
    (batch,) = batches
    ids, mask, tool_mask = batch["completion_ids"], batch["completion_mask"], batch["tool_mask"]
    calls = 0
    for row in range(ids.shape[0]):
        length = int(mask[row].sum())
        text = tokenizer.decode(ids[row, :length])
        model_text = tokenizer.decode(ids[row, :length][tool_mask[row, :length].bool()])
        if text.startswith("```python"):
            calls += 1
            assert text == "```python\nprint(1)\n```\n```output\n1\n```\nok<|im_end|>"
            assert model_text == "```python\nprint(1)\n```ok<|im_end|>"  # zeros exactly on the observation
        else:
            assert text == model_text == "ok<|im_end|>"
    assert calls == 8
    # The reward that pays for seeing the tool's output paid nothing: it read the policy's text only.
    assert trainer.state.log_history[0]["rewards/reads_tool_output/mean"] == 0.0
    logged = trainer.state.log_history[0]
    assert logged[m.TOOL_CALLS_PER_ANSWER] == 0.5 and logged[m.TOOL_ERROR_RATE] == 0.0
    assert logged[m.TOOL_VOID_ANSWERS] == 0.0 and logged[m.TOOL_TOKEN_BUDGET_EXHAUSTED] == 0.0


def always_one(completions, **kwargs) -> list[float]:
    return [1.0] * len(completions)


always_one.reward_range = (0.0, 1.0)


def test_an_answer_cut_inside_its_program_is_truncated_and_scores_the_lowest(tool_model, tmp_path):
    """max_completion_length 2: the calling answers are cut after ```python\n print(1), inside their block."""
    args = config(tmp_path, python_tool=True, max_completion_length=2, max_steps=1, zero_reward_for_truncated=True)
    trainer, _ = recorded_run(tool_model, ["call 0:", "skip 0!"], args, [always_one], True)
    logged = trainer.state.log_history[0]
    assert logged[m.TOOL_CUT_IN_CODE] == 0.5 and logged[m.TOOL_TOKEN_BUDGET_EXHAUSTED] == 0.5
    assert logged[m.TRUNCATION_RATE] == 0.5
    assert logged["reward"] == 0.5  # the truncated half scored always_one's lowest, 0


def test_void_answers_are_left_out_of_the_loss(tool_model, tmp_path):
    """With the default marker \\boxed{, every scripted answer ('ok') is void: under `mask` no token is trained."""
    args = config(tmp_path, python_tool=True, max_steps=1)
    trainer, (batch,) = recorded_run(tool_model, ["call 0:", "skip 0!"], args, [digit_share], True)
    assert not batch["tool_mask"][batch["completion_mask"].bool()].any()
    assert trainer.state.log_history[0][m.TOOL_VOID_ANSWERS] == 1.0


def test_a_tiny_tool_run_through_scripts_train(tool_model, tmp_path):
    """scripts/train.py with python_tool on: the call budget ends the looping answers, the metrics are logged."""
    looping = build_tool_model(tmp_path / "looping", loop=True)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": "1"}) + "\n" for q in ("call 0:", "skip 0!")))
    command = [
        sys.executable, "scripts/train.py", "recipes/tiny_drgrpo.yaml", "--model_name_or_path", str(looping),
        "--dataset_path", str(data), "--output_dir", str(tmp_path / "run"), "--max_steps", "2",
        "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "64",
        "--logging_steps", "1", "--python_tool", "true", "--tool_max_calls", "2", "--tool_answer_marker", "ok",
        "--zero_reward_for_truncated", "true",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    history = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    logged = [entry for entry in history if m.TOOL_CALLS_PER_ANSWER in entry]
    assert len(logged) == 2
    for entry in logged:
        # Half the answers call twice, then write a third program past the budget: they end there, unrun.
        assert entry[m.TOOL_CALLS_PER_ANSWER] == 1.0
        assert entry[m.TOOL_CALL_BUDGET_EXHAUSTED] == 0.5
        assert entry[m.TOOL_VOID_ANSWERS] == 0.0
        assert entry[m.TRUNCATION_RATE] == 0.5  # an answer ended by the call budget has no eos: truncated
    assert "rollout" in result.stderr and "up to 2 programs per answer" in result.stderr  # the family card
