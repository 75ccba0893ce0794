"""Batch suggestions are whole numbers >= 1 that satisfy every batch rule at once (property tests, world sizes 1-64),
and context fixes never name a negative or zero length."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from drgrpo.planning import format_report, plan_recipe
from drgrpo.planning.batch import batch_plan
from drgrpo.recipe.batch_rules import (
    ScheduleChoice,
    batch_rules_hold,
    choice_for_schedule,
    context_fix,
    keep_schedule_fix,
    nearest_per_device,
    nearest_schedules,
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


@settings(max_examples=200, deadline=None)
@given(per_devices, accumulations, generations, round_keys)
def test_rules_accept_exactly_what_trl_starts_with(tmp_path_factory, per_device, accumulation, num_generations, keys):
    """At this process's world size (1) the planner's rules are TRL's own: no schedule TRL runs is refused. (TRL
    shuffles a rollout before cutting it into steps_per_generation micro-batches, `GRPOTrainer._prepare_inputs`, so a
    group spanning two optimizer steps is TRL's design when steps_per_generation > gradient_accumulation_steps, not
    an error.)"""
    import warnings

    from trl import GRPOConfig

    steps, generation_batch = keys
    kwargs = {"steps_per_generation": steps, "generation_batch_size": generation_batch}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            GRPOConfig(
                output_dir=str(tmp_path_factory.getbasetemp()),
                use_cpu=True,
                report_to="none",
                per_device_train_batch_size=per_device,
                gradient_accumulation_steps=accumulation,
                num_generations=num_generations,
                num_generations_eval=2,
                per_device_eval_batch_size=2,
                **kwargs,
            )
        trl_starts = True
    except ValueError:
        trl_starts = False
    assert batch_rules_hold(1, per_device, accumulation, num_generations, **kwargs) == trl_starts


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


step_totals = st.integers(1, 2048)
steps_per_rollout = st.sampled_from([1, 2, 4, 8])  # rollout = step x this (optimizer steps per rollout)


@settings(max_examples=200, deadline=None)
@given(worlds, step_totals, steps_per_rollout, generations, per_devices)
def test_a_kept_schedule_is_whole_numbers_that_fit_or_provably_none(world, step, per_rollout, groups, limit):
    rollout = step * per_rollout
    choice = choice_for_schedule(world, step, rollout, groups, limit)
    if choice is not None:
        assert all(isinstance(v, int) and v >= 1 for v in choice)
        local = choice.per_device_train_batch_size * world
        assert (local * choice.gradient_accumulation_steps, local * choice.steps_per_generation) == (step, rollout)
        assert batch_rules_hold(world, *choice[:2], groups, steps_per_generation=choice.steps_per_generation)
        if choice.per_device_train_batch_size <= limit:  # the largest per-device batch within the limit
            for larger in range(choice.per_device_train_batch_size + 1, limit + 1):
                if step % (world * larger) == 0 and rollout % (world * larger) == 0:
                    other = (larger, step // (world * larger))
                    spg = rollout // (world * larger)
                    assert not batch_rules_hold(world, *other, groups, steps_per_generation=spg)
    else:  # brute force: no whole split of both totals satisfies the rules
        for per_device in range(1, step + 1):
            if step % (world * per_device) == 0 and rollout % (world * per_device) == 0:
                split = (per_device, step // (world * per_device))
                spg = rollout // (world * per_device)
                assert not batch_rules_hold(world, *split, groups, steps_per_generation=spg)


@settings(max_examples=150, deadline=None)
@given(worlds, step_totals, steps_per_rollout, generations, per_devices)
def test_nearest_schedules_bracket_the_target_keep_the_ratio_and_fit(world, step, per_rollout, groups, limit):
    below, above = nearest_schedules(world, step, step * per_rollout, groups, limit)
    assert above is not None  # lcm(world, G) per step, one completion per device per micro-step, always fits
    for found, side in ((below, -1), (above, 1)):
        if found is None:
            continue
        new_step, new_rollout, choice = found
        assert (new_step - step) * side > 0 and new_rollout == new_step * per_rollout
        assert choice.completions_per_step(world) == new_step
        assert batch_rules_hold(world, *choice[:2], groups, steps_per_generation=choice.steps_per_generation)


def test_nearest_schedules_example():
    # 128 per step, 1024 per rollout on 3 processes: multiples of lcm(3, 8) = 24 -> 120 or 144 per step.
    below, above = nearest_schedules(3, 128, 1024, 8, 16)
    assert below == (120, 960, ScheduleChoice(10, 4, 32)) and above == (144, 1152, ScheduleChoice(16, 3, 24))


def test_generation_batch_size_stays_when_the_schedule_is_kept():
    # generation_batch_size 1024 fixes the rollout at any world size; only the step is split, no steps_per_generation.
    assert choice_for_schedule(16, 128, 1024, 8, 16, generation_batch_size=1024) == ScheduleChoice(8, 1, None)
    fix = keep_schedule_fix(16, 128, 1024, 16, num_generations=8, generation_batch_size=1024)
    assert fix.endswith("--per_device_train_batch_size 8 --gradient_accumulation_steps 1.")


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
def _applied(flags: str, per_device: int, accumulation: int, steps: int | None) -> tuple[int, int, int | None]:
    """(per_device, accumulation, steps_per_generation) after the `--key value` flags of one suggestion."""
    keys = "per_device_train_batch_size|gradient_accumulation_steps|steps_per_generation"
    values = {key: int(value) for key, value in re.findall(rf"--({keys}) (\d+)", flags)}
    return (
        values.get("per_device_train_batch_size", per_device),
        values.get("gradient_accumulation_steps", accumulation),
        values.get("steps_per_generation", steps),
    )


@settings(max_examples=300, deadline=None)
@given(worlds, worlds, per_devices, accumulations, st.integers(1, 16), generations)
def test_world_size_fix_is_whole_flags_that_satisfy_every_rule(
    world, header_world, per_device, accumulation, steps, groups
):
    step, rollout = per_device * header_world * accumulation, per_device * header_world * steps
    assume(world != header_world)  # the planner gives this fix only when the world size changes
    fix = keep_schedule_fix(per_device, step, rollout, world, num_generations=groups)
    assert "/" not in fix and not re.search(r"(?<![\w-])-\d", fix)  # no fraction, no negative number
    if fix.startswith("keep the recipe's schedule with"):
        suggestions = [(step, rollout, fix)]
    else:
        assert "cannot be kept" in fix
        suggestions = [
            (int(s), int(r), f) for s, r, f in re.findall(r"(\d+) per step and (\d+) per rollout \(([^)]*)\)", fix)
        ]
        assert suggestions, fix
    for new_step, new_rollout, flags in suggestions:
        new = _applied(flags, per_device, accumulation, None)
        assert new[2] is not None and min(new) >= 1
        assert (new[0] * world * new[1], new[0] * world * new[2]) == (new_step, new_rollout)
        assert new_rollout * step == new_step * rollout  # the same optimizer steps per rollout
        plan, findings = batch_plan(world, new[0], new[1], groups, steps_per_generation=new[2])
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


def test_three_processes_cannot_keep_the_schedule_and_say_so():
    report = plan_recipe(ROOT / "recipes/qwen3_8b_drgrpo.yaml", num_processes=3)
    (warning,) = [f for f in report.findings if f.key == "world size"]
    assert warning.fix == (
        "the recipe's schedule (128 completions per optimizer step, 1024 per rollout) cannot be kept at 3 processes "
        "(128 is not a multiple of 3 processes); the nearest that fit, with the same optimizer steps per rollout: "
        "120 per step and 960 per rollout (--per_device_train_batch_size 10 --gradient_accumulation_steps 4 "
        "--steps_per_generation 32) or 144 per step and 1152 per rollout (--gradient_accumulation_steps 3 "
        "--steps_per_generation 24)."
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
    # The script's one-line error: tests/test_errors.py::test_plan_rejects_zero_processes_in_one_line.


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
