"""Every user error is one line with its cause, the file/key/value and the fix; no traceback unless asked for.

Most cases run `scripts/train.py` in this process (runpy) to skip a second interpreter start and its imports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import PYTHON, ROOT, skip_unless_required
from hypothesis import given
from hypothesis import strategies as st

from drgrpo.core.errors import RecipeError, is_user_error, run_main
from drgrpo.recipe.batch_rules import batch_rules_hold, nearest_per_device
from drgrpo.recipe.cli import parse_recipe
from drgrpo.recipe.config_errors import translate_config_error

TINY = "recipes/tiny_drgrpo.yaml"


def the_error(result: subprocess.CompletedProcess) -> str:
    """The one `error:` line of a user error (a script's run: the `run_script` fixture, or a subprocess), after
    checking its shape: status 2, no traceback/usage (the `--traceback` hint follows every user error but a
    `UsageError`: tests/test_first_two_hours.py)."""
    stderr = result.stderr
    assert result.returncode == 2, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr[-3000:]
    assert "Traceback" not in stderr and "usage:" not in stderr
    return lines[0]


def write_recipe(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(textwrap.dedent(text))
    return path


# --- the wrapper ----------------------------------------------------------------------------------------------------
def test_run_main_prints_a_user_error_and_re_raises_with_traceback_flag_or_env(monkeypatch, capsys):
    def bad() -> None:
        raise RecipeError("learning_rate: 'fast' is not a number.")

    monkeypatch.delenv("DRGRPO_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["x.py"])
    with pytest.raises(SystemExit) as info:
        run_main(bad)
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: learning_rate: 'fast' is not a number.",
        "(the full traceback: rerun with --traceback, or set DRGRPO_DEBUG=1)",
    ]
    monkeypatch.setattr(sys, "argv", ["x.py", "--traceback"])
    with pytest.raises(RecipeError):
        run_main(bad)
    assert sys.argv == ["x.py"]  # the flag is not passed on to the script's own parser
    monkeypatch.setenv("DRGRPO_DEBUG", "1")
    with pytest.raises(RecipeError):
        run_main(bad)


def test_run_main_exits_with_an_int_status_and_returns_otherwise():
    run_main(lambda: None)
    run_main(lambda: {"pass@1": 0.5})  # evaluate.py's main returns its summary: success
    for status in (0, 1):  # plan.py: 1 when the recipe has an error
        with pytest.raises(SystemExit) as info:
            run_main(lambda status=status: status)
        assert info.value.code == status


def test_bugs_keep_their_traceback():
    def value_error_outside_the_project() -> None:
        int("x")

    with pytest.raises(ValueError) as info:
        value_error_outside_the_project()
    assert not is_user_error(info.value)  # raised in this test file, not in drgrpo/ or rewards/
    assert not is_user_error(RuntimeError("boom"))
    with pytest.raises(ValueError) as info:
        parse_recipe(
            [TINY, "--advantage_std_ddof", "2"]
        )  # a ValueError from drgrpo/algorithm/config.py: a user message
    assert is_user_error(info.value)


# --- the recipe file ------------------------------------------------------------------------------------------------
def test_missing_recipe_file_fails_before_torch_is_imported():
    code = textwrap.dedent(
        """
        import runpy, sys
        sys.argv = ["scripts/train.py", "recipes/tiny_drgrpo.yml"]
        try:
            runpy.run_path("scripts/train.py", run_name="__main__")
        except SystemExit as exit:
            print(exit.code, "torch" in sys.modules, "trl" in sys.modules)
            raise
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([PYTHON, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.stdout.split() == ["2", "False", "False"], result.stderr
    error = the_error(result)
    assert (
        "Recipe file 'recipes/tiny_drgrpo.yml' not found" in error and "Did you mean recipes/tiny_drgrpo.yaml" in error
    )


def test_bad_yaml_names_file_and_line(tmp_path, run_script):
    recipe = write_recipe(tmp_path, "dr_grpo: true\nlearning_rate: [1e-6\n")
    error = the_error(run_script("scripts/train.py", str(recipe)))
    assert f"Recipe file '{recipe}' line 3: not valid YAML" in error


# --- values of the wrong type -----------------------------------------------------------------------------------
def test_bad_value_in_recipe_names_key_value_file_and_type(tmp_path, run_script):
    recipe = write_recipe(tmp_path, 'learning_rate: "fast"\nuse_cpu: true\n')
    error = the_error(run_script("scripts/train.py", str(recipe)))
    assert error == (
        f"error: recipe {recipe}: learning_rate: 'fast' is not a number. learning_rate takes a number (default: "
        "1e-06); fix it in the recipe, or override it with --learning_rate VALUE."
    )


def test_bad_value_on_command_line(run_script):
    error = the_error(run_script("scripts/train.py", TINY, "--max_steps", "lots"))
    assert (
        error == "error: command line: max_steps: 'lots' is not an integer. max_steps takes an integer (default: -1)."
    )


@pytest.mark.parametrize(
    "line, expected",
    [
        ("num_generations: 8.5", "num_generations: 8.5 is not an integer"),
        ("bf16: maybe", "bf16='maybe': set true, false or auto"),
        ("dr_grpo: 1", "dr_grpo: 1 is not true or false"),
        ("lr_scheduler_type: linearr", "lr_scheduler_type: 'linearr' is not one of linear, cosine"),
        ("reward_weights: [1.0, heavy]", "reward_weights: 'heavy' is not a number"),
    ],
)
def test_recipe_value_types(tmp_path, line, expected):
    recipe = write_recipe(tmp_path, f"use_cpu: true\n{line}\n")
    with pytest.raises(RecipeError, match=f"recipe {recipe}: {expected}") as info:
        parse_recipe([str(recipe)])
    assert "\n" not in str(info.value)


def test_well_typed_yaml_values_pass(tmp_path):
    recipe = write_recipe(
        tmp_path, f"use_cpu: true\nlearning_rate: 3e-4\nnum_generations: 4\nper_device_train_batch_size: 8\n"
        f"bf16: false\nreward_weights: [1, 0.5]\nreward_funcs: [accuracy, format]\noutput_dir: {tmp_path}\n"
    )  # fmt: skip
    _, training, _ = parse_recipe([str(recipe)])
    assert training.learning_rate == 3e-4 and training.reward_weights == [1, 0.5]


# --- TRL's batch divisibility, in recipe terms --------------------------------------------------------------------
def test_batch_divisibility_explained_with_integer_fixes(run_script):
    error = the_error(run_script("scripts/train.py", TINY, "--num_generations", "5"))
    assert (
        "per_device_train_batch_size (64) x gradient_accumulation_steps (1) x world size (1) = 64 completions, not a "
        "multiple of num_generations (5)" in error
    )
    assert "Fix: per_device_train_batch_size: 60 or 65, or num_generations: 4 or 8" in error
    assert "generation_batch_size" not in error  # a key the user never set
    for fix in (["--per_device_train_batch_size", "65"], ["--num_generations", "8"]):  # the fixes parse
        parse_recipe([TINY, "--num_generations", "5", *fix])


def test_explicit_generation_batch_size_gets_its_own_fix():
    with pytest.raises(RecipeError, match=r"generation_batch_size \(70\) .* Fix: generation_batch_size: 64 or 128"):
        parse_recipe([TINY, "--generation_batch_size", "70", "--per_device_train_batch_size", "64"])


def test_batch_fix_hand_computed():
    # 8 GPUs x 16 x 8 accumulation = 1024 completions with groups of 12: the batch must be a multiple of
    # 12 / gcd(12, 8 x 8) = 3 (15 or 18); 1024's divisors nearest 12 are 8 and 16.
    error = translate_config_error(trl_error(1024, 12), {"gradient_accumulation_steps": 8}, DEFAULTS | PDB16, 8, "x")
    assert "= 1024 completions" in str(error)
    assert "per_device_train_batch_size: 15 or 18, or num_generations: 8 or 16" in str(error)


def test_batch_fix_with_steps_per_generation_is_one_the_planner_accepts():
    # One process, per_device 1, accumulation 1, steps_per_generation 4, groups of 8: a round of 4 completions.
    values = {"per_device_train_batch_size": 1, "steps_per_generation": 4}
    fix = suggested(translate_config_error(trl_error(4, 8), values, DEFAULTS, 1, "recipe r.yaml"))
    below, above = nearest_per_device(1, 1, 1, 8, steps_per_generation=4)
    assert fix["per_device_train_batch_size"] == [p for p in (below, above) if p is not None]
    # By hand: a round of 2 x 4 = 8 holds one group of 8, and 4 completions hold one group of 4 (none above 8 does).
    assert fix == {"per_device_train_batch_size": [2], "num_generations": [4]}
    assert all(batch_rules_hold(1, p, 1, 8, steps_per_generation=4) for p in fix["per_device_train_batch_size"])
    assert all(batch_rules_hold(1, 1, 1, g, steps_per_generation=4) for g in fix.get("num_generations", []))


DEFAULTS = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "steps_per_generation": None}
PDB16 = {"per_device_train_batch_size": 16}


def trl_error(generation_batch_size: int, num_generations: int) -> ValueError:
    """The ValueError TRL 1.16's `GRPOConfig.__post_init__` raises for a round that does not hold whole groups."""
    return ValueError(
        f"generation_batch_size ({generation_batch_size}) must be divisible by num_generations ({num_generations})."
    )


def suggested(error: RecipeError) -> dict[str, list[int]]:
    """The values the error's `Fix:` offers, per key: "Fix: a: 1 or 2, or b: 3" -> {"a": [1, 2], "b": [3]}."""
    fixes = str(error).split("Fix: ", 1)[1].split(" (`python", 1)[0].rstrip(".")
    result = {}
    for part in fixes.split(", or "):
        key, _, numbers = part.partition(": ")
        result[key] = [int(n) for n in numbers.split(" or ")]
    return result


@given(
    per_device=st.integers(1, 64),
    accumulation=st.integers(1, 16),
    steps=st.one_of(st.none(), st.integers(1, 16)),
    generations=st.integers(2, 64),
    world_size=st.integers(1, 64),
)
def test_every_suggested_value_satisfies_the_planners_rules(per_device, accumulation, steps, generations, world_size):
    factor = steps if steps is not None else accumulation
    total = per_device * factor * world_size
    if total % generations == 0:
        return  # TRL raises nothing
    values = {"per_device_train_batch_size": per_device, "gradient_accumulation_steps": accumulation}
    values["steps_per_generation"] = steps
    fix = suggested(translate_config_error(trl_error(total, generations), values, DEFAULTS, world_size, "x"))
    keys = {"steps_per_generation": steps}
    assert fix["per_device_train_batch_size"], fix
    for p in fix["per_device_train_batch_size"]:
        assert p >= 1 and batch_rules_hold(world_size, p, accumulation, generations, **keys)
    for g in fix.get("num_generations", []):
        assert g >= 2 and batch_rules_hold(world_size, per_device, accumulation, g, **keys)


def test_bf16_without_a_gpu_says_what_to_do():
    import torch

    if torch.cuda.is_available():
        skip_unless_required("no_gpu", "this machine has a GPU: bf16 is allowed")
    with pytest.raises(RecipeError, match="bf16: true needs a GPU .* --bf16 false --use_cpu true"):
        parse_recipe(["recipes/qwen3_8b_drgrpo.yaml"])


# --- keys, rewards and data ----------------------------------------------------------------------------------------
def test_unknown_key_is_one_line(run_script):
    error = the_error(run_script("scripts/train.py", TINY, "--num_generation", "4"))
    assert "Unknown key 'num_generation' in the command line. Did you mean 'num_generations'?" in error


def test_unimportable_reward_module_explains_pythonpath_and_the_file_form(
    tmp_path, tiny_model_path, addition_data, monkeypatch, run_script
):
    common = [TINY, "--model_name_or_path", str(tiny_model_path), "--dataset_path", str(addition_data["train"])]
    monkeypatch.delenv("PYTHONPATH", raising=False)
    error = the_error(
        run_script("scripts/train.py", *common, "--output_dir", str(tmp_path / "a"), "--reward_funcs",
                   "my_rewards.math:score")
    )  # fmt: skip
    assert "Cannot import module 'my_rewards.math' (reward spec 'my_rewards.math:score')" in error
    assert "PYTHONPATH (unset)" in error and "'my_rewards/math.py:score'" in error

    # A module that exists but raises while importing: its own error is the cause.
    (tmp_path / "broken_rewards.py").write_text("1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    error = the_error(
        run_script("scripts/train.py", *common, "--output_dir", str(tmp_path / "b"), "--reward_funcs",
                   "broken_rewards:score")
    )  # fmt: skip
    assert "Cannot import module 'broken_rewards'" in error and "ZeroDivisionError: division by zero" in error
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_empty_dataset_file_names_file_and_split(tmp_path, tiny_model_path, addition_data, run_script):
    empty = tmp_path / "train.jsonl"
    empty.write_text("")
    error = the_error(
        run_script("scripts/train.py", TINY, "--model_name_or_path", str(tiny_model_path), "--dataset_path",
                   str(empty), "--output_dir", str(tmp_path / "out"))
    )  # fmt: skip
    assert f"dataset_path '{empty}': the file is empty, so the training split has no rows" in error

    blank = tmp_path / "test.jsonl"
    blank.write_text("\n\n")
    from drgrpo.data import DataArguments, load_prompt_dataset

    args = DataArguments(
        dataset_path=str(addition_data["train"]), dataset_test_path=str(blank), prompt_column="question",
        prompt_template="plain",
    )  # fmt: skip
    with pytest.raises(ValueError, match=f"dataset_test_path '{blank}': the file is empty, so the held-out split"):
        load_prompt_dataset(args)


def test_other_scripts_print_one_line(tmp_path, run_script):
    error = the_error(run_script("scripts/plan.py", "recipes/nope.yaml"))
    assert "Recipe file 'recipes/nope.yaml' not found" in error
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"completion": "x"}) + "\n")
    assert "missing.jsonl" in the_error(run_script("scripts/score.py", "--input", str(tmp_path / "missing.jsonl")))


