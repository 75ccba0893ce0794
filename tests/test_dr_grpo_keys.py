"""`dr_grpo: true` means the paper's objective whatever else is set (issue 42): every TRL key is classified, a key
whose value changes the on-policy objective is refused in one line unless `dr_grpo_allow` keeps it, the card names
the keys that act off the first update, and a half-switched recipe is labelled as such."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
import transformers
import trl
import yaml
from conftest import ROOT

from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.dr_grpo_keys import ALLOWED, CARD, DR_GRPO_KEYS, OPTED_IN, REFUSED, SET, allowable_keys
from drgrpo.algorithm.family import family_card
from drgrpo.recipe.preflight import explain_recipe

WHERE = "DR_GRPO_KEYS in drgrpo/algorithm/dr_grpo_keys.py"

# A value of each key refused at some value that changes the first update's gradient (and so is refused).
REFUSING_VALUES = {
    "top_entropy_quantile": 0.2,
    "entropy_coef": 0.01,
    "use_adaptive_entropy": True,
    "mask_truncated_completions": True,
    "router_aux_loss_coef": 0.01,
    "epsilon": -0.1,
    "epsilon_high": -0.1,
    "delta": 0.5,
    "off_policy_mask_threshold": -0.1,
}
# Values of the same keys that leave the on-policy objective alone: TRL's default, and others where there are.
HARMLESS_VALUES = [
    ("top_entropy_quantile", 1.0),
    ("entropy_coef", 0.0),
    ("entropy_coef", 0),
    ("use_adaptive_entropy", False),
    ("mask_truncated_completions", False),
    ("router_aux_loss_coef", None),
    ("router_aux_loss_coef", 0.0),
    ("epsilon", 0.2),
    ("epsilon", 0.0),
    ("epsilon_high", 0.28),
    ("delta", None),
    ("delta", 1.5),
    ("off_policy_mask_threshold", None),
    ("off_policy_mask_threshold", 0.5),
]
# A value of each card key that the family card must show, with the settings under which the key acts.
CARD_VALUES = {
    "epsilon": (0.1, {}),
    "epsilon_high": (0.28, {}),
    "delta": (1.5, {}),
    "importance_sampling_level": ("sequence", {}),
    "off_policy_mask_threshold": (0.5, {}),
    "num_iterations": (2, {}),
    "steps_per_generation": (2, {}),
    "generation_batch_size": (16, {}),
    "use_vllm": (True, {}),
    # the CPU engine (a use_cpu run without vLLM) feeds the importance-sampling correction, on by default
    "vllm_importance_sampling_correction": (False, {}),
    "vllm_importance_sampling_mode": ("token_truncate", {}),
    "vllm_importance_sampling_clip_max": (2.0, {}),
    "vllm_importance_sampling_clip_min": (0.5, {}),
    "vllm_importance_sampling_cap": (2.0, {}),
    "top_p": (0.9, {}),
    "top_k": (5, {}),
    "min_p": (0.1, {}),
    "repetition_penalty": (1.1, {}),
    "generation_kwargs": ({"top_k": 5}, {}),
    "vllm_structured_outputs_regex": (r"\d+", {}),
}


def make(**kwargs) -> DrGRPOConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # vllm_importance_sampling_cap is deprecated in TRL
        return DrGRPOConfig(**{"output_dir": "/tmp/drgrpo-test", "use_cpu": True, "bf16": False, **kwargs})


def trl_keys() -> set[str]:
    """TRL's own GRPOConfig keys, read from the installed TRL: a key a new TRL adds shows up here."""
    inherited = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    return {f.name for f in dataclasses.fields(trl.GRPOConfig)} - inherited


