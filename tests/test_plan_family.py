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
