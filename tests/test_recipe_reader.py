"""One reader of recipes (issue 44): training, the pre-flight checks and the planner, and the evaluator's recipe
settings read a recipe file and its command line through `drgrpo.recipe.cli.recipe_values`, typed by the train
parser, so that list-valued and scientific-notation values mean the same to each of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT

from drgrpo.core.errors import UsageError
from drgrpo.evaluation.runner import _recipe_settings
from drgrpo.recipe.cli import parse_recipe
from drgrpo.recipe.preflight import recipe_values

TINY = ROOT / "recipes" / "tiny_drgrpo.yaml"
# YAML 1.1 (PyYAML) reads `1e-6` as a string (a float needs a dot: `1.0e-6`); the parser reads it as argparse would.
TYPED = "learning_rate: 1e-6\nweight_decay: 4e-2\nreward_funcs: [accuracy, format]\nreward_weights: [1, 0.5]\n"


def recipe(tmp_path: Path, text: str) -> Path:
    """The tiny recipe with the `key: value` lines of `text` in place of its own lines for those keys."""
    keys = tuple(line.split(":")[0] + ":" for line in text.splitlines())
    path = tmp_path / "recipe.yaml"
    path.write_text("".join(line for line in TINY.read_text().splitlines(True) if not line.startswith(keys)) + text)
    return path


def test_yaml_lists_and_scientific_notation_are_typed_for_preflight_and_the_evaluator(tmp_path):
    path = recipe(tmp_path, TYPED)
    for values in (recipe_values(path), _recipe_settings(path)):
        assert values["learning_rate"] == 1e-06 and type(values["learning_rate"]) is float
        assert values["weight_decay"] == 0.04 and type(values["weight_decay"]) is float
        assert values["reward_funcs"] == ["accuracy", "format"] and values["reward_weights"] == [1, 0.5]
        assert values["max_steps"] == 200 and values["bf16"] is False  # typed by YAML already: kept as they are
    _, training, _ = parse_recipe([str(path)])
    assert (training.learning_rate, training.weight_decay) == (1e-06, 0.04)


def test_command_line_lists_and_scientific_notation_are_typed_as_training_reads_them():
    argv = ["--reward_funcs", "accuracy", "format", "--learning_rate", "1e-6", "--reward_weights", "1", "0.5"]
    values = recipe_values(TINY, argv)
    assert values["reward_funcs"] == ["accuracy", "format"]  # both, not only the first
    assert values["learning_rate"] == 1e-06 and type(values["learning_rate"]) is float
    assert values["reward_weights"] == [1.0, 0.5]
    script, training, _ = parse_recipe([str(TINY), *argv])
    assert (script.reward_funcs, training.learning_rate, training.reward_weights) == (
        values["reward_funcs"],
        values["learning_rate"],
        values["reward_weights"],
    )


def test_command_line_spellings_are_argparse_s():
    values = recipe_values(TINY, ["--learning-rate=3e-4", "--max_steps=7", "--use_cpu", "--dr_grpo=false"])
    assert (values["learning_rate"], values["max_steps"], values["use_cpu"], values["dr_grpo"]) == (
        3e-4,
        7,
        True,
        False,
    )
    assert "seed" in values and "num_iterations" not in values  # the keys the recipe or command line set, no more


def test_keys_are_not_abbreviated():
    with pytest.raises(UsageError, match="Unknown key 'learning' in the command line. Did you mean 'learning_rate'?"):
        recipe_values(TINY, ["--learning", "1e-6"])


def test_null_unsets_an_optional_key_and_refuses_a_required_one():
    for spelling in ("null", "None", "~"):
        assert recipe_values(TINY, ["--dataset_path", spelling])["dataset_path"] is None
    with pytest.raises(UsageError, match="--learning_rate null: learning_rate cannot be unset"):
        recipe_values(TINY, ["--learning_rate", "null"])


def test_a_bad_command_line_value_names_key_and_type():
    with pytest.raises(UsageError, match=r"command line: reward_weights: 'heavy' is not a number"):
        recipe_values(TINY, ["--reward_weights", "1", "heavy"])


def test_every_reader_refuses_a_key_written_twice_and_an_unknown_key(tmp_path):
    twice = recipe(tmp_path, "learning_rate: 1.0e-3\nlearning_rate: 1.0e-4\n")
    for read in (recipe_values, _recipe_settings):
        with pytest.raises(UsageError, match=r"line \d+: key 'learning_rate' is set twice \(first on line \d+\)"):
            read(twice)
    unknown = recipe(tmp_path, "learning_rat: 1.0e-3\n")
    for read in (recipe_values, _recipe_settings):
        with pytest.raises(UsageError, match="Unknown key 'learning_rat' in recipe .*Did you mean 'learning_rate'?"):
            read(unknown)
