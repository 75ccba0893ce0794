"""A new user's first verl conversions (issue 43), as typed: `scripts/from_verl.py run.sh -o recipe.yaml`, then
`scripts/train.py recipe.yaml --explain`. A converted recipe starts (its eval batch holds whole groups; the planner's
checks run before anything is written), saves and evaluates as often as verl does (verl counts rollouts, a recipe
optimizer steps), reads several train files as verl does, and keeps verl's entropy bonus under Dr.GRPO knowingly.
The commands run in this process (the `run_script` fixture: the script's `__main__`, its status and output), each as
typed from the clone."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from drgrpo.data.sources import data_sources
from drgrpo.planning import plan_recipe
from drgrpo.recipe.preflight import parse_for_planning
from drgrpo.recipe.verl import convert_verl
from drgrpo.recipe.verl_config import read_verl_config

VERL_QWEN3_8B = ROOT / "tests/fixtures/verl/run_qwen3-8b.sh"  # rollout.n=5, test_freq=5, save_freq=20, 4 updates
GOOD = (
    "algorithm.adv_estimator=grpo data.train_batch_size=64 actor_rollout_ref.actor.ppo_mini_batch_size=16 "
    "actor_rollout_ref.rollout.n=8 actor_rollout_ref.actor.optim.lr=1e-6 trainer.n_gpus_per_node=8 "
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-Math-1.5B data.train_files=train.parquet"
)
DR_GRPO = "algorithm.norm_adv_by_std_in_grpo=False actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm"


@pytest.fixture
def convert(run_script):
    """`scripts/from_verl.py SCRIPT -o RECIPE FLAGS...` with HOME=/home/ada."""
    return lambda script, output, *flags: run_script(
        "scripts/from_verl.py", str(script), "-o", str(output), *flags, env={"HOME": "/home/ada"}
    )


def stand_in_data(path: Path) -> Path:
    """A parquet file of 8 rows with the converted recipe's columns (prompt, answer): --explain runs training's checks,
    which read the data, and verl's own files are not on this machine."""
    from datasets import Dataset

    path.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_dict(
        {"prompt": [f"What is {i} + 1?" for i in range(8)], "answer": [str(i + 1) for i in range(8)]}
    ).to_parquet(path)
    return path


@pytest.fixture
def explain(run_script, tmp_path):
    """`scripts/train.py RECIPE [overrides] --explain` from tmp_path, where the recipe's relative data files are
    written as stand-ins."""

    def run(recipe: Path, *overrides: str):
        values = yaml.safe_load(Path(recipe).read_text())
        files = [
            values.get("dataset_path"),
            *(entry.get("dataset_path") for entry in values.get("dataset_mixture") or []),
        ]
        for name in files:
            if name and not Path(name).is_absolute() and not (tmp_path / name).exists():
                stand_in_data(tmp_path / name)
        return run_script("scripts/train.py", str(recipe), *overrides, "--explain", cwd=tmp_path)

    return run


def launch(tmp_path: Path, overrides: str) -> Path:
    script = tmp_path / "run.sh"
    script.write_text(f"python3 -m verl.trainer.main_ppo {overrides}\n")
    return script


def test_verl_example_with_n5_converts_to_a_recipe_that_starts_and_saves_as_often_as_verl(tmp_path, convert, explain):
    recipe = tmp_path / "qwen3_8b.yaml"
    result = convert(VERL_QWEN3_8B, recipe)
    assert result.returncode == 0, result.stderr
    text = recipe.read_text()
    values = yaml.safe_load(text)
    # The eval batch holds whole groups of 5 on 8 GPUs (transformers' default 8 x 8 = 64 does not: TRL refused).
    assert values["num_generations"] == 5 and values["eval_strategy"] == "steps"
    assert values["per_device_eval_batch_size"] == 10 and (10 * 8) % 5 == 0
    # verl: 1024 prompts a rollout in updates of 256 = 4 optimizer steps per rollout; it tests every 5 rollouts and
    # saves every 20, so the recipe evaluates every 20 optimizer steps and saves every 80, and says why.
    assert (values["eval_steps"], values["save_steps"]) == (20, 80)
    assert "save_steps: 80  # verl: trainer.save_freq: 20 rollouts x 4 optimizer steps per rollout" in text
    assert "eval_steps: 20  # verl: trainer.test_freq: 5 rollouts x 4 optimizer steps per rollout" in text
    assert "verl counts save_steps, eval_steps in training steps (one rollout each)" in text
    # It loads: --explain prints the card, and the parser reads back the converted values.
    data = stand_in_data(tmp_path / "gsm8k" / "train.parquet")  # the recipe's are verl's, in /home/ada/data
    explained = explain(recipe, "--dataset_path", str(data), "--dataset_test_path", str(data))
    assert explained.returncode == 0, explained.stderr
    assert "GRPO family card" in explained.stdout
    _, args, _, batch = parse_for_planning(recipe)
    assert (args.eval_steps, args.save_steps, batch["per_device_eval_batch_size"]) == (20, 80, 10)


