"""group_advantages against the background note's hand tables, its invariants, verl's and TRL's conventions."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from trl.trainer.utils import nanstd

from drgrpo.algorithm.advantages import advantage_table, combine_rewards, group_advantages

BINARY = [1, 0, 1, 1, 0, 0, 1, 0]
NON_BINARY = [0.9, 0.2, 0.5, 0.7, 0.1, 0.3, 0.8, 0.4]
REFERENCE = {"std_ddof": 0, "epsilon": 1e-8}  # population std, as the hand-computed reference


def test_binary_group_reference_table():
    adv = group_advantages(torch.tensor(BINARY, dtype=torch.float64), 8, **REFERENCE)
    expected = [1.0 if r else -1.0 for r in BINARY]
    assert adv.tolist() == pytest.approx(expected, abs=1e-4)
    dr = group_advantages(torch.tensor(BINARY, dtype=torch.float64), 8, scale_by_std=False)
    assert dr.tolist() == pytest.approx([0.5 if r else -0.5 for r in BINARY], abs=1e-12)


def test_non_binary_group_reference_table():
    adv = group_advantages(torch.tensor(NON_BINARY, dtype=torch.float64), 8, **REFERENCE)
    # Hand-computed in the background note: mean 0.4875, population std 0.271282.
    assert adv[0].item() == pytest.approx(1.5206, abs=1e-4)  # reward 0.9
    assert adv[4].item() == pytest.approx(-1.4284, abs=1e-4)  # reward 0.1
    assert adv[2].item() == pytest.approx(0.0461, abs=1e-4)  # reward 0.5, near the mean
    dr = group_advantages(torch.tensor(NON_BINARY, dtype=torch.float64), 8, scale_by_std=False)
    assert dr.tolist() == pytest.approx([r - 0.4875 for r in NON_BINARY], abs=1e-12)


def test_sample_std_differs_from_population_std_by_bessel_factor():
    rewards = torch.tensor(BINARY, dtype=torch.float64)
    population = group_advantages(rewards, 8, std_ddof=0, epsilon=0.0)
    sample = group_advantages(rewards, 8, std_ddof=1, epsilon=0.0)
    assert (population / sample).tolist() == pytest.approx([math.sqrt(8 / 7)] * 8, rel=1e-12)


def test_all_equal_group_gives_zeros_not_nan():
    rewards = torch.tensor([1.0] * 4 + [0.0] * 4)
    for scale in (True, False):
        adv = group_advantages(rewards, 4, scale_by_std=scale)
        assert torch.equal(adv, torch.zeros(8))


def test_nan_rewards_are_excluded_and_get_zero_advantage():
    rewards = torch.tensor([1.0, float("nan"), 0.0, 1.0], dtype=torch.float64)
    adv = group_advantages(rewards, 4, scale_by_std=False)
    # Mean over the 3 scored samples is 2/3; the NaN sample gets exactly 0.
    assert adv.tolist() == pytest.approx([1 / 3, 0.0, -2 / 3, 1 / 3], abs=1e-12)
    scaled = group_advantages(rewards, 4, std_ddof=0, epsilon=0.0)
    std = math.sqrt(((1 / 3) ** 2 * 2 + (2 / 3) ** 2) / 3)
    assert scaled.tolist() == pytest.approx([1 / 3 / std, 0.0, -2 / 3 / std, 1 / 3 / std], abs=1e-9)


def test_group_with_single_scored_sample_gets_zero():
    rewards = torch.tensor([float("nan"), 1.0, float("nan"), float("nan")])
    assert group_advantages(rewards, 4).tolist() == [0.0, 0.0, 0.0, 0.0]


def test_group_of_one_gets_zero_as_in_trl():
    # TRL 1.16 (eval with num_generations_eval=1): mean = the reward itself, std 0, so A = 0 with or without scaling.
    rewards = torch.tensor([1.0, 0.25, 1.0, 0.25])
    for scale in (True, False):
        for ddof in (0, 1):
            assert group_advantages(rewards, 1, scale_by_std=scale, std_ddof=ddof).tolist() == [0.0] * 4


def test_verl_single_sample_group_rule_is_opt_in():
    # verl compute_grpo_outcome_advantage: a group of one sample uses mean 0 and std 1, so A is the raw score.
    rewards = torch.tensor([0.7, 0.0, 1.0], dtype=torch.float64)
    verl = {"verl_single_sample_rule": True}
    assert group_advantages(rewards, 1, scale_by_std=False, **verl).tolist() == [0.7, 0.0, 1.0]
    scaled = group_advantages(rewards, 1, epsilon=1e-6, **verl)
    assert scaled.tolist() == pytest.approx([0.7 / (1 + 1e-6), 0.0, 1.0 / (1 + 1e-6)], rel=1e-12)
    # The option changes nothing for real groups.
    pair = torch.tensor([1.0, 0.0], dtype=torch.float64)
    assert torch.equal(group_advantages(pair, 2, **verl), group_advantages(pair, 2))


def test_all_equal_group_is_zero_even_with_epsilon_zero():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    adv = group_advantages(rewards, 2, std_ddof=0, epsilon=0.0)
    assert adv[:2].tolist() == [0.0, 0.0]  # std 0, not 0/0
    assert adv[2:].tolist() == pytest.approx([-1.0, 1.0])


def test_groups_are_contiguous_and_independent():
    a = torch.tensor([1.0, 0.0, 0.0, 0.0])
    b = torch.tensor([0.5, 0.5, 0.0, 1.0])
    both = group_advantages(torch.cat([a, b]), 4)
    assert torch.equal(both, torch.cat([group_advantages(a, 4), group_advantages(b, 4)]))


@pytest.mark.parametrize("bad", [0, -1])
def test_invalid_group_size(bad):
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(torch.zeros(4), bad)


def test_length_not_multiple_of_group_size():
    with pytest.raises(ValueError, match="multiple of group_size=3"):
        group_advantages(torch.zeros(4), 3)


groups = st.integers(min_value=2, max_value=16).flatmap(
    lambda g: st.tuples(
        st.just(g),
        st.lists(st.floats(min_value=-10, max_value=10, allow_nan=False, width=32), min_size=g, max_size=g * 4).filter(
            lambda xs: len(xs) % g == 0
        ),
    )
)


@settings(max_examples=200, deadline=None)
@given(groups)
def test_properties_over_random_groups(case):
    group_size, values = case
    rewards = torch.tensor(values, dtype=torch.float64)
    scaled = group_advantages(rewards, group_size, std_ddof=0, epsilon=1e-8).view(-1, group_size)
    centred = group_advantages(rewards, group_size, scale_by_std=False).view(-1, group_size)
    grouped = rewards.view(-1, group_size)
    deviation = grouped - grouped.mean(dim=1, keepdim=True)
    # Sum to ~0 per group.
    assert torch.allclose(scaled.sum(dim=1), torch.zeros(len(grouped), dtype=torch.float64), atol=1e-6)
    assert torch.allclose(centred.sum(dim=1), torch.zeros(len(grouped), dtype=torch.float64), atol=1e-9)
    # Dr.GRPO advantage is exactly R - mean.
    assert torch.allclose(centred, deviation, atol=1e-12)
    for row, dev, raw in zip(scaled, deviation, grouped, strict=True):
        if raw.std(correction=0) > 1e-3:
            # sign(A) = sign(R - mean), and population std of A is ~1.
            assert torch.equal(torch.sign(row[dev.abs() > 1e-9]), torch.sign(dev[dev.abs() > 1e-9]))
            assert row.std(correction=0).item() == pytest.approx(1.0, abs=1e-4)
        elif raw.max() == raw.min():
            assert torch.equal(row, torch.zeros_like(row))


@settings(max_examples=100, deadline=None)
@given(groups, st.randoms(use_true_random=False))
def test_equals_trl_inline_computation_at_defaults(case, rng):
    """TRL 1.16 GRPOTrainer: (r - nanmean) / (nanstd + 1e-4), then NaN -> 0 (ddof 1, eps 1e-4: our defaults)."""
    group_size, values = case
    values = [v if rng.random() > 0.15 else float("nan") for v in values]
    rewards = torch.tensor(values, dtype=torch.float32)
    grouped = rewards.view(-1, group_size)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(group_size)
    std = nanstd(grouped, dim=1).repeat_interleave(group_size)
    trl_group = torch.nan_to_num((rewards - mean) / (std + 1e-4), nan=0.0)
    trl_none = torch.nan_to_num(rewards - mean, nan=0.0)
    ours_group = group_advantages(rewards, group_size)
    ours_none = group_advantages(rewards, group_size, scale_by_std=False)
    # TRL gives NaN (then 0) to every sample of a group with a single scored sample (nanstd is NaN); ours gives 0
    # to that sample too (it equals its own mean), so the two agree everywhere.
    assert torch.allclose(ours_group, trl_group, atol=1e-4, rtol=1e-4)
    assert torch.allclose(ours_none, trl_none, atol=1e-6)


def test_combine_rewards_weights_and_unscorable_rows():
    per_func = torch.tensor([[1.0, 0.5], [float("nan"), 1.0], [float("nan"), float("nan")], [0.0, 0.0]])
    total = combine_rewards(per_func, torch.tensor([2.0, -1.0]))
    assert total[:2].tolist() == [1.5, -1.0] and math.isnan(total[2].item()) and total[3].item() == 0.0


def test_advantage_table_lists_every_sample():
    table = advantage_table([1, 0, 1, 1, 0, 0, 1, 0], std_ddof=0, epsilon=1e-8)
    lines = table.splitlines()
    assert len(lines) == 10
    assert lines[1].split() == ["0", "1.0000", "+1.0000", "+0.5000", "yes"]
    assert lines[2].split() == ["1", "0.0000", "-1.0000", "-0.5000", "no"]
    assert "mean=0.5000 std=0.500000" in lines[-1]


# --- leave-one-out (RLOO) baseline: A_i = R_i - mean_{j != i} R_j ---------------------------------------------------
def test_leave_one_out_binary_hand_table():
    # Group [1, 0, 1, 1]: the correct ones see siblings (0, 1, 1) -> baseline 2/3; the wrong one sees (1, 1, 1) -> 1.
    # Group [0, 0, 0, 1]: the wrong ones see two 0s and the 1 -> 1/3; the correct one sees three 0s -> 0.
    rewards = torch.tensor([1, 0, 1, 1, 0, 0, 0, 1], dtype=torch.float64)
    adv = group_advantages(rewards, 4, scale_by_std=False, leave_one_out=True)
    assert adv.tolist() == pytest.approx([1 / 3, -1.0, 1 / 3, 1 / 3, -1 / 3, -1 / 3, -1 / 3, 1.0], abs=1e-12)


def test_leave_one_out_non_binary_hand_table():
    rewards = torch.tensor([0.9, 0.2, 0.5], dtype=torch.float64)
    adv = group_advantages(rewards, 3, scale_by_std=False, leave_one_out=True)
    # 0.9 - (0.2 + 0.5) / 2 = 0.55; 0.2 - (0.9 + 0.5) / 2 = -0.5; 0.5 - (0.9 + 0.2) / 2 = -0.05
    assert adv.tolist() == pytest.approx([0.55, -0.5, -0.05], abs=1e-12)
    # With std scaling the same numbers are divided by the group's sample std (0.351188..., eps 0).
    scaled = group_advantages(rewards, 3, std_ddof=1, epsilon=0.0, leave_one_out=True)
    std = torch.tensor([0.9, 0.2, 0.5], dtype=torch.float64).std().item()
    assert std == pytest.approx(0.3511884584, abs=1e-9)
    assert scaled.tolist() == pytest.approx([0.55 / std, -0.5 / std, -0.05 / std], abs=1e-9)


def test_leave_one_out_skips_unscored_and_lone_samples():
    nan = float("nan")
    # Group 1: 3 scored (1, 0, 1) + one NaN: 1 - 1/2 = 0.5, 0 - 1 = -1, NaN -> 0.
    # Group 2: a single scored sample has no sibling -> 0 (and the NaNs 0).
    rewards = torch.tensor([1, nan, 0, 1, nan, 0.7, nan, nan], dtype=torch.float64)
    adv = group_advantages(rewards, 4, scale_by_std=False, leave_one_out=True)
    assert adv.tolist() == pytest.approx([0.5, 0.0, -1.0, 0.5, 0.0, 0.0, 0.0, 0.0], abs=1e-12)
    assert not torch.isnan(adv).any()


def test_leave_one_out_all_equal_group_is_zero_and_lone_group_is_an_error():
    assert torch.equal(group_advantages(torch.ones(4), 4, leave_one_out=True), torch.zeros(4))
    with pytest.raises(ValueError, match="leave_one_out needs at least 2 completions"):
        group_advantages(torch.ones(4), 1, leave_one_out=True)
