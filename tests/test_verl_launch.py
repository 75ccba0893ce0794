"""verl's own launch scripts convert as bash runs them: `$HOME` and the script's own variables are expanded (and said
so), an unset variable in a data path or batch key is refused in one line naming it, and a recipe without data is
never written silently (the planner and --explain refuse it in one line)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from drgrpo.recipe.launch_script import script_words

# The shape of verl's examples/grpo_trainer/run_qwen3-8b.sh.
VERL_QWEN3_8B = ROOT / "tests/fixtures/verl/run_qwen3-8b.sh"


@pytest.fixture
def from_verl(run_script, monkeypatch):
    """`python scripts/from_verl.py SCRIPT -o OUTPUT ...` in this process (the `run_script` fixture), with `$HOME` set
    to `home`, or unset (the default); the script reads it when it expands the launch script, not at import."""

    def convert(script: Path, output: Path, *extra: str, home: str | None = None) -> subprocess.CompletedProcess:
        with monkeypatch.context() as patch:
            if home is None:
                patch.delenv("HOME", raising=False)
            else:
                patch.setenv("HOME", home)
            return run_script("scripts/from_verl.py", str(script), "-o", str(output), *extra)

    return convert


def test_verl_example_converts_with_home_set_and_keeps_its_data_paths(tmp_path, from_verl):
    result = from_verl(VERL_QWEN3_8B, tmp_path / "qwen3_8b.yaml", home="/home/ada")
    assert result.returncode == 0, result.stderr
    assert "expanded $HOME=/home/ada from the environment, as bash would" in result.stderr
    text = (tmp_path / "qwen3_8b.yaml").read_text()
    recipe = yaml.safe_load(text)
    assert recipe["dataset_path"] == "/home/ada/data/gsm8k/train.parquet"
    assert recipe["dataset_test_path"] == "/home/ada/data/gsm8k/test.parquet"
    assert recipe["model_name_or_path"] == "Qwen/Qwen3-8B" and recipe["num_generations"] == 5
    assert "# Shell variables expanded from the environment when converted (as bash would): $HOME=/home/ada" in text
    assert "NOT FAITHFUL" not in text and "NO DATASET" not in text


def test_verl_example_with_home_unset_is_refused_in_one_line_naming_it(tmp_path, from_verl):
    result = from_verl(VERL_QWEN3_8B, tmp_path / "qwen3_8b.yaml", "--allow_lossy")  # HOME removed from the env
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {VERL_QWEN3_8B}: $HOME is not set, and data.train_files, data.val_files need")
    assert "set it (HOME=... python scripts/from_verl.py" in lines[0] and "nothing written" in lines[0]
    assert not (tmp_path / "qwen3_8b.yaml").exists()


def test_script_words_expand_as_bash_does():
    script = r"""
set -x
export NNODES=${NNODES:-2}
max_prompt_length=$((1024 * 4))
gsm8k=$HOME/data/gsm8k
train_files="['$gsm8k/train.parquet', '$gsm8k/extra.parquet']"
VLLM_USE_V1=1 python3 -m verl.trainer.main_ppo \
    data.train_files="$train_files" \
    data.max_prompt_length=${max_prompt_length} \
    data.max_response_length=$(( (max_prompt_length + 1024) / 2 )) \
    trainer.nnodes=$NNODES trainer.n_gpus_per_node=${GPUS-8} \
    trainer.project_name='$HOME stays' \
    actor_rollout_ref.model.path=$MODEL_PATH $@
"""
    words = script_words(script, {"HOME": "/home/ada", "GPUS": "4"})
    command = words.lines[-1]
    assert command[:3] == ["python3", "-m", "verl.trainer.main_ppo"]  # VLLM_USE_V1=1 is an assignment, not a word
    assert "data.train_files=['/home/ada/data/gsm8k/train.parquet', '/home/ada/data/gsm8k/extra.parquet']" in command
    assert "data.max_prompt_length=4096" in command and "data.max_response_length=2560" in command
    assert "trainer.nnodes=2" in command and "trainer.n_gpus_per_node=4" in command
    assert "trainer.project_name=$HOME stays" in command  # single quotes: bash does not expand
    assert "actor_rollout_ref.model.path=$MODEL_PATH" in command  # set nowhere: left for the converter to name
    assert words.from_environment == {"HOME": "/home/ada", "GPUS": "4"}
    assert {"NNODES", "max_prompt_length", "gsm8k", "train_files"} <= set(words.from_script)


@pytest.mark.parametrize("lossy", [[], ["--allow_lossy"]], ids=["plain", "allow_lossy"])
def test_a_recipe_without_data_is_never_written_silently_and_plan_and_explain_refuse_it(
    tmp_path, lossy, from_verl, run_script
):
    script = tmp_path / "no_data.sh"
    lines = [line for line in VERL_QWEN3_8B.read_text().splitlines() if "data.train_files" not in line]
    script.write_text("\n".join(lines) + "\n")
    recipe = tmp_path / "no_data.yaml"
    result = from_verl(script, recipe, *lossy, home="/home/ada")
    assert result.returncode == 0, result.stderr
    assert "warning: no dataset: the verl config sets no data.train_files" in result.stderr
    assert "# NO DATASET: the verl config sets no data.train_files" in recipe.read_text()
    for refused in (
        run_script("scripts/plan.py", str(recipe)),
        run_script("scripts/train.py", str(recipe), "--explain"),
    ):
        assert refused.returncode == 2, refused.stdout + refused.stderr
        first, *rest = refused.stderr.strip().splitlines()
        assert first == (
            f"error: recipe {recipe}: The recipe names no data: set dataset_name (hub id), dataset_path (local file "
            "or folder) or dataset_mixture."
        )
        assert len(rest) == 1 and "Traceback" not in refused.stderr  # the --traceback hint only
