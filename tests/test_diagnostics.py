"""The diag/ metrics against hand-computed numbers and against TRL's own logs, and the failure warnings."""

from __future__ import annotations

import json
import logging
import math

import pytest
import torch
from datasets import Dataset

from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.observe import diagnostics as d
from drgrpo.observe import failure_warnings as w
from drgrpo.observe import metric_names as m

NAN = math.nan


# --- per-batch metrics, hand-computed -----------------------------------------------------------------------------
def test_group_shares_pass_rate_and_lengths_by_hand():
    # 3 groups of 4: all correct / mixed (2 of 4) / all wrong.
    correctness = torch.tensor([1.0, 1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0])
    lengths = torch.tensor([2, 2, 4, 4, 6, 10, 6, 10, 8, 8, 12, 12])
    metrics = d.batch_diagnostics(lengths, torch.zeros(12, dtype=torch.bool), correctness, group_size=4)
    assert metrics[m.PASS_RATE] == pytest.approx(6 / 12)
    assert metrics[m.GROUPS_ALL_CORRECT] == pytest.approx(1 / 3)
    assert metrics[m.GROUPS_ALL_WRONG] == pytest.approx(1 / 3)
    assert metrics[m.PASS_AT_GROUP] == pytest.approx(2 / 3)
    # correct: 2,2,4,4,6,6 -> 24/6 = 4; incorrect: 10,10,8,8,12,12 -> 60/6 = 10
    assert metrics[m.LENGTH_CORRECT] == pytest.approx(4.0)
    assert metrics[m.LENGTH_INCORRECT] == pytest.approx(10.0)
    assert metrics[m.TRUNCATION_RATE] == 0.0


def test_unscored_completions_are_in_no_share_and_threshold_applies():
    # Group 1: [0.7, NaN] with threshold 0.5 -> the one scored is correct -> all correct.
    # Group 2: [NaN, NaN] -> nothing scored: in no numerator, still in the denominator (a group of the batch).
    # Group 3: [0.4, 0.0] -> all wrong at threshold 0.5.
    correctness = torch.tensor([0.7, NAN, NAN, NAN, 0.4, 0.0])
    shares = d.group_outcome_shares(correctness, 2, threshold=0.5)
    assert shares == {m.GROUPS_ALL_CORRECT: pytest.approx(1 / 3), m.GROUPS_ALL_WRONG: pytest.approx(1 / 3),
                      m.PASS_AT_GROUP: pytest.approx(1 / 3)}  # fmt: skip
    assert d.pass_rate(correctness, 0.5) == pytest.approx(1 / 3)  # 1 correct of 3 scored
    correct_len, incorrect_len = d.mean_length_by_correctness(torch.tensor([1, 2, 3, 4, 5, 6]), correctness, 0.5)
    assert (correct_len, incorrect_len) == (1.0, 5.5)
    assert math.isnan(d.pass_rate(torch.tensor([NAN, NAN]), 1.0))


def test_empty_side_of_the_length_split_is_nan_and_bad_group_size_is_an_error():
    correct_len, incorrect_len = d.mean_length_by_correctness(torch.tensor([3, 5]), torch.tensor([0.0, 0.0]))
    assert math.isnan(correct_len) and incorrect_len == 4.0
    with pytest.raises(ValueError, match="groups of 4"):
        d.group_outcome_shares(torch.zeros(6), 4)


def test_lengths_and_truncation_from_padded_batch():
    eos, pad = 7, 0
    completion_ids = torch.tensor(
        [
            [5, 6, eos, pad],  # stopped: length 3
            [5, 6, 5, 6],  # hit the limit: truncated, length 4
            [eos, pad, pad, pad],  # stopped at once: length 1
            [5, 6, 5, 6],  # truncated and masked out by mask_truncated_completions
        ]
    )
    completion_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]])
    lengths, truncated = d.completion_lengths_and_truncation(completion_ids, completion_mask, [eos, pad], 4)
    assert lengths.tolist() == [3, 4, 1, 4]
    assert truncated.tolist() == [False, True, False, True]


def test_ratio_statistics_by_hand_and_across_processes():
    # Process A: log-ratios 0 and ln 2 (ratios 1 and 2), third token masked out; process B: log-ratio -ln 2 (0.5)
    # and a NaN old log-prob (a token vLLM could not score), which is left out.
    ln2 = math.log(2.0)
    sums_a = d.log_ratio_sums(torch.tensor([[0.0, ln2, 5.0]]), torch.zeros(1, 3), torch.tensor([[1, 1, 0]]))
    sums_b = d.log_ratio_sums(torch.tensor([[-ln2, 0.0]]), torch.tensor([[0.0, NAN]]), torch.tensor([[1, 1]]))
    mean_ratio, max_abs_log = d.ratio_statistics(torch.stack([sums_a, sums_b]))
    assert mean_ratio == pytest.approx((1 + 2 + 0.5) / 3)
    assert max_abs_log == pytest.approx(ln2)
    empty = d.log_ratio_sums(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2))
    assert all(math.isnan(x) for x in d.ratio_statistics(empty))


