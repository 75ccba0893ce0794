"""What the Python tool's outputs may not do (issue 41): reach a terminal with its control characters (observations
are stripped, the console's completions table shows the policy's own control characters escaped), or count towards a
length reward (every reward's `completion_ids` are the policy's own ids).

Trainer runs use tests/tool_model.py's scripted model: prompts ending in ':' write one program, then the answer word;
prompts ending in '!' write the answer word at once.
"""

from __future__ import annotations

import re
from collections import deque

import pandas as pd
import pytest
from test_tool_training import recorded_run
from tool_model import build_tool_model

from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.console_table import console_entry
from drgrpo.algorithm.rollout.loop import LoopSettings, run_tool_loop
from drgrpo.algorithm.rollout.protocol import observation_text
from drgrpo.algorithm.trainer import DrGRPOTrainer
from rewards import cosine_scaled, get_reward_funcs, overlong_penalty
from rewards.code.sandbox import RunResult
from rewards.code.tool import observation_of

# OSC 0 (window title), OSC 52 (clipboard), CSI (colour), C1 CSI and NEL, CR, NUL, DEL; tab and newline are layout.
PRINTED = "a\x1b]0;pwned\x07b\x1b]52;c;cHduZWQ=\x07c\x1b[31md\x9b2J\x85e\r\x00\x7ff\tg\nh"
SHOWN = "a]0;pwnedb]52;c;cHduZWQ=c[31md2Jef\tg\nh"
# Raw terminal controls (ESC, BEL, CR, ...) and C1, as written by hand here: what must not reach a console.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# The policy's own answer word, holding an OSC 0 and a C1 CSI.
ANSWER = "ok\x1b]0;pwned\x07\x9b2J"


def run_result(status: str, stdout: bytes = b"", stderr: bytes = b"", exit_code: int | None = 0) -> RunResult:
    return RunResult(status, exit_code, stdout, stderr, 0.01)


def test_the_observation_keeps_no_control_character_but_newline_and_tab():
    assert observation_of(run_result("ok", PRINTED.encode()), 1000).output == SHOWN
    stderr = b"Traceback (most recent call last):\nValueError: \x1b]52;c;eA==\x07bad\r\n"
    crashed = observation_of(run_result("crash", PRINTED.encode(), stderr, 1), 1000)
    assert crashed.output == f"{SHOWN}\nValueError: ]52;c;eA==bad"
    # Stripped before the cut: the limit counts the characters the policy reads.
    assert observation_of(run_result("ok", PRINTED.encode()), len(SHOWN)).output == SHOWN


class PrintingTool:
    def run_many(self, programs):
        return [observation_of(run_result("ok", PRINTED.encode()), 400) for _ in programs]


def test_the_observation_ids_hold_no_control_character():
    """Through the loop with the tiny character-level tokenizer: the observation's ids decode to the stripped text,
    none is an unknown-character id (ESC, BEL and C1 have none) or a control character's id (CR, VT, FF have one)."""
    from drgrpo.experiments.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    program = tokenizer.encode("```python\nprint(1)\n```", add_special_tokens=False)
    after = tokenizer.encode("ok", add_special_tokens=False) + [tokenizer.eos_token_id]
    turns = iter([program, after])
    settings = LoopSettings(max_calls=2, max_tokens=400, eos_ids=(tokenizer.eos_token_id,))
    (answer,) = run_tool_loop(
        [[5, 6]], lambda rows, budgets, owners: [(next(turns), None)], PrintingTool(), tokenizer, settings
    )
    observation = answer.turns[0].observation_ids
    assert tokenizer.decode(observation) == observation_text(SHOWN, "```python\nprint(1)\n```")
    assert tokenizer.unk_token_id not in observation
    assert not any(RAW_CONTROL.search(tokenizer.decode([token])) for token in observation)


def test_console_entries_escape_control_characters_in_every_shape():
    message = [{"role": "assistant", "content": "a\x1bb\tc\n", "tool_calls": [{"function": {"arguments": '{"x": 1}'}}]}]
    assert console_entry("a\x1b]0;t\x07\x9b") == "a\\x1b]0;t\\x07\\x9b"
    assert console_entry(message) == [
        {"role": "assistant", "content": "a\\x1bb\tc\n", "tool_calls": [{"function": {"arguments": '{"x": 1}'}}]}
    ]
    assert console_entry({"col": deque(["\r", 1.5, None])}) == {"col": ["\\x0d", 1.5, None]}  # TRL's buffers
    assert console_entry(None) is None


def config(tmp_path, **overrides) -> DrGRPOConfig:
    values = dict(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", dr_grpo=True, num_generations=4,
        per_device_train_batch_size=8, max_completion_length=128, max_steps=1, logging_steps=1, seed=0,
        save_strategy="no", learning_rate=1e-3, python_tool=True, tool_answer_marker="ok",
    )  # fmt: skip
    values.update(overrides)
    return DrGRPOConfig(**values)