def test_explain_refuses_an_eval_batch_of_partial_groups_in_one_line_with_its_fix(tmp_path, convert, explain):
    recipe = tmp_path / "recipe.yaml"
    assert convert(VERL_QWEN3_8B, recipe).returncode == 0
    lines = [line for line in recipe.read_text().splitlines() if not line.startswith("per_device_eval_batch_size")]
    recipe.write_text("\n".join(lines) + "\n")  # transformers' default eval batch (8), as the old converter left it
    result = explain(recipe)
    assert result.returncode == 2, result.stdout
    first = result.stderr.strip().splitlines()[0]
    assert first == (
        f"error: recipe {recipe} at world size 8: The eval batch (8 x 8 processes = 64) is not a multiple of 5 "
        "generations per prompt; TRL refuses to start (eval_strategy is on). Fix: set per_device_eval_batch_size to "
        "a multiple of 5 (e.g. 10)."
    )
    assert "GRPO family card" not in result.stdout
    # scripts/plan.py says the same, from the same rule (drgrpo.recipe.batch_rules.eval_batch_problem).
    (finding,) = [f for f in plan_recipe(recipe).errors if f.key == "per_device_eval_batch_size"]
    assert finding.fix == "set per_device_eval_batch_size to a multiple of 5 (e.g. 10)."


def test_a_recipe_the_planner_refuses_is_not_written(tmp_path, convert):
    # vLLM's tensor-parallel size 3 does not divide 8 GPUs: TRL refuses to start colocated vLLM.
    overrides = f"{GOOD} actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.tensor_model_parallel_size=3"
    recipe = tmp_path / "recipe.yaml"
    result = convert(launch(tmp_path, overrides), recipe, "--allow_lossy")
    assert result.returncode == 2, result.stderr
    assert not recipe.exists() and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()  # (and what transformers prints on import, e.g. WANDB_MODE=offline)
    (first,) = [line for line in lines if line.startswith("error:")]
    last = lines[-1]
    assert first.startswith(f"error: {tmp_path / 'run.sh'}: the recipe would not start: [vllm_tensor_parallel_size]")
    assert "Fix: set vllm_tensor_parallel_size to a divisor of 8." in first
    assert last.startswith("nothing written: scripts/plan.py refuses the converted recipe at verl's world size 8")


def test_several_train_files_become_a_mixture_concatenated_as_verl_does(tmp_path, convert, explain):
    overrides = GOOD.replace("data.train_files=train.parquet", "data.train_files=\"['a.parquet','b.parquet']\"")
    recipe = tmp_path / "recipe.yaml"
    for flags in ((), ("--allow_lossy",)):
        result = convert(launch(tmp_path, overrides), recipe, *flags)
        assert result.returncode == 0, result.stderr
        text = recipe.read_text()
        assert "no data.train_files" not in result.stderr + text and "NO DATASET" not in text
        values = yaml.safe_load(text)
        assert values["dataset_mixture"] == [{"dataset_path": "a.parquet"}, {"dataset_path": "b.parquet"}]
        assert "dataset_path" not in values
        assert "2 files: no weights, so all rows of every file, concatenated as verl does" in text
    script_args, _, _, _ = parse_for_planning(recipe)
    sources = data_sources(script_args)
    assert [(source.path, source.weight) for source in sources] == [("a.parquet", None), ("b.parquet", None)]
    assert explain(recipe).returncode == 0


def test_dr_grpo_with_verls_entropy_bonus_keeps_it_with_dr_grpo_allow_and_loads(tmp_path, convert, explain):
    overrides = f"{GOOD} {DR_GRPO} actor_rollout_ref.actor.entropy_coeff=0.001"
    recipe = tmp_path / "recipe.yaml"
    result = convert(launch(tmp_path, overrides), recipe)
    assert result.returncode == 0, result.stderr
    text = recipe.read_text()
    values = yaml.safe_load(text)
    assert values["dr_grpo"] is True and values["entropy_coef"] == 0.001
    assert values["dr_grpo_allow"] == ["entropy_coef"]
    assert "dr_grpo_allow: [entropy_coef]  # verl: actor_rollout_ref.actor.entropy_coeff: verl trains Dr.GRPO" in text
    explained = explain(recipe)
    assert explained.returncode == 0, explained.stderr
    assert "Dr.GRPO + entropy_coef=0.001 (opted in: not the paper's objective)" in explained.stdout
    # entropy_coeff 0 (verl's examples) is Dr.GRPO's own objective: nothing to opt into.
    (tmp_path / "zero").mkdir()
    flat = read_verl_config(launch(tmp_path / "zero", f"{GOOD} {DR_GRPO} actor_rollout_ref.actor.entropy_coeff=0"))
    plain = convert_verl(flat).recipe
    assert plain["dr_grpo"] is True and "dr_grpo_allow" not in plain


def test_every_per_rollout_count_is_scaled_by_the_optimizer_steps_of_a_rollout(tmp_path):
    flat = read_verl_config(launch(tmp_path, GOOD))
    flat.update(
        {
            "actor_rollout_ref.actor.ppo_epochs": 2,  # 64 / 16 = 4 updates, twice: 8 optimizer steps a rollout
            "trainer.save_freq": 10,
            "trainer.test_freq": 3,
            "trainer.total_training_steps": 100,
            "actor_rollout_ref.actor.optim.lr_warmup_steps": 5,
        }
    )
    conversion = convert_verl(flat)
    assert conversion.steps_per_rollout == 8
    recipe = conversion.recipe
    counts = ("save_steps", "eval_steps", "max_steps", "warmup_steps")
    assert [recipe[key] for key in counts] == [80, 24, 800, 40]
    batch = ("num_iterations", "steps_per_generation", "gradient_accumulation_steps")
    assert [recipe[key] for key in batch] == [2, 4, 1]