def test_from_verl_missing_or_malformed_config_is_one_line(tmp_path, run_script):
    missing = tmp_path / "nosuch.yaml"
    error = the_error(run_script("scripts/from_verl.py", str(missing)))
    assert f"verl config '{missing}' not found" in error
    broken = tmp_path / "broken.yaml"
    broken.write_text("actor_rollout_ref:\n  rollout: [n: 8\n")
    error = the_error(run_script("scripts/from_verl.py", str(broken)))
    assert f"verl config '{broken}' line 3: not valid YAML (expected ',' or ']'" in error  # the list never closes


def hub_recipe(tmp_path: Path, model: Path, **data: str) -> Path:
    """The tiny recipe reading its data from `data` (a hub source) instead of its local file."""
    import yaml

    recipe = yaml.safe_load((ROOT / TINY).read_text())
    recipe.pop("dataset_path")
    recipe.update(data, model_name_or_path=str(model), output_dir=str(tmp_path / "out"))
    path = tmp_path / "hub_recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_local_file_given_as_dataset_name_says_use_dataset_path(tmp_path, tiny_model_path, run_script):
    rows = tmp_path / "train.jsonl"
    rows.write_text(json.dumps({"problem": "1+1", "solution": "\\boxed{2}"}) + "\n")
    recipe = hub_recipe(tmp_path, tiny_model_path, dataset_name=str(rows), dataset_config="default")
    error = the_error(run_script("scripts/train.py", str(recipe)))
    assert f"dataset_name {str(rows)!r} is a local file, not a hub dataset: set dataset_path: {rows}" in error