@pytest.mark.parametrize(
    "generate_every, accumulation, expected",
    [
        (1, 1, [True] * 6),  # one micro-step per generation and per update
        (2, 1, [True, False] * 3),  # num_iterations=2: the second pass is after an update
        (4, 2, [True, True, False, False] + [True, True]),  # 2 updates per generation batch
        (2, 4, [True] * 6),  # several generations inside one accumulation window: weights unchanged
        (3, 2, [True, True, False, True, False, False]),  # generation at 3 falls mid-window; 4 is after an update
    ],
)
def test_before_first_update(generate_every, accumulation, expected):
    assert [d.before_first_update(m, generate_every, accumulation) for m in range(6)] == expected


def test_correctness_reward_resolution():
    assert d.resolve_correctness_reward(["format", "accuracy"], None) == 1
    assert d.resolve_correctness_reward(["format"], None) is None
    assert d.resolve_correctness_reward(["format", "my_check"], "my_check") == 1
    with pytest.raises(ValueError, match="correctness_reward='acc'.*'format'"):
        d.resolve_correctness_reward(["format"], "acc")


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("warn_zero_std_share", 1.5, "warn_zero_std_share"),
        ("diagnostics_window", 0, "diagnostics_window"),
        ("warn_jump_factor", 1.0, "warn_jump_factor"),
        ("warn_kl_floor", -1.0, "warn_kl_floor"),
    ],
)
def test_out_of_range_settings_name_the_key(tmp_path, key, value, match):
    with pytest.raises(ValueError, match=match):
        DrGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **{key: value})


# --- warnings -----------------------------------------------------------------------------------------------------
def test_window_mean_and_jump_conditions():
    assert w.window_mean([0.5, 1.0], 3) is None
    assert w.window_mean([0.0, 0.5, 1.0, 0.9], 3) == pytest.approx(0.8)
    assert not w.jumped([0.01, 0.3], factor=5, floor=0.05, window=3)  # too little history
    assert w.jumped([0.01, 0.02, 0.01, 0.2], factor=5, floor=0.05, window=3)  # median 0.01 -> 0.2 > 0.05
    assert not w.jumped([0.001, 0.002, 0.001, 0.04], factor=5, floor=0.05, window=3)  # below the floor
    assert not w.jumped([0.1, 0.12, 0.11, 0.3], factor=5, floor=0.05, window=3)  # under 5x the median


def feed(callback: w.DiagnosticsCallback, rows: list[dict]) -> None:
    class State:
        is_world_process_zero = True
        global_step = 0

    state = State()
    for row in rows:
        state.global_step += 1
        callback.on_log(None, state, None, logs=row)


def test_callback_warns_once_per_kind_with_the_checklist_row(caplog):
    settings = DrGRPOConfig(output_dir="unused", use_cpu=True, report_to="none", diagnostics_window=3)
    callback = w.DiagnosticsCallback(settings)
    healthy = {"frac_reward_zero_std": 0.3, m.TRUNCATION_RATE: 0.05, "entropy": 0.8, "clip_ratio/region_mean": 0.01}
    stuck = {**healthy, "frac_reward_zero_std": 0.95, m.TRUNCATION_RATE: 0.6}
    with caplog.at_level(logging.WARNING, logger="drgrpo.observe.failure_warnings"):
        feed(callback, [healthy] * 4)
        assert caplog.records == []
        feed(callback, [stuck] * 2)
        assert caplog.records == []  # window means (0.3 + 0.95 + 0.95) / 3 < 0.9 and (0.05 + 0.6 + 0.6) / 3 < 0.5
        feed(callback, [stuck] * 5)
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2  # once per kind, not once per log
    assert any("all-equal rewards" in m and "reward does not move" in m for m in messages)
    assert any("max_completion_length" in m for m in messages)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="drgrpo.observe.failure_warnings"):
        feed(callback, [{**healthy, "entropy": 0.01}] * 3 + [{**healthy, "clip_ratio/region_mean": 0.3}])
    kinds = " ".join(record.getMessage() for record in caplog.records)
    assert "entropy collapses" in kinds and "clip fraction jumped to 0.3" in kinds


