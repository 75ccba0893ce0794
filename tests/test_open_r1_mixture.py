"""open-r1's `dataset_mixture` shape, the recipe format its users bring (issue 54, item 13), read as ours.

The mixture below is open-r1's own: its tests (github.com/huggingface/open-r1, tests/utils/test_data.py at commit
d0ee0f06dbec459a4ec8caed72d5ca51f84cfb2c, `test_weighted_mixture` and `test_mixture_and_test_split`) mix the train
split of `trl-internal-testing/zen` (config `conversational_preference`) at weight 0.25 with its test split at 0.5
(so `len(train) // 4 + len(test) // 2` rows), and hold out `test_split_size: 0.2` of a mixture of 10 rows (8 kept, 2
held out); written here in the YAML shape of open-r1's README template for recipes (`dataset_mixture: {datasets: [{id,
config, split, columns, weight}], seed, test_split_size}`). No recipe file in open-r1's recipes/*.yaml that this
project's index holds writes a mixture (they name `dataset_name`); the shape and its counts are the tests' and the
README's. Before issue 54 the shape was refused: "dataset_mixture must be a non-empty list of mappings"."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from drgrpo.data.sources import data_sources
from drgrpo.recipe.cli import parse_recipe

OPEN_R1_MIXTURE = """\
dataset_mixture:
  datasets:
    - id: trl-internal-testing/zen
      config: conversational_preference
      split: train
      columns: [prompt, chosen]
      weight: 0.25
    - id: trl-internal-testing/zen
      config: conversational_preference
      split: test
      columns: [prompt, chosen]
      weight: 0.5
  seed: 42
  test_split_size: 0.2
"""


def recipe(tmp_path: Path, mixture: str, extra: str = "") -> Path:
    path = tmp_path / "open_r1.yaml"
    head = "model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct\nprompt_column: prompt\nanswer_column: chosen\n"
    path.write_text(head + mixture + textwrap.dedent(extra))
    return path


def test_open_r1s_mixture_is_read_as_ours(tmp_path):
    script_args, _, _ = parse_recipe([str(recipe(tmp_path, OPEN_R1_MIXTURE))], preflight=True)
    sources = data_sources(script_args)
    assert [(s.name, s.config, s.split, s.fraction, s.weight) for s in sources] == [
        ("trl-internal-testing/zen", "conversational_preference", "train", 0.25, None),
        ("trl-internal-testing/zen", "conversational_preference", "test", 0.5, None),
    ]
    assert (script_args.dataset_mixture_seed, script_args.dataset_test_size) == (42, 0.2)


def test_the_mixture_keeps_open_r1s_counts_end_to_end(tmp_path, tiny_model_path, run_script):
    """The same mixture on local files standing in for the two hub splits (40 and 20 rows; the tests run offline):
    10 + 10 rows mixed, a fifth of them (4) held out, 16 trained on, as open-r1's get_dataset counts them."""

    def rows(count: int, tag: str) -> str:
        return "".join(json.dumps({"prompt": f"{tag} {i}+1=", "chosen": str(i + 1)}) + "\n" for i in range(count))

    (tmp_path / "train.jsonl").write_text(rows(40, "train"))
    (tmp_path / "test.jsonl").write_text(rows(20, "test"))
    local = OPEN_R1_MIXTURE.replace("id: trl-internal-testing/zen", "id: DATA").replace(
        "config: conversational_preference\n      ", ""
    )
    local = local.replace("DATA\n      split: train", f"{tmp_path / 'train.jsonl'}\n      split: train")
    local = local.replace("DATA\n      split: test", f"{tmp_path / 'test.jsonl'}\n      split: test")
    path = recipe(
        tmp_path,
        local,
        "prompt_template: plain\nmax_completion_length: 8\nnum_generations: 2\nper_device_train_batch_size: 2\n",
    )
    result = run_script("scripts/train.py", str(path), "--model_name_or_path", str(tiny_model_path), "--explain")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"dataset_path {tmp_path / 'train.jsonl'} keeps 10 of its 40 rows (fraction 0.25)" in result.stderr
    assert f"dataset_path {tmp_path / 'test.jsonl'} keeps 10 of its 20 rows (fraction 0.5)" in result.stderr
    assert "16 training prompts, 4 held out" in result.stderr


@pytest.mark.parametrize(
    "change, says",
    [
        ("weight: 0.25", "weight: 1.5"),
        ("columns: [prompt, chosen]", "columns: [prompt, rejected]"),
        ("  seed: 42", "  sed: 42"),
    ],
)
def test_what_open_r1_or_training_could_not_use_is_one_line(tmp_path, tiny_model_path, run_script, change, says):
    path = recipe(tmp_path, OPEN_R1_MIXTURE.replace(change, says, 1))
    result = run_script(
        "scripts/train.py", str(path), "--model_name_or_path", str(tiny_model_path), "--show_prompts", "1"
    )
    assert result.returncode == 2
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    expected = {
        "weight: 1.5": "dataset_mixture.datasets[0].weight=1.5: open-r1 keeps int(rows x weight)",
        "columns: [prompt, rejected]": "dataset_mixture.datasets[0].columns ['prompt', 'rejected'] lacks the recipe's "
        "answer_column 'chosen'",
        "  sed: 42": "dataset_mixture (open-r1's shape): unknown key 'sed'. Did you mean 'seed'?",
    }[says]
    assert len(error) == 1 and expected in error[0], result.stderr[-2000:]