# ----------------------------------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------------------------------
def test_every_trl_key_is_classified_once():
    keys = trl_keys()
    assert len(keys) > 50  # TRL's keys were found at all
    unclassified = sorted(keys - set(DR_GRPO_KEYS))
    assert not unclassified, (
        f"TRL GRPOConfig keys that dr_grpo: true does not classify: {unclassified}. Add each to {WHERE}: "
        f"{REFUSED!r} (a value changes the first update's gradient: refused unless dr_grpo_allow names it), "
        f"{CARD!r} (acts only off the first update or through the sampler: named on the family card), "
        f"{ALLOWED!r} (no effect on the on-policy objective) or {SET!r}; then docs/grpo-family.md's table."
    )
    stale = sorted(set(DR_GRPO_KEYS) - keys)
    assert not stale, f"{WHERE} classifies keys TRL's GRPOConfig no longer has: {stale}. Remove them."
    assert {rule.kind for rule in DR_GRPO_KEYS.values()} == {SET, REFUSED, CARD, ALLOWED}
    assert all(rule.why for rule in DR_GRPO_KEYS.values())


def test_every_refusable_key_has_an_example_and_trls_default_passes():
    assert set(REFUSING_VALUES) == set(allowable_keys()), "add a refusing value for each new refused key above"
    defaults = {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}
    for key in allowable_keys():
        make(dr_grpo=True, **{key: defaults[key]})  # TRL's default never changes the objective


# ----------------------------------------------------------------------------------------------------------------------
# Refused by value, with the opt-in
# ----------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(REFUSING_VALUES))
def test_a_key_that_changes_the_objective_is_refused_in_one_line(key):
    value = REFUSING_VALUES[key]
    with pytest.raises(ValueError) as info:
        make(dr_grpo=True, **{key: value})
    message = str(info.value)
    assert "\n" not in message
    assert f"{key}={value!r}" in message and f"dr_grpo_allow: [{key}]" in message
    make(**{key: value})  # without the switch nothing is refused


@pytest.mark.parametrize(("key", "value"), HARMLESS_VALUES, ids=lambda v: repr(v))
def test_values_that_leave_the_objective_alone_pass(key, value):
    config = make(dr_grpo=True, **{key: value})
    assert "opted in" not in family_card(config) and config.algorithm_summary.startswith("algorithm: Dr.GRPO (")


@pytest.mark.parametrize("value", [0.0, 0, -0.1])
def test_an_off_policy_mask_at_or_below_zero_is_refused_in_one_line(value):
    """Issue 53: at 0 the mask is not off: the sampler's and the learner's log-probs differ by rounding, so the mean
    KL of about half the completions is above 0 and TRL drops those with a negative advantage at the first update."""
    with pytest.raises(ValueError) as info:
        make(dr_grpo=True, off_policy_mask_threshold=value)
    message = str(info.value)
    assert "\n" not in message
    assert f"off_policy_mask_threshold={value!r}" in message and "at or below 0" in message
    assert "off_policy_mask_threshold: None" in message and "dr_grpo_allow: [off_policy_mask_threshold]" in message
    make(dr_grpo=True, off_policy_mask_threshold=value, dr_grpo_allow=["off_policy_mask_threshold"])


def test_trls_off_policy_mask_at_zero_drops_completions_on_rounding_alone():
    """Why 0 is refused, on TRL's own mask: log-probs equal up to float32 rounding (1e-7) drop a negative-advantage
    completion at threshold 0, and none at a positive threshold."""
    generator = torch.Generator().manual_seed(0)
    learner = -torch.rand(8, 6, generator=generator) * 3
    sampler = learner + (torch.rand(8, 6, generator=generator) - 0.5) * 2e-7  # rounding, not a policy change
    advantages = -torch.ones(8, 1)
    mask = torch.ones(8, 6)
    kept_at_zero = trl.GRPOTrainer.get_off_policy_mask(advantages, learner, sampler, mask, 0.0)
    assert 0 < kept_at_zero.sum() < 8
    assert trl.GRPOTrainer.get_off_policy_mask(advantages, learner, sampler, mask, 1e-3).sum() == 8


def test_every_refused_key_is_named_in_the_one_line():
    with pytest.raises(ValueError) as info:
        make(dr_grpo=True, entropy_coef=0.01, top_entropy_quantile=0.2, dr_grpo_allow=["top_entropy_quantile"])
    message = str(info.value)
    assert "entropy_coef=0.01" in message and "top_entropy_quantile=0.2" not in message
    assert "dr_grpo_allow: [entropy_coef]" in message


