"""The planner shows the extra generation dynamic sampling implies, and the reference model a KL in the reward loads."""

from __future__ import annotations

from conftest import ROOT

from drgrpo.planning import format_report, plan_recipe
from drgrpo.planning.batch import batch_plan
from drgrpo.planning.family_cost import dynamic_sampling_lines, dynamic_sampling_plan

RECIPE = ROOT / "recipes/qwen2.5_math_1.5b_drgrpo_from_verl.yaml"


def test_rounds_needed_by_hand():
    batch, findings = batch_plan(8, 16, 8, 8)
    assert not findings
    plan = dynamic_sampling_plan(batch, max_rounds=4)
    assert (plan.prompts_per_round, plan.completions_per_round) == (128, 1024)
    # Each round keeps (1 - share) of its groups: 0% -> 1, 50% -> 2, 60% -> ceil(2.5) = 3, 80% -> 5 capped at 4.
    assert [plan.rounds_needed(s) for s in (0.0, 0.5, 0.6, 0.8, 1.0)] == [1, 2, 3, 4, 4]
    lines = dynamic_sampling_lines(plan)
    assert "one round: 128 prompts x 8 = 1024 completions generated; the trained batch stays 1024" in lines[1]
    assert "at most 4 rounds = 4096 completions generated per rollout (4x" in lines[3]


def test_planner_says_when_the_rounds_cannot_fill_the_batch_and_what_happens_then():
    """`make plan` with dynamic sampling: at 90% all-equal groups 10 rounds are needed, 4 allowed; the plan says so,
    how much of the batch the 4 rounds fill, and that the rest is padded (it used to say "90% -> 4 round(s)")."""
    text = format_report(plan_recipe(RECIPE, overrides=["--dynamic_sampling", "true"]))
    assert "90% -> 4 round(s) (10 needed to fill the batch)" in text and "75% -> 4 round(s)," in text
    assert (
        "at 90% all-equal groups, 4 rounds (dynamic_sampling_max_rounds) fill only 40% of the batch with groups "
        "that carry signal: the rest is padded with all-equal groups (advantage 0: no policy signal), or the run "
        "stops, with dynamic_sampling_exhausted: raise (dynamic_sampling_max_rounds 10 fills it)"
    ) in text
    assert "at 75% all-equal" not in text  # 4 rounds fill it at 75%
    batch, _ = batch_plan(8, 16, 8, 8)
    stops = dynamic_sampling_lines(dynamic_sampling_plan(batch, max_rounds=2, exhausted="raise"))
    assert any("fill only 50% of the batch" in line and "the run stops with an error" in line for line in stops)
    pads = dynamic_sampling_lines(dynamic_sampling_plan(batch, max_rounds=2, exhausted="pad"))
    assert any("or the run stops, with dynamic_sampling_exhausted: raise" in line for line in pads)


def test_plan_report_shows_dynamic_sampling_and_the_reference_model():
    plain = plan_recipe(RECIPE)
    assert plain.dynamic_sampling is None and "Dynamic sampling" not in format_report(plain)
    report = plan_recipe(
        RECIPE,
        overrides=["--dynamic_sampling", "true", "--dynamic_sampling_max_rounds", "3", "--kl_in_reward_coef", "0.01"],
    )
    assert report.ok and report.dynamic_sampling.max_rounds == 3
    text = format_report(report)
    assert "at most 3 rounds = 3072 completions generated per rollout" in text
    assert [f.key for f in report.findings if f.level == "warning"].count("kl_in_reward_coef") == 1