def one_step(model, args, reward_funcs) -> tuple[DrGRPOTrainer, dict]:
    """One training step with the tool on prompts 'call 0:' (one program) and 'skip 0!' (none), gold answer 7; the
    trainer and the batch as the loss received it."""
    prompts = [{"prompt": "call 0:", "answer": "7"}, {"prompt": "skip 0!", "answer": "7"}]
    trainer, (batch,) = recorded_run(model, prompts, args, reward_funcs, with_tool=True)
    return trainer, batch


def rows(batch) -> list[tuple[list[int], list[int]]]:
    """Each completion's (ids, mask): the whole trajectory's ids and its 1-on-generated-ids mask."""
    lengths = batch["completion_mask"].sum(dim=1).tolist()
    return [
        (batch["completion_ids"][i, :n].tolist(), batch["tool_mask"][i, :n].tolist()) for i, n in enumerate(lengths)
    ]


def zero(completions, **kwargs) -> list[float]:
    return [0.0] * len(completions)


def test_escape_sequences_reach_neither_the_observation_nor_the_console(tmp_path, capsys, monkeypatch):
    """A real program prints OSC 0/52 and C1 controls; the policy's own answer holds some too. The trained
    observation (text and ids) has none; the console table (rich) prints the policy's escaped, and no raw control at
    all; the parquet table keeps the raw text the policy wrote."""
    monkeypatch.setenv("COLUMNS", "400")  # one table row per line: the escaped answer is not wrapped
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)  # no colour codes of rich's own
    program = f"print({PRINTED!r})"
    model = build_tool_model(tmp_path / "model", program=program, answer=ANSWER)
    args = config(tmp_path / "run", log_completions=True)
    trainer, batch = one_step(model, args, [zero])
    tokenizer = trainer.processing_class
    calls = 0
    for ids, mask in rows(batch):
        observation = [token for token, kept in zip(ids, mask, strict=True) if not kept]
        if observation:
            calls += 1
            assert tokenizer.decode(observation) == f"\n```output\n{SHOWN}\n```\n"
            assert tokenizer.unk_token_id not in observation
        assert tokenizer.decode(ids).endswith(f"{ANSWER}<|im_end|>")  # the policy's own controls are trained as is
    assert calls == 4
    console = capsys.readouterr().out
    assert "Step 1" in console and "ok\\x1b]0;pwned\\x07\\x9b2J" in console
    assert not RAW_CONTROL.search(console)
    table = pd.read_parquet(tmp_path / "run" / "completions" / "completions_00001.parquet")
    assert all(completion.endswith(ANSWER) for completion in table["completion"])


PADDING = "print('x ' * 100)"  # 199 characters of output: ~214 observation tokens


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The same policy tokens ('```python\\n', the program, '\\n```', 'ok', eos), one program printing 1, the other
    a line of padding."""
    folder = tmp_path_factory.mktemp("length-models")
    return {
        program: build_tool_model(folder / str(i), program=program) for i, program in enumerate(("print(1)", PADDING))
    }


def test_length_rewards_and_completion_ids_count_the_policys_tokens_only(models, tmp_path):
    """The same wrong answer scores the same under `overlong` and `cosine_length` whether its program printed 1 or a
    line of padding, the score of its 5 generated tokens; a custom reward's `completion_ids` are the generated ids."""
    max_length = 256
    seen: dict[str, list] = {}
    scores = {}
    for program, model in models.items():

        def record(completions, completion_ids, program=program, **kwargs):
            seen[program] = [list(ids) for ids in completion_ids]
            return [0.0] * len(completions)

        rewards = [*get_reward_funcs(["overlong", "cosine_length"], max_completion_length=max_length), record]
        args = config(tmp_path / str(len(scores)), max_completion_length=max_length)
        trainer, batch = one_step(model, args, rewards)
        scores[program] = trainer._last_rewards_per_func[:, :2].tolist()
        trajectories = rows(batch)
        model_ids = [[token for token, kept in zip(ids, mask, strict=True) if kept] for ids, mask in trajectories]
        assert seen[program] == model_ids  # the generated ids alone, in the batch's order
        assert sorted(len(ids) for ids in model_ids) == [2] * 4 + [5] * 4
        if program == PADDING:
            assert max(len(ids) for ids, _ in trajectories) > 200  # the observations are long
    assert scores["print(1)"] == scores[PADDING]
    lengths = [len(ids) for ids in seen[PADDING]]
    expected = [
        [overlong_penalty(n, max_length, max_length // 5), cosine_scaled(n, False, max_length)] for n in lengths
    ]
    assert scores[PADDING] == [pytest.approx(row) for row in expected]
    assert max(cosine for _, cosine in scores[PADDING]) < -0.99  # a short wrong answer's, whatever the program printed
