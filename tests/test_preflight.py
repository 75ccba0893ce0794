"""Pre-flight on a CPU login node: `--show_prompts` works for every shipped recipe, whatever its device keys say.

The hub is unreachable here, so each recipe runs with two substitutions only: the tiny model's folder (its tokenizer;
no weights are loaded) for `model_name_or_path`, and a local file in the format of each dataset it names
(tests/dataset_formats.py, shared with tests/test_recipes_run.py) for its data. Every other key stays as shipped:
`bf16: true`, `use_vllm: true`, the batch sizes for 8 GPUs, the template, `max_prompt_tokens`.
"""

from __future__ import annotations

import json
import re
import runpy
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from dataset_formats import write_format

RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
SOURCE_KEYS = ("dataset_name", "dataset_config", "dataset_path", "split", "dataset_train_split")


def local_source(entry: dict, path: Path) -> dict:
    """A data source with its hub id (or shipped path) replaced by a local file of that dataset's own format."""
    name = entry.get("dataset_name") or entry.get("dataset_path")
    local = {key: value for key, value in entry.items() if key not in SOURCE_KEYS}
    return {**local, "dataset_path": str(write_format(name, path))}


def with_local_data(recipe: dict, folder: Path) -> dict:
    """The recipe with each data source replaced by a local file of the same format (tests/dataset_formats.py)."""
    if recipe.get("dataset_mixture"):
        sources = enumerate(recipe["dataset_mixture"])
        return {**recipe, "dataset_mixture": [local_source(e, folder / f"source{n}.jsonl") for n, e in sources]}
    local = local_source(recipe, folder / "train.jsonl")
    if recipe.get("dataset_test_path"):  # a held-out file the recipe names: the same format, as a local file
        local["dataset_test_path"] = str(write_format(recipe["dataset_test_path"], folder / "test.jsonl"))
    return local


def test_gpu_recipes_are_covered():
    gpu_keys = [yaml.safe_load(path.read_text()).get("bf16") for path in RECIPES]
    assert gpu_keys.count(True) >= 4  # the case that failed: bf16 recipes on a machine without a bf16 GPU


@pytest.mark.parametrize("recipe_path", RECIPES, ids=lambda path: path.name)
def test_show_prompts_on_a_cpu_machine(recipe_path, tiny_model_path, tmp_path, monkeypatch, capsys):
    recipe = with_local_data(yaml.safe_load(recipe_path.read_text()), tmp_path)
    local = tmp_path / recipe_path.name
    local.write_text(yaml.safe_dump(recipe))
    argv = ["scripts/train.py", str(local), "--model_name_or_path", str(tiny_model_path), "--show_prompts", "1"]
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(ROOT / "scripts" / "train.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert f"prompt_template={recipe.get('prompt_template', 'chat')!r}" in out
    assert "===== prompt 1 of 1" in out
    prompt = out.split("=====\n", 1)[1].split("===== ends with")[0]
    if recipe.get("answer_column", "answer") is None:  # code problems: tests instead of an answer
        rows = [json.loads(line) for line in Path(recipe["dataset_path"]).read_text().splitlines()]
        # The prompt column read the way the recipe says: the shown prompt holds one of the stand-in problems.
        assert any(row[recipe["prompt_column"]].split("\n")[0] in prompt for row in rows)
        return
    # The stand-in math questions are sums (the tool demo's are products, make tool-rl's sums of two squares); the
    # question is the last one in the prompt (a few-shot example, chat_examples, comes before it).
    gold = out.split("gold answer: ")[1].split()[0]
    if squares := re.findall(r"(\d+)\^2 \+ (\d+)\^2", prompt):
        a, b = squares[-1]
        assert int(gold) == int(a) ** 2 + int(b) ** 2
        return
    a, operator, b = re.findall(r"(\d+)\s*([+*])\s*(\d+)", prompt)[-1]
    # the answer column (and its extraction) read the way the recipe says
    assert int(gold) == (int(a) + int(b) if operator == "+" else int(a) * int(b))
