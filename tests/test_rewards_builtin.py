"""The format and length rewards against hand-computed values."""

from __future__ import annotations

import pytest

from drgrpo.data.templates import R1
from rewards import (
    RewardArguments,
    boxed_format_score,
    cosine_scaled,
    get_reward_funcs,
    overlong_penalty,
    r1_format_score,
)


@pytest.mark.parametrize(
    ("length", "expected"),
    # L_max = 100, L_cache = 20: 0 up to 80, then (80 - |y|) / 20, -1 beyond 100.
    [(0, 0.0), (80, 0.0), (81, -0.05), (90, -0.5), (99, -0.95), (100, -1.0), (101, -1.0), (5000, -1.0)],
)
def test_overlong_penalty_dapo(length, expected):
    assert overlong_penalty(length, max_length=100, buffer_length=20) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("length", "correct", "expected"),
    [
        (0, True, 1.0),
        (100, True, 0.5),
        (50, True, 0.75),  # cos(pi/2) = 0: halfway between 0.5 and 1.0
        (25, True, 0.926777),  # 0.5 + 0.25 * (1 + cos(pi/4)) = 0.5 + 0.25 * 1.707107
        (250, True, 0.5),  # clamped at T
        (0, False, -1.0),
        (100, False, -0.5),
        (50, False, -0.75),
        (25, False, -0.926777),
    ],
)
def test_cosine_scaled_open_r1_defaults(length, correct, expected):
    assert cosine_scaled(length, correct, max_length=100) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    ("completion", "opens_think", "expected"),
    [
        ("<think>a</think><answer>5</answer>", False, 1.0),
        (" <think>\nlet me see\n</think>\n<answer>\n5\n</answer>\n", False, 1.0),
        ("<think>a</think>", False, 0.0),
        ("<think>a</think><answer> </answer>", False, 0.0),
        ("<think>a</think><answer>5</answer> and more", False, 0.0),
        ("<think>a<think>b</think><answer>5</answer>", False, 0.0),
        ("<answer>5</answer><think>a</think>", False, 0.0),
        ("a</think><answer>5</answer>", False, 0.0),
        # The prompt ends with <think>: the completion starts inside the thinking block.
        ("a</think><answer>5</answer>", True, 1.0),
        (" reasoning </think> <answer>5</answer>", True, 1.0),
        ("<think>a</think><answer>5</answer>", True, 0.0),  # a second <think>
        # Conversational prompt: the chat template may or may not have opened the block.
        ("a</think><answer>5</answer>", None, 1.0),
        ("<think>a</think><answer>5</answer>", None, 1.0),
        ("", None, 0.0),
    ],
)
def test_r1_format_score(completion, opens_think, expected):
    assert r1_format_score(completion, opens_think) == expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("so \\boxed{5}.", 1.0),
        ("\\boxed{5} or \\boxed{6}", 0.0),
        ("\\boxed{}", 0.0),
        ("\\boxed{5", 0.0),
        ("no box", 0.0),
        ("\\fbox{x}", 1.0),
    ],
)
def test_boxed_format_score(completion, expected):
    assert boxed_format_score(completion) == expected


def test_format_reward_reads_the_prompt():
    (reward,) = get_reward_funcs(["format"])
    prompt = R1.format(question="1+1?")
    assert prompt.endswith("<think>")
    completions = ["2</think> <answer>2</answer>", "<think>2</think> <answer>2</answer>"]
    assert reward(prompts=[prompt, "plain question"], completions=completions) == [1.0, 1.0]
    assert reward(prompts=[prompt, prompt], completions=completions) == [1.0, 0.0]


def test_length_rewards_use_token_lengths_and_settings():
    settings = RewardArguments(overlong_buffer_length=2, cosine_max_length=10, reward_num_workers=0)
    overlong, cosine = get_reward_funcs(["overlong", "cosine_length"], settings, max_completion_length=10)
    ids = [[0] * 8, [0] * 9, [0] * 10]
    assert overlong(completions=["a", "b", "c"], completion_ids=ids) == pytest.approx([0.0, -0.5, -1.0])
    scores = cosine(
        completions=["\\boxed{1}", "\\boxed{2}", "\\boxed{1}"], completion_ids=[[0] * 5] * 3, answer=["1"] * 3
    )
    assert scores == pytest.approx([0.75, -0.75, 0.75])


def test_length_rewards_explain_what_they_miss():
    with pytest.raises(ValueError, match="overlong_max_length must be a positive number"):
        get_reward_funcs(["overlong"])
    (overlong,) = get_reward_funcs(["overlong"], max_completion_length=10)
    with pytest.raises(ValueError, match="completion_ids"):
        overlong(completions=["a"])
    with pytest.raises(ValueError, match="overlong_buffer_length must be in"):
        get_reward_funcs(["overlong"], RewardArguments(overlong_buffer_length=11), max_completion_length=10)
    (accuracy,) = get_reward_funcs(["accuracy"])
    with pytest.raises(ValueError, match="needs the dataset column 'answer'.*'solution'"):
        accuracy(completions=["1"], solution=["1"])
