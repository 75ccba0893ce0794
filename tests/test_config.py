"""The dr_grpo switch, its conflicts, and the recipe parser's errors."""

import pytest
import torch

from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.recipe.cli import parse_recipe


def make(**kwargs) -> DrGRPOConfig:
    return DrGRPOConfig(**{"output_dir": "/tmp/drgrpo-test", "use_cpu": True, "bf16": False, **kwargs})


def test_dr_grpo_resolves_three_settings():
    config = make(dr_grpo=True, max_completion_length=1024)
    assert (config.scale_rewards, config.loss_type, config.beta) == ("none", "dr_grpo", 0.0)
    assert config.algorithm_summary == (
        "algorithm: Dr.GRPO (scale_rewards=none, loss_type=dr_grpo, beta=0.0, loss constant=1024)"
    )


def test_off_keeps_trl_defaults():
    config = make()
    assert (config.scale_rewards, config.loss_type, config.beta) == ("group", "dapo", 0.0)
    assert config.algorithm_summary.startswith("algorithm: GRPO (scale_rewards=group, loss_type=dapo")


def test_consistent_explicit_values_are_accepted():
    config = make(dr_grpo=True, scale_rewards="none", loss_type="dr_grpo", beta=0.0)
    assert config.loss_type == "dr_grpo"


@pytest.mark.parametrize(
    "key,value",
    [
        ("beta", 0.04),
        ("scale_rewards", "group"),
        ("scale_rewards", "batch"),
        ("loss_type", "dapo"),
        ("loss_type", "grpo"),
    ],
)
def test_contradiction_names_key_value_and_switch(key, value):
    with pytest.raises(ValueError) as info:
        make(dr_grpo=True, **{key: value})
    message = str(info.value)
    assert f"{key}={value!r}" in message and "dr_grpo=true" in message


def test_scale_rewards_booleans_follow_trl_aliases():
    assert make(scale_rewards=False).scale_rewards == "none"
    assert make(scale_rewards="true").scale_rewards == "group"
    with pytest.raises(ValueError, match="scale_rewards='group'"):
        make(dr_grpo=True, scale_rewards=True)


def test_normalize_then_sum_is_an_error_with_dr_grpo():
    with pytest.raises(ValueError, match="normalize_then_sum"):
        make(dr_grpo=True, multi_objective_aggregation="normalize_then_sum")


@pytest.mark.parametrize("g", [1, 0])
def test_num_generations_below_two_explains_why(g):
    with pytest.raises(ValueError, match="no baseline"):
        make(num_generations=g, per_device_train_batch_size=8)


def test_std_convention_fields():
    config = make(advantage_std_ddof=0, advantage_epsilon=1e-8)
    assert "std ddof=0, eps=1e-08" in config.algorithm_summary
    with pytest.raises(ValueError, match="advantage_std_ddof"):
        make(advantage_std_ddof=2)


def test_recipe_yaml_and_command_line_override(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "model_name_or_path: m\ndataset_path: d.jsonl\ndr_grpo: true\nuse_cpu: true\nbf16: false\n"
        f"output_dir: {tmp_path}\nlearning_rate: 1.0e-6\n"
    )
    script, training, model = parse_recipe([str(recipe), "--learning_rate", "5e-7"])
    assert training.learning_rate == 5e-7 and training.loss_type == "dr_grpo"
    assert model.model_name_or_path == "m" and script.dataset_path == "d.jsonl"
    # --config works too.
    _, training, _ = parse_recipe(["--config", str(recipe)])
    assert training.learning_rate == 1e-6


def test_contradiction_from_command_line(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"dr_grpo: true\nuse_cpu: true\nbf16: false\noutput_dir: {tmp_path}\n")
    with pytest.raises(ValueError, match="beta=0.04 contradicts dr_grpo=true"):
        parse_recipe([str(recipe), "--beta", "0.04"])