def test_truncated_share_of_correct_by_hand():
    truncated = torch.tensor([True, False, True, False, True])
    correctness = torch.tensor([1.0, 1.0, 1.0, 0.0, NAN])
    assert d.truncated_share_of_correct(truncated, correctness) == pytest.approx(2 / 3)  # 2 of the 3 correct ones
    assert math.isnan(d.truncated_share_of_correct(truncated, torch.zeros(5)))  # nothing correct: undefined
    metrics = d.batch_diagnostics(torch.ones(5), truncated, correctness, group_size=5)
    assert metrics[m.TRUNCATED_SHARE_OF_CORRECT] == pytest.approx(2 / 3)


def test_truncation_collapse_is_named_with_its_fix(caplog):
    """The SmolLM2 run without zero_reward_for_truncated: reward up, 85% truncated, truncated completions credited.
    The warning names the collapse and `zero_reward_for_truncated`, and does not claim every reward is 0."""
    settings = DrGRPOConfig(output_dir="unused", use_cpu=True, report_to="none", diagnostics_window=3)
    callback = w.DiagnosticsCallback(settings)
    collapse = {m.TRUNCATION_RATE: 0.85, m.TRUNCATED_SHARE_OF_CORRECT: 0.6, m.PASS_RATE: 0.3}
    with caplog.at_level(logging.WARNING, logger="drgrpo.observe.failure_warnings"):
        feed(callback, [collapse] * 3)
    messages = [record.getMessage() for record in caplog.records]
    assert any("truncation collapse" in x and "zero_reward_for_truncated: true" in x for x in messages), messages
    assert any("85% of all completions were cut off" in x and "60% of the completions graded correct" in x
               for x in messages)  # fmt: skip
    assert not any("every reward is 0" in x for x in messages)


def test_truncation_without_credit_is_not_called_a_collapse():
    settings = DrGRPOConfig(output_dir="unused", use_cpu=True, report_to="none", diagnostics_window=2)
    honest = {m.TRUNCATION_RATE: [0.8, 0.8], m.TRUNCATED_SHARE_OF_CORRECT: [0.0, 0.0], m.PASS_RATE: [0.4, 0.4]}
    kinds = {x.kind: x.message for x in w.check_history(honest, settings)}
    assert set(kinds) == {"truncation"} and "every reward is 0" not in kinds["truncation"]
    nothing = {m.TRUNCATION_RATE: [0.9, 0.9], m.PASS_RATE: [0.0, 0.0]}
    assert "every reward is 0" in w.check_history(nothing, settings)[0].message


def test_callback_off_switch(tiny_model_path, tmp_path):
    from drgrpo.algorithm.trainer import DrGRPOTrainer
    from rewards import accuracy

    dataset = Dataset.from_list([{"prompt": "1+1=", "answer": "2"}] * 8)
    common = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none", num_generations=4,
                  per_device_train_batch_size=8, max_completion_length=4)  # fmt: skip
    for enabled in (True, False):
        args = DrGRPOConfig(diagnostics_warnings=enabled, **common)
        trainer = DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[accuracy], args=args, train_dataset=dataset)
        has_callback = any(isinstance(cb, w.DiagnosticsCallback) for cb in trainer.callback_handler.callbacks)
        assert has_callback is enabled


def test_vllm_sampler_ratio_is_logged_next_to_the_first_update_ratio(tiny_model_path, tmp_path):
    """The vLLM branch without vLLM: the probe's logging gets TRL-shaped inputs holding both reference log-probs."""
    from drgrpo.algorithm.trainer import DrGRPOTrainer
    from rewards import accuracy

    dataset = Dataset.from_list([{"prompt": "1+1=", "answer": "2"}] * 8)
    args = DrGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", num_generations=4,
                        per_device_train_batch_size=8, max_completion_length=4)  # fmt: skip
    trainer = DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[accuracy], args=args, train_dataset=dataset)
    ln2 = math.log(2.0)
    current = torch.tensor([[0.0, 0.0, 0.0]])
    inputs = {
        "old_per_token_logps": torch.tensor([[0.0, 0.0, 9.0]]),  # trainer's own old log-probs: ratio 1 (3rd masked)
        "sampling_per_token_logps": torch.tensor([[ln2, -ln2, 9.0]]),  # vLLM's: ratios 1/2 and 2
    }
    trainer._log_first_update_ratios(current, inputs, mask=torch.tensor([[1, 1, 0]]))
    logged = trainer._metrics["train"]
    assert logged[m.FIRST_UPDATE_RATIO_MEAN] == [1.0] and logged[m.FIRST_UPDATE_MAX_ABS_LOG_RATIO] == [0.0]
    assert logged[m.SAMPLER_TRAINER_RATIO_MEAN] == [pytest.approx(1.25)]
    assert logged[m.SAMPLER_TRAINER_MAX_ABS_LOG_RATIO] == [pytest.approx(ln2)]


