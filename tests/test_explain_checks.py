"""`python scripts/train.py RECIPE --explain` runs every check training runs before the model loads (issue 54, item
1), then prints the family card, last: a recipe that training would refuse in 15-40 s (a misspelt reward, a data file
that is not there, one weight for two rewards, ...) is refused by `--explain` in the same line, without loading weights
or writing anything. Each command runs in this process (the `run_script` fixture)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from test_errors import the_error

TINY = "recipes/tiny_drgrpo.yaml"


@pytest.fixture
def explain(run_script, tiny_model_path, addition_data, tmp_path):
    """`scripts/train.py recipes/tiny_drgrpo.yaml --explain` on the tiny model and the addition data, plus `flags`."""

    def run(*flags: str, model: Path | None = None) -> subprocess.CompletedProcess:
        return run_script(
            "scripts/train.py", TINY, "--model_name_or_path", str(model or tiny_model_path), "--dataset_path",
            str(addition_data["train"]), "--output_dir", str(tmp_path / "run"), *flags, "--explain",
        )  # fmt: skip

    return run


# What a user typed wrong, and the line training gives for it (15-40 s later, after the data and tokenizer loaded).
# Before issue 54 each printed the family card and exit status 0.
REFUSED = [
    (("--reward_funcs", "accuracyy"), "error: Unknown reward 'accuracyy'. Did you mean 'accuracy'?"),
    (("--dataset_path", "no/such/train.jsonl"), "error: dataset_path 'no/such/train.jsonl' does not exist."),
    (
        ("--reward_funcs", "accuracy", "format", "--reward_weights", "1.0"),
        "error: reward_weights has 1 values but reward_funcs has 2 (['accuracy', 'format'])",
    ),
    (("--prompt_column", "problem"), "error: dataset_path {data}: column 'problem' (from prompt_column) is not in"),
    (("--extra_eos_tokens", "<|no_such_token|>"), "error: extra_eos_tokens: '<|no_such_token|>' is not a single token"),
    (("--max_completion_length", "100000"), "error: model '{model}': max_completion_length 100000 plus a prompt is"),
    (
        ("--zero_reward_for_truncated", "true", "--reward_funcs", "accuracy", "tests/fixtures/my_reward.py:fn"),
        "error: zero_reward_for_truncated needs the range of every reward function, and 'fn' declares none",
    ),
]


@pytest.mark.parametrize("flags, line", REFUSED, ids=[flags[0].strip("-") for flags, _ in REFUSED])
def test_explain_refuses_what_training_refuses_in_the_same_line(
    explain, tiny_model_path, addition_data, tmp_path, flags, line
):
    result = explain(*flags)
    error = the_error(result)
    assert error.startswith(line.format(data=addition_data["train"], model=tiny_model_path)), error
    assert "GRPO family card" not in result.stdout
    assert not (tmp_path / "run").exists()


def test_each_refusal_is_trainings_own_line(run_script, tiny_model_path, addition_data, tmp_path):
    """The same command without --explain, for two of the cases above: training's line is --explain's, word for word
    (one function runs the checks for both: drgrpo/run/before_model.py)."""
    for flags, _ in (REFUSED[0], REFUSED[3]):
        common = [
            "scripts/train.py", TINY, "--model_name_or_path", str(tiny_model_path), "--dataset_path",
            str(addition_data["train"]), "--output_dir", str(tmp_path / "run"), *flags,
        ]  # fmt: skip
        assert the_error(run_script(*common)) == the_error(run_script(*common, "--explain"))


def test_explain_loads_no_weights_writes_nothing_and_prints_the_card_last(explain, tiny_model_path, tmp_path):
    """The model's config and tokenizer are read, its weights never: a folder without them passes (training would
    fail to load it). The output_dir is neither created nor locked."""
    no_weights = tmp_path / "model-without-weights"
    shutil.copytree(tiny_model_path, no_weights, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    result = explain(model=no_weights)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("algorithm: Dr.GRPO") and lines[1] == "GRPO family card: Dr.GRPO"
    assert lines[-1].split()[0] == "staleness"  # the card's last row is the last thing printed
    assert "--explain: the checks training runs before its model loads passed; 350 training prompts" in result.stderr
    assert "no weights loaded" in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_hub_model_not_in_the_cache_is_named_as_not_checked(run_script, addition_data, tmp_path):
    """--explain downloads nothing: a hub model only the hub holds is said in one warning, and the rest is checked."""
    result = run_script(
        "scripts/train.py", TINY, "--model_name_or_path", "someone/not-cached-7b", "--dataset_path",
        str(addition_data["train"]), "--explain",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "--explain: not checked here: model_name_or_path 'someone/not-cached-7b' is a hub model that is not in the "
        "local cache"
    ) in result.stderr
    assert "passed, but for what is named above as not checked; 350 training prompts" in result.stderr
    assert result.stdout.startswith("algorithm: Dr.GRPO")