def test_unknown_recipe_key_names_it_and_closest(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("dr_grpo: true\nnum_generation: 8\n")
    with pytest.raises(ValueError, match="Unknown key 'num_generation' in recipe .*Did you mean 'num_generations'"):
        parse_recipe([str(recipe)])


def test_unknown_command_line_key(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"use_cpu: true\nbf16: false\noutput_dir: {tmp_path}\n")
    with pytest.raises(ValueError, match="Unknown key 'dr_gpro' in the command line.*'dr_grpo'"):
        parse_recipe([str(recipe), "--dr_gpro", "true"])


def test_config_builds_without_gpu_when_bf16_is_unset():
    # The check: `DrGRPOConfig(output_dir=..., dr_grpo=True)` on any machine shows the resolved values.
    config = DrGRPOConfig(output_dir="/tmp/drgrpo-test", dr_grpo=True)
    assert (config.scale_rewards, config.loss_type, config.beta) == ("none", "dr_grpo", 0.0)
    if not torch.cuda.is_available():
        assert config.bf16 is False


def test_run_name_defaults_to_the_recipe_name(tmp_path):
    recipe = tmp_path / "my_tiny_recipe.yaml"
    recipe.write_text(f"use_cpu: true\nbf16: false\noutput_dir: {tmp_path}\n")
    assert parse_recipe([str(recipe)])[1].run_name == "my-tiny-recipe"
    assert parse_recipe([str(recipe), "--run_name", "mine"])[1].run_name == "mine"


# --- the start-up summary names only the knobs that act (issue 11, item 4) ------------------------------------------
def test_summary_names_std_convention_only_where_ours_scales():
    assert "std ddof=1, eps=0.0001" in make().algorithm_summary  # GRPO, group scaling: ours, with TRL's convention
    dr = make(dr_grpo=True).algorithm_summary
    assert "ddof" not in dr and "eps" not in dr  # no std division
    batch = make(scale_rewards="batch", advantage_std_ddof=0).algorithm_summary
    assert "std ddof=0" not in batch and "advantages: TRL's batch scaling" in batch
    nts = make(multi_objective_aggregation="normalize_then_sum", advantage_epsilon=1e-8).algorithm_summary
    assert "eps=1e-08" not in nts and "advantages: TRL's normalize_then_sum" in nts


@pytest.mark.parametrize(
    "settings,why",
    [
        ({"scale_rewards": "batch"}, "TRL's batch scaling"),
        ({"multi_objective_aggregation": "normalize_then_sum"}, "TRL's normalize_then_sum"),
        ({"dr_grpo": True}, "scale_rewards=none divides by no std"),
    ],
)
def test_std_convention_that_does_not_act_is_a_warning_naming_why(settings, why):
    config = make(advantage_std_ddof=0, advantage_epsilon=1e-8, **settings)
    (warning,) = config.inactive_advantage_settings
    assert "advantage_std_ddof=0, advantage_epsilon=1e-08 set but not applied" in warning and why in warning
    assert make(**settings).inactive_advantage_settings == []  # defaults: nothing to warn about
    assert make(advantage_std_ddof=0).inactive_advantage_settings == []  # group scaling: it acts


def test_trainer_logs_the_inactive_setting_warning(tiny_model_path, tmp_path, caplog):
    from datasets import Dataset

    from drgrpo.algorithm.trainer import DrGRPOTrainer
    from rewards import accuracy

    args = make(output_dir=str(tmp_path), scale_rewards="batch", advantage_std_ddof=0, report_to="none",
                num_generations=4, per_device_train_batch_size=4, max_completion_length=4)  # fmt: skip
    dataset = Dataset.from_list([{"prompt": "1+1=", "answer": "2"}] * 4)
    with caplog.at_level("WARNING", logger="drgrpo.algorithm.trainer"):
        DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[accuracy], args=args, train_dataset=dataset)
    messages = [r.getMessage() for r in caplog.records]
    assert any("advantage_std_ddof=0 set but not applied" in msg and "batch scaling" in msg for msg in messages)
