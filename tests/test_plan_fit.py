"""Batch suggestions are whole numbers >= 1 that satisfy every batch rule at once (property tests, world sizes 1-64),
and context fixes never name a negative or zero length."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from drgrpo.planning import format_report, plan_recipe
from drgrpo.planning.batch import batch_plan
from drgrpo.planning.fit import (
    BatchChoice,
    batch_rules_hold,
    choice_for_total,
    context_fix,
    keep_batch_fix,
    nearest_per_device,
    nearest_totals,
)

worlds = st.integers(1, 64)
per_devices = st.integers(1, 32)
accumulations = st.integers(1, 16)
generations = st.integers(2, 24)
# (steps_per_generation, generation_batch_size): neither, one or the other (both set is its own rule, tested below)
round_keys = st.one_of(
    st.just((None, None)),
    st.tuples(st.integers(1, 16), st.none()),
    st.tuples(st.none(), st.integers(1, 512)),
)


@settings(max_examples=300, deadline=None)
@given(worlds, per_devices, accumulations, generations, round_keys)
def test_rules_agree_with_the_planner_findings(world, per_device, accumulation, num_generations, keys):
    steps, generation_batch = keys
    plan, findings = batch_plan(
        world,
        per_device,
        accumulation,
        num_generations,
        steps_per_generation=steps,
        generation_batch_size=generation_batch,
    )
    planner_ok = plan is not None and not [f for f in findings if f.level == "error"]
    kwargs = {"steps_per_generation": steps, "generation_batch_size": generation_batch}
    holds = batch_rules_hold(world, per_device, accumulation, num_generations, **kwargs)
    assert holds == planner_ok


def test_both_round_keys_set_never_holds():
    assert not batch_rules_hold(1, 8, 1, 2, steps_per_generation=1, generation_batch_size=8)


@settings(max_examples=200, deadline=None)
@given(worlds, per_devices, accumulations, generations, round_keys)
def test_nearest_per_device_values_fit_and_nothing_nearer_does(world, per_device, accumulation, num_generations, keys):
    steps, generation_batch = keys
    kwargs = {"steps_per_generation": steps, "generation_batch_size": generation_batch}
    below, above = nearest_per_device(world, per_device, accumulation, num_generations, **kwargs)
    for value in (below, above):
        if value is not None:
            assert isinstance(value, int) and value >= 1
            assert batch_rules_hold(world, value, accumulation, num_generations, **kwargs)
    low = below if below is not None else 0
    high = above if above is not None else per_device + 1
    for between in range(low + 1, high):
        if between != per_device:
            assert not batch_rules_hold(world, between, accumulation, num_generations, **kwargs)


@settings(max_examples=200, deadline=None)
@given(worlds, st.integers(1, 2048), generations, per_devices, st.sampled_from([None, 1, 2, 4]))
def test_a_kept_batch_is_whole_numbers_that_fit_or_provably_none(world, total, num_generations, limit, steps):
    choice = choice_for_total(world, total, num_generations, limit, steps_per_generation=steps)
    if choice is not None:
        assert all(isinstance(v, int) and v >= 1 for v in choice)
        assert choice.completions_per_step(world) == total
        assert batch_rules_hold(world, *choice, num_generations, steps_per_generation=steps)
        # the largest per-device batch within the limit, when one within the limit exists
        if choice.per_device_train_batch_size <= limit:
            for larger in range(choice.per_device_train_batch_size + 1, limit + 1):
                if total % (world * larger) == 0:
                    other = BatchChoice(larger, total // (world * larger))
                    assert not batch_rules_hold(world, *other, num_generations, steps_per_generation=steps)
    else:  # brute force: no split of `total` into whole numbers satisfies the rules
        for per_device in range(1, total + 1):
            if total % (world * per_device) == 0:
                split = BatchChoice(per_device, total // (world * per_device))
                assert not batch_rules_hold(world, *split, num_generations, steps_per_generation=steps)


@settings(max_examples=150, deadline=None)
@given(worlds, st.integers(1, 2048), generations, per_devices)
def test_nearest_totals_bracket_the_target_and_fit(world, total, num_generations, limit):
    below, above = nearest_totals(world, total, num_generations, limit)
    assert above is not None  # some larger batch always fits: lcm(world, G) completions, one per device per group
    if below is not None:
        assert below[0] < total and below[1].completions_per_step(world) == below[0]
        assert batch_rules_hold(world, *below[1], num_generations)
    assert above[0] > total and above[1].completions_per_step(world) == above[0]
    assert batch_rules_hold(world, *above[1], num_generations)


def test_nearest_totals_example():
    # 1024 completions (128 prompts x 8) on 3 processes: not a multiple of 3; lcm(3, 8) = 24 -> 1008 or 1032.
    below, above = nearest_totals(3, 1024, 8, 16)
    assert below == (1008, BatchChoice(16, 21)) and above == (1032, BatchChoice(8, 43))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10_000), st.integers(1, 10_000), st.integers(1, 40_960))
def test_context_fix_names_only_lengths_that_fit(prompt, completion, limit):
    fix = context_fix(prompt, completion, limit)
    assert "-" not in fix.replace("max_", "")  # no negative number
    for key, value in re.findall(r"(max_completion_length|max_prompt_tokens) to (\d+)", fix):
        value = int(value)
        assert value >= 1
        other = prompt if key == "max_completion_length" else completion
        assert value + other == limit


def test_context_fix_for_the_issue_example():
    """max_completion_length 8000 > Qwen2.5-Math's 4096: the prompt cannot make room, so it is not offered."""
    fix = context_fix(1024, 8000, 4096)
    assert fix.startswith("lower max_completion_length to 3072") and "-3904" not in fix
    assert "lower max_prompt_tokens" not in fix
    assert "e.g. max_prompt_tokens 1024 and max_completion_length 3072" in context_fix(5000, 5000, 4096)