def test_unreachable_hub_dataset_offline_names_the_source_and_the_fix(
    tmp_path, tiny_model_path, monkeypatch, run_script
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    error = the_error(
        run_script("scripts/train.py", str(hub_recipe(tmp_path, tiny_model_path, dataset_name="nosuch/ds")))
    )
    assert "dataset_name 'nosuch/ds' (split train) could not be loaded" in error
    assert "HF_HUB_OFFLINE=1 is set and it is not in the local cache" in error and "dataset_path" in error


def test_parsing_a_recipe_prints_no_gradient_checkpointing_deprecation():
    # TRL 1.16's GRPOConfig defaults gradient_checkpointing to True, so transformers' FutureWarning (use
    # activation_checkpointing) came before every recipe's output, even one that never names the key.
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, training, _ = parse_recipe(["recipes/qwen3_8b_drgrpo.yaml"], preflight=True)
    assert not [w for w in caught if "gradient_checkpointing" in str(w.message)], [str(w.message) for w in caught]
    assert training.gradient_checkpointing is True and training.activation_checkpointing is True  # still applied


def test_plan_rejects_zero_processes_in_one_line(run_script):
    error = the_error(run_script("scripts/plan.py", TINY, "--num_processes", "0"))
    assert "--num_processes must be 1 or more (training processes), got 0" in error


@pytest.mark.parametrize("argv", [[], ["--explain"], ["--show_prompts", "2"], ["--max_steps", "1"]])
def test_train_without_a_recipe_says_so_with_the_usage(run_script, argv):
    error = the_error(run_script("scripts/train.py", *argv))
    assert "No recipe given. Usage: python scripts/train.py RECIPE.yaml [--key value ...]" in error