def test_an_opted_in_key_passes_and_the_card_stops_claiming_plain_dr_grpo():
    config = make(dr_grpo=True, entropy_coef=0.01, dr_grpo_allow=["entropy_coef"])
    name = f"Dr.GRPO + entropy_coef=0.01 ({OPTED_IN})"
    assert family_card(config).splitlines()[0] == f"GRPO family card: {name}"
    assert config.algorithm_summary.startswith(f"algorithm: {name} (scale_rewards=none")
    # Listed but left at its default: nothing to name.
    assert (
        family_card(make(dr_grpo=True, dr_grpo_allow=["entropy_coef"])).splitlines()[0] == "GRPO family card: Dr.GRPO"
    )
    both = make(
        dr_grpo=True, advantage_estimator="leave_one_out", mask_truncated_completions=True, top_entropy_quantile=0.2,
        dr_grpo_allow=["mask_truncated_completions", "top_entropy_quantile"],
    )  # fmt: skip
    assert family_card(both).splitlines()[0] == (
        "GRPO family card: Dr.GRPO + leave-one-out + top_entropy_quantile=0.2, mask_truncated_completions=True "
        f"({OPTED_IN})"
    )


def test_dr_grpo_allow_takes_only_keys_that_can_be_refused():
    with pytest.raises(ValueError, match=r"dr_grpo_allow names \['temperature'\], which dr_grpo never refuses"):
        make(dr_grpo=True, dr_grpo_allow=["temperature"])
    with pytest.raises(ValueError, match="entropy_cef"):
        make(dr_grpo_allow=["entropy_cef"])  # a typo, with or without the switch


@pytest.mark.parametrize("dr_grpo", [False, True])
def test_two_rules_for_a_truncated_completion_are_refused_under_any_algorithm(dr_grpo):
    allow = {"dr_grpo_allow": ["mask_truncated_completions"]} if dr_grpo else {}
    with pytest.raises(ValueError) as info:
        make(dr_grpo=dr_grpo, mask_truncated_completions=True, zero_reward_for_truncated=True, **allow)
    message = str(info.value)
    assert "\n" not in message and "two rules for one case" in message and "Pick one" in message


# ----------------------------------------------------------------------------------------------------------------------
# The card
# ----------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(key for key, rule in DR_GRPO_KEYS.items() if rule.kind == CARD))
def test_a_card_key_is_allowed_and_named_on_the_card(key):
    assert key in CARD_VALUES, f"give {key} a value the card must show in CARD_VALUES above"
    value, context = CARD_VALUES[key]
    base = family_card(make(dr_grpo=True, **context))
    card = family_card(make(dr_grpo=True, **context, **{key: value}))
    assert card != base, f"{key}={value!r} is not on the family card ({WHERE} says it is)"
    assert card.splitlines()[0] == "GRPO family card: Dr.GRPO"


def test_a_half_switched_recipe_says_which_half():
    config = make(loss_type="dr_grpo")
    half = "GRPO with loss_type dr_grpo (half of Dr.GRPO: add dr_grpo: true)"
    assert family_card(config).splitlines()[0] == f"GRPO family card: {half}"
    assert config.algorithm_summary.startswith(f"algorithm: {half} (scale_rewards=group, loss_type=dr_grpo")
    full = make(loss_type="dr_grpo", scale_rewards="none")  # all three settings, without the switch's checks
    assert "three settings" in family_card(full).splitlines()[0]
    assert family_card(make()).splitlines()[0] == "GRPO family card: GRPO"


def test_the_code_recipe_keeps_masking_truncated_programs_knowingly():
    recipe = ROOT / "recipes" / "qwen2.5_coder_7b_drgrpo_code.yaml"
    values = yaml.safe_load(recipe.read_text())
    assert values["dr_grpo"] and values["dr_grpo_allow"] == ["mask_truncated_completions"]
    # The reason is in the recipe, next to the opt-in (every shipped recipe parses: tests/test_recipes.py).
    assert "not the paper's objective" in recipe.read_text().split("dr_grpo_allow:")[0].splitlines()[-1]
    text = explain_recipe([str(recipe), "--explain"])
    assert f"GRPO family card: Dr.GRPO + mask_truncated_completions=True ({OPTED_IN})" in text
