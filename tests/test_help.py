"""`scripts/train.py --help`: keys in groups, Dr.GRPO first; library keys beyond the most-used under `--help-all`."""

from __future__ import annotations

import dataclasses
import re

import pytest
from conftest import ROOT
from trl import GRPOConfig

from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.recipe.cli import parse_recipe
from drgrpo.recipe.parser import GROUPS, declaring_class
from drgrpo.run.arguments import ScriptArguments

TITLES = [title for _, title in GROUPS]


def help_text(capsys, flag: str) -> str:
    with pytest.raises(SystemExit) as info:
        parse_recipe([flag])
    assert info.value.code == 0
    return capsys.readouterr().out


def keys_by_group(text: str) -> dict[str, list[str]]:
    """{group title: the keys listed under it, in order}."""
    groups: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            current = line[:-1]
            groups[current] = []
        match = re.match(r"  --(\w+)", line)
        if match and current is not None and not current.startswith("before training"):  # the flags above the keys
            groups[current].append(match.group(1))
    return groups


def test_help_groups_in_order_with_dr_grpo_first(capsys):
    text = help_text(capsys, "--help")
    groups = keys_by_group(text)
    assert [title for title in groups if title in TITLES] == TITLES
    assert groups[TITLES[0]][:4] == ["dr_grpo", "scale_rewards", "loss_type", "beta"]
    assert {"dataset_name", "prompt_template"} <= set(groups["data and prompts"])
    assert "reward_funcs" in groups["rewards"] and "correctness_reward" in groups["diagnostics"]
    assert {"advantage_estimator", "kl_in_reward_coef", "dynamic_sampling"} <= set(groups[TITLES[1]])
    assert groups["output directory"] == ["overwrite_output_dir", "allow_data_change", "save_merged_model"]
    assert groups["end-of-answer tokens"] == ["extra_eos_tokens"]
    assert "learning_rate" in groups["training loop (transformers TrainingArguments)"]  # TRL re-declares it
    assert "usage: python scripts/train.py RECIPE.yaml" in text and "--help-all lists every key" in text


def test_help_starts_with_what_to_run_before_training(capsys):
    """`--explain`, `--show_prompts` and `--traceback` are handled outside the parser; --help names them first."""
    for flag in ("--help", "--help-all"):
        text = help_text(capsys, flag)
        top = text[: text.index("options:")]
        assert all(name in top for name in ("--explain", "--show_prompts N", "--traceback", "scripts/plan.py")), top
        assert max(len(line) for line in top.splitlines()[2:]) <= 80  # readable on an 80-column terminal


def test_docs_give_no_line_counts_of_the_help(capsys):
    text = (ROOT / "docs" / "install.md").read_text()
    section = text[text.index("## `--help`") :].split("\n## ")[0]
    assert " lines)" not in section and "about 400" not in section and "1,200" not in section


def test_help_all_lists_every_key_once(capsys):
    short = help_text(capsys, "--help")
    full = help_text(capsys, "--help-all")
    listed = [key for keys in keys_by_group(full).values() for key in keys]
    every = {f.name for cls in (ScriptArguments, DrGRPOConfig) for f in dataclasses.fields(cls) if f.init}
    assert every <= set(listed) and len(listed) == len(set(listed))
    assert "--torch_compile_mode" in full and "--torch_compile_mode" not in short
    assert len(short.splitlines()) < len(full.splitlines()) / 2


def test_keys_are_grouped_by_the_class_that_declares_them():
    assert declaring_class(DrGRPOConfig, "loss_type") is DrGRPOConfig  # ours, overriding TRL's field
    assert declaring_class(DrGRPOConfig, "num_generations") is GRPOConfig
