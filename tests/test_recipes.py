"""Every shipped recipe parses into the three config objects, with the algorithm it claims."""

from pathlib import Path

import pytest
import yaml

from drgrpo.recipe.cli import parse_recipe

RECIPES = sorted((Path(__file__).resolve().parents[1] / "recipes").glob("*.yaml"))


def test_recipes_exist():
    names = {p.name for p in RECIPES}
    assert {"tiny_drgrpo.yaml", "tiny_grpo.yaml", "qwen3_8b_drgrpo.yaml", "qwen3_8b_grpo.yaml"} <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_parses(recipe):
    # GPU recipes ask for bf16, which transformers refuses on a machine without a GPU unless use_cpu is set.
    script, training, model = parse_recipe([str(recipe), "--use_cpu", "true"])
    raw = yaml.safe_load(recipe.read_text())
    assert model.model_name_or_path == raw["model_name_or_path"]
    assert script.reward_funcs
    if raw.get("dr_grpo"):
        assert (training.scale_rewards, training.loss_type, training.beta) == ("none", "dr_grpo", 0.0)
    else:
        assert training.loss_type != "dr_grpo"
    assert training.num_generations >= 2
