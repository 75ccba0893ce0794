"""The reward registry: built-in names, `package.module:function`, `path/to/file.py:function`, errors and weights;
recipe and command-line parsing of the lists; a file reward trained end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rewards import BUILTINS, RewardArguments, SafeReward, get_reward_funcs

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "fixtures" / "my_reward.py"


def test_builtin_names_resolve_to_named_safe_rewards():
    funcs = get_reward_funcs(["accuracy", "format", "boxed_format"])
    assert [f.__name__ for f in funcs] == ["accuracy", "format", "boxed_format"]
    assert all(isinstance(f, SafeReward) for f in funcs)
    assert set(BUILTINS) == {"accuracy", "format", "boxed_format", "overlong", "cosine_length", "code", "code_format"}


def test_a_module_spec_resolves(tmp_path, monkeypatch):
    package = tmp_path / "myrewards"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "short.py").write_text(
        "def brevity(completions, **kwargs):\n    return [-len(c) / 10 for c in completions]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    (reward,) = get_reward_funcs(["myrewards.short:brevity"])
    assert reward.__name__ == "brevity"
    assert reward(completions=["ab", "abcd"]) == [-0.2, -0.4]


def test_a_file_spec_loads_without_installing(monkeypatch):
    monkeypatch.chdir(ROOT)
    (reward,) = get_reward_funcs(["tests/fixtures/my_reward.py:fn"])
    assert reward.__name__ == "fn"
    chat = [{"role": "assistant", "content": "12"}]
    assert reward(completions=["12", " 12 ", "12 apples", chat], answer=["12"] * 4) == [1.0, 1.0, 0.0, 1.0]


def test_the_readme_example_is_this_file_and_runs_in_a_recipe_list():
    """The README's "Write your own reward" example is tests/fixtures/my_reward.py, verbatim (10 lines of code)."""
    code = [line for line in EXAMPLE.read_text().splitlines() if line and not line.startswith(('"""', "Name it"))]
    assert len(code) <= 10
    namespace: dict = {}
    exec(compile(EXAMPLE.read_text(), str(EXAMPLE), "exec"), namespace)
    assert namespace["fn"](completions=["7", "8"], answer=["7", "7"]) == [1.0, 0.0]
    accuracy, fn = get_reward_funcs(["accuracy", str(EXAMPLE) + ":fn"], reward_weights=[1.0, 0.5])
    assert fn(completions=["7"], answer=[7]) == [1.0]


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        ("acuracy", ValueError, "Unknown reward 'acuracy'. Did you mean 'accuracy'\\?.*Built-in rewards: accuracy"),
        (
            "nope",
            ValueError,
            "Built-in rewards: accuracy, boxed_format, code, code_format, cosine_length, format, overlong",
        ),
        ("tests/fixtures/missing.py:fn", FileNotFoundError, "Reward file 'tests/fixtures/missing.py'.*not found"),
        ("tests/fixtures/my_reward.py:gn", AttributeError, "'tests/fixtures/my_reward.py' has no attribute 'gn'.*fn"),
        ("no_such_module_xyz:fn", ImportError, "Cannot import module 'no_such_module_xyz'"),
        ("os.path:sep", TypeError, "'sep'.*is a str, not a function"),
        ("tests/fixtures/my_reward.py:", ValueError, "expected 'package.module:function'"),
    ],
)
def test_bad_specs_name_what_is_wrong(spec, error, message, monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(error, match=message):
        get_reward_funcs([spec])


def test_a_reward_without_kwargs_is_rejected_at_load_time(tmp_path):
    path = tmp_path / "strict.py"
    path.write_text("def strict(completions, answer):\n    return [0.0] * len(completions)\n")
    with pytest.raises(TypeError, match="must accept \\*\\*kwargs"):
        get_reward_funcs([f"{path}:strict"])


def test_a_file_that_fails_to_import_is_named(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import not_a_real_module_abc\n")
    with pytest.raises(ImportError, match="Importing reward file .*broken.py.*failed"):
        get_reward_funcs([f"{path}:fn"])


def test_weights_must_align_and_names_must_be_unique(monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(ValueError, match="reward_weights has 1 values but reward_funcs has 2"):
        get_reward_funcs(["accuracy", "format"], reward_weights=[1.0])
    with pytest.raises(ValueError, match="share the name 'accuracy'"):
        get_reward_funcs(["accuracy", "accuracy"])
    with pytest.raises(ValueError, match="reward_funcs is empty"):
        get_reward_funcs([])


def test_async_rewards_stay_async(tmp_path):
    import asyncio

    path = tmp_path / "judge.py"
    path.write_text("async def judge(completions, **kwargs):\n    return [0.5 for _ in completions]\n")
    (reward,) = get_reward_funcs([f"{path}:judge"])
    assert asyncio.run(reward(completions=["a", "b"])) == [0.5, 0.5]


def test_recipe_and_command_line_lists_parse(tmp_path):
    from drgrpo.recipe.cli import parse_recipe

    recipe = tmp_path / "r.yaml"
    tiny = (ROOT / "recipes" / "tiny_drgrpo.yaml").read_text()
    assert "reward_funcs: [accuracy]\n" in tiny
    tiny = tiny.replace("reward_funcs: [accuracy]\n", "reward_funcs: [accuracy, format]\nreward_weights: [1.0, 0.5]\n")
    recipe.write_text(tiny + "reward_timeout: 2.5\n")
    script_args, training_args, _ = parse_recipe([str(recipe), "--output_dir", str(tmp_path / "o")])
    assert script_args.reward_funcs == ["accuracy", "format"]
    assert training_args.reward_weights == [1.0, 0.5]
    assert script_args.reward_timeout == 2.5
    argv = [
        str(recipe),
        "--output_dir",
        str(tmp_path / "o"),
        "--reward_funcs",
        "accuracy",
        "tests/fixtures/my_reward.py:fn",
    ]
    argv += ["--reward_weights", "1.0", "0.25", "--reward_num_workers", "0"]
    script_args, training_args, _ = parse_recipe(argv)
    assert script_args.reward_funcs == ["accuracy", "tests/fixtures/my_reward.py:fn"]
    assert training_args.reward_weights == [1.0, 0.25]
    assert script_args.reward_num_workers == 0
    assert isinstance(script_args, RewardArguments)


@pytest.mark.slow
def test_a_file_reward_trains_end_to_end(tiny_model_path, addition_data, tmp_path):
    output = tmp_path / "run"
    command = [
        sys.executable,
        "scripts/train.py",
        "recipes/tiny_drgrpo.yaml",
        "--model_name_or_path",
        str(tiny_model_path),
        "--dataset_path",
        str(addition_data["train"]),
        "--output_dir",
        str(output),
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "16",
        "--num_generations",
        "4",
        "--logging_steps",
        "1",
        "--reward_funcs",
        "accuracy",
        "tests/fixtures/my_reward.py:fn",
        "--reward_weights",
        "1.0",
        "0.5",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, textwrap.shorten(done.stderr[-3000:], 3000)
    state = json.loads((output / "trainer_state.json").read_text())
    logs = [entry for entry in state["log_history"] if "rewards/fn/mean" in entry]
    assert len(logs) == 2
    assert all("rewards/accuracy/mean" in e and e["rewards/fn/failures"] == 0.0 for e in logs)
    assert all(e["rewards/accuracy/failures"] == 0.0 for e in logs)