# ----------------------------------------------------------------------------------------------------------------------
# The planner's own fixes, read back from their text and applied
# ----------------------------------------------------------------------------------------------------------------------
def _applied(flags: str, per_device: int, accumulation: int) -> tuple[int, int]:
    """(per_device, accumulation) after the `--key value` flags of one suggestion."""
    values = dict(re.findall(r"--(per_device_train_batch_size|gradient_accumulation_steps) (\d+)", flags))
    return int(values.get("per_device_train_batch_size", per_device)), int(
        values.get("gradient_accumulation_steps", accumulation)
    )


@settings(max_examples=300, deadline=None)
@given(worlds, worlds, per_devices, accumulations, generations)
def test_world_size_fix_is_whole_flags_that_satisfy_every_rule(world, header_world, per_device, accumulation, groups):
    written = per_device * header_world * accumulation
    assume(written != per_device * world * accumulation)  # the planner gives this fix only when the batch changes
    fix = keep_batch_fix(world, per_device, accumulation, groups, written)
    assert "/" not in fix and not re.search(r"(?<![\w-])-\d", fix)  # no fraction, no negative number
    suggestions = re.findall(r"(?:(\d+) \()?`([^`]+)`", fix)
    if fix.startswith("keep the recipe's"):
        ((_, flags),) = suggestions
        new = _applied(flags, per_device, accumulation)
        assert new[0] * world * new[1] == written
    else:
        assert "cannot be kept" in fix
        for total, flags in suggestions:
            new = _applied(flags, per_device, accumulation)
            assert new[0] * world * new[1] == int(total)
    for _, flags in suggestions:
        new = _applied(flags, per_device, accumulation)
        assert min(new) >= 1
        plan, findings = batch_plan(world, *new, groups)
        assert plan is not None and not [f for f in findings if f.level == "error"], (fix, findings)