# --- end to end: the trainer's logs agree with TRL's independently computed metrics ---------------------------------
def first_char_even(completions, **kwargs) -> list[float]:
    """A 0/1 reward that the random tiny model passes about half the time, so groups are mixed."""
    return [1.0 if c and ord(c[0]) % 2 == 0 else 0.0 for c in completions]


def test_trainer_logs_diagnostics_consistent_with_trl(tiny_model_path, addition_data, tmp_path):
    from drgrpo.algorithm.trainer import DrGRPOTrainer

    rows = [json.loads(line) for line in open(addition_data["train"])][:64]
    dataset = Dataset.from_list([{"prompt": r["question"], "answer": r["answer"]} for r in rows])
    args = DrGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", save_strategy="steps", seed=0,
        save_steps=4, max_steps=4, per_device_train_batch_size=16, num_generations=4, max_completion_length=6,
        logging_steps=1, num_iterations=2, correctness_reward="first_char_even", learning_rate=1e-3,
    )  # fmt: skip
    trainer = DrGRPOTrainer(
        model=str(tiny_model_path), reward_funcs=[first_char_even], args=args, train_dataset=dataset
    )
    trainer.train()
    # What a run leaves on disk: the metrics are in trainer_state.json's log history.
    history = json.loads((tmp_path / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
    generation_logs = [h for h in history if "reward" in h]
    assert len(generation_logs) == 2  # num_iterations=2: one generation every two steps
    saw_mixed = False
    for log in generation_logs:
        # pass rate is the 0/1 reward's mean; all-correct + all-wrong groups are exactly TRL's zero-std groups.
        assert log[m.PASS_RATE] == pytest.approx(log["rewards/first_char_even/mean"], abs=1e-6)
        assert log[m.GROUPS_ALL_CORRECT] + log[m.GROUPS_ALL_WRONG] == pytest.approx(log["frac_reward_zero_std"])
        assert log[m.TRUNCATION_RATE] == pytest.approx(log["completions/clipped_ratio"])
        assert log[m.GROUPS_ALL_CORRECT] <= log[m.PASS_RATE] <= log[m.PASS_AT_GROUP]
        if log[m.LENGTH_CORRECT] is not None and log[m.LENGTH_INCORRECT] is not None:
            saw_mixed = True
            # The length split recombines into TRL's mean completion length.
            recombined = log[m.PASS_RATE] * log[m.LENGTH_CORRECT] + (1 - log[m.PASS_RATE]) * log[m.LENGTH_INCORRECT]
            assert recombined == pytest.approx(log["completions/mean_length"])
        # Before the first update the trainer's log-probs are the ones TRL stored as old: ratio 1.
        assert log[m.FIRST_UPDATE_RATIO_MEAN] == pytest.approx(1.0, abs=1e-4)
        assert log[m.FIRST_UPDATE_MAX_ABS_LOG_RATIO] < 1e-3
    assert saw_mixed
    # The second pass over each batch runs after an update: no first-update ratio is logged there.
    second_pass = [h for h in history if "entropy" in h and "reward" not in h]
    assert second_pass and all(m.FIRST_UPDATE_RATIO_MEAN not in h for h in second_pass)


def test_no_signal_groups_are_counted_by_the_total_reward_under_weighted_rewards(
    tiny_model_path, addition_data, tmp_path, run_script
):
    """Issue 54, item 9: with `reward_funcs: [always_right, digit_share]`, weights 1 and 0.5, every group is all
    correct by the first reward, yet its total varies with the second: it has signal. The plot's "Groups with no signal
    (all-equal rewards)" panel (diag/groups_all_correct, diag/groups_all_wrong and TRL's total) showed "all correct"
    1.0 above a total near 0; the split now counts only groups whose total is all equal, by TRL's own rule."""
    from test_first_hour import tiny_run

    output_dir = tmp_path / "run"
    rewards = ["tests/fixtures/always_right.py:always_right", "tests/fixtures/digit_share.py:digit_share"]
    run = tiny_run(tiny_model_path, addition_data["train"], output_dir, "--max_steps", "2", "--reward_funcs",
                   *rewards, "--reward_weights", "1.0", "0.5", "--correctness_reward", "always_right")  # fmt: skip
    result = run_script(*run)
    assert result.returncode == 0, result.stderr[-3000:]
    logs = [json.loads(line) for line in (output_dir / "log_history.jsonl").read_text().splitlines()]
    logs = [log for log in logs if "frac_reward_zero_std" in log]
    assert len(logs) == 2
    assert any(log["frac_reward_zero_std"] < 1 for log in logs)  # the second reward gave most groups signal
    for log in logs:
        assert log[m.PASS_RATE] == 1.0 and log[m.GROUPS_ALL_WRONG] == 0.0
        assert log[m.GROUPS_ALL_CORRECT] == pytest.approx(log["frac_reward_zero_std"])  # all correct, no signal