@settings(max_examples=300, deadline=None)
@given(worlds, per_devices, accumulations, generations, round_keys)
def test_batch_error_fixes_name_values_that_satisfy_every_rule(world, per_device, accumulation, groups, keys):
    steps, generation_batch = keys
    kwargs = {"steps_per_generation": steps, "generation_batch_size": generation_batch}
    _, findings = batch_plan(world, per_device, accumulation, groups, **kwargs)
    for finding in findings:
        fix = finding.fix
        assert "/" not in fix and not re.search(r"(?<![\w-])-\d", fix)
        if "generation_batch_size to" in fix:  # one combined change of both keys
            new_per_device = re.search(r"per_device_train_batch_size to (\d+)", fix)
            value = int(new_per_device.group(1)) if new_per_device else per_device
            new_generation_batch = int(re.search(r"generation_batch_size to (\d+)", fix).group(1))
            assert batch_rules_hold(world, value, accumulation, groups, generation_batch_size=new_generation_batch), fix
        elif finding.key == "per_device_train_batch_size":  # alternatives for the per-device batch alone
            listed = fix.split("the nearest:")[-1] if "the nearest:" in fix else fix.split(" to ")[1].split("(")[0]
            values = [int(v) for v in re.findall(r"\d+", listed)]
            assert values, fix
            for value in values:
                assert batch_rules_hold(world, value, accumulation, groups, **kwargs), fix


def test_three_processes_cannot_keep_1024_completions_and_say_so(tmp_path):
    report = plan_recipe(ROOT / "recipes/qwen3_8b_drgrpo.yaml", num_processes=3)
    (warning,) = [f for f in report.findings if f.key == "world size"]
    assert warning.fix == (
        "1024 completions per optimizer step cannot be kept at 3 processes (1024 is not a multiple of 3 processes); "
        "the nearest that fit: 1008 (`--gradient_accumulation_steps 21`) or 1032 (`--per_device_train_batch_size 8 "
        "--gradient_accumulation_steps 43`)."
    )
    assert "(world size from --num_processes, the rest from the recipe header)" in format_report(report)


def test_context_fix_of_an_8000_token_budget_on_a_4096_model():
    report = plan_recipe(ROOT / "recipes/qwen2.5_math_1.5b_drgrpo.yaml", overrides=["--max_completion_length", "8000"])
    fixes = [f.fix for f in report.errors if f.key == "max_completion_length"]
    assert fixes and all("-3904" not in fix and "max_prompt_tokens to" not in fix for fix in fixes)
    assert fixes[0].startswith("lower max_completion_length to 3072")


def test_num_processes_below_one_is_refused():
    with pytest.raises(ValueError, match="--num_processes must be 1 or more .*got 0"):
        plan_recipe(ROOT / "recipes/qwen3_8b_drgrpo.yaml", num_processes=0)
    result = subprocess.run(
        [sys.executable, "scripts/plan.py", "recipes/qwen3_8b_drgrpo.yaml", "--num_processes", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith("--num_processes must be 1 or more (training processes), got 0.")
    )


@pytest.mark.parametrize(
    ("kwargs", "source"),
    [
        ({}, "recipe header"),
        ({"num_processes": 16}, "world size from --num_processes, the rest from the recipe header"),
        (
            {"accelerate_config": "accelerate_configs/zero3.yaml"},
            "accelerate config accelerate_configs/zero3.yaml",
        ),
        (
            {"accelerate_config": "accelerate_configs/zero3.yaml", "num_processes": 4},
            "world size from --num_processes, the rest from accelerate config accelerate_configs/zero3.yaml",
        ),
    ],
)
def test_the_report_says_where_the_world_size_came_from(kwargs, source, monkeypatch):
    monkeypatch.chdir(ROOT)
    report = plan_recipe("recipes/qwen3_8b_drgrpo.yaml", **kwargs)
    assert report.setup.source == source
    assert f"({source})" in format_report(report).splitlines()[0]
