"""verl configs -> recipes: the shipped verl Dr.GRPO launch converts into the hand-written expected recipe, which the
planner accepts; Hydra YAML input, DAPO/KL/RLOO keys, and keys that cannot be mapped are listed with a reason."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from drgrpo.planning import batch_plan, plan_recipe
from drgrpo.recipe.verl import convert_verl, format_recipe
from drgrpo.recipe.verl_config import read_verl_config

VERL_EXAMPLE = ROOT / "recipes/verl/qwen2.5_math_1.5b_drgrpo.sh"
CONVERTED = ROOT / "recipes/qwen2.5_math_1.5b_drgrpo_from_verl.yaml"

# Written by hand from the verl launch: 16 prompts x 8 samples = 128 completions per update = 8 GPUs x 16 x 1 step;
# 128 / 16 = 8 updates per rollout of 128 prompts, so 8 micro-steps per generation.
EXPECTED = {
    "model_name_or_path": "Qwen/Qwen2.5-Math-1.5B",
    "dataset_path": "data/math_l3to5/train.parquet",
    "dataset_test_path": "data/math500/test.parquet",
    "max_prompt_tokens": 1024,
    "reward_funcs": ["accuracy"],
    "dr_grpo": True,
    "epsilon": 0.2,
    "num_iterations": 1,
    "entropy_coef": 0,
    "num_generations": 8,
    "per_device_train_batch_size": 16,
    "gradient_accumulation_steps": 1,
    "steps_per_generation": 8,
    "learning_rate": 1e-6,
    "lr_scheduler_type": "constant",  # verl's default warmup_style (transformers' default is linear decay)
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "num_train_epochs": 1,
    "max_completion_length": 3000,
    "temperature": 1.0,
    "top_p": 1.0,
    "use_vllm": True,
    "vllm_mode": "colocate",
    "vllm_gpu_memory_utilization": 0.3,
    "vllm_tensor_parallel_size": 1,
    "vllm_importance_sampling_correction": False,
    "bf16": True,
    "gradient_checkpointing": True,
    "save_strategy": "steps",
    "save_steps": 400,  # verl saves every 50 rollouts (trainer.save_freq) of 8 optimizer steps each
    "eval_strategy": "no",
    "report_to": "wandb",
    "run_name": "qwen2.5-math-1.5b-drgrpo-verl",
}


def test_shipped_verl_example_converts_to_the_expected_recipe():
    conversion = convert_verl(read_verl_config(VERL_EXAMPLE))
    assert conversion.recipe == EXPECTED
    assert conversion.world_size == 8
    assert set(conversion.unmapped) == {
        "actor_rollout_ref.actor.fsdp_config.param_offload",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
        "actor_rollout_ref.model.use_remove_padding",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "data.filter_overlong_prompts",
        "trainer.project_name",
    }
    # The shipped recipe is exactly the converter's output, and reads back as the expected keys.
    assert CONVERTED.read_text() == format_recipe(conversion, "recipes/verl/qwen2.5_math_1.5b_drgrpo.sh")
    assert yaml.safe_load(CONVERTED.read_text()) == EXPECTED


def test_converted_recipe_passes_the_planner():
    report = plan_recipe(CONVERTED)
    assert report.errors == [], [f.message for f in report.errors]
    assert report.setup.world_size == 8 and report.setup.zero_stage == 3


def test_script_prints_recipe_and_lists_unmapped_keys(run_script):
    result = run_script("scripts/from_verl.py", str(VERL_EXAMPLE))
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout) == EXPECTED
    assert "not carried over: trainer.project_name: wandb project" in result.stderr


def test_hydra_yaml_with_dapo_kl_in_reward_and_unmappable_keys(tmp_path):
    config = tmp_path / "dapo.yaml"
    config.write_text(
        """
defaults: [ppo_trainer]
algorithm:
  adv_estimator: grpo
  use_kl_in_reward: true
  kl_penalty: low_var_kl
  kl_ctrl: {type: adaptive, kl_coef: 0.002}
  filter_groups: {enable: true, metric: acc, max_num_gen_batches: 10}
data: {train_batch_size: 32, max_response_length: 512, train_files: [a.parquet, b.parquet]}
actor_rollout_ref:
  model: {path: Qwen/Qwen3-8B}
  rollout: {n: 16, name: sglang}
  actor:
    loss_agg_mode: seq-mean-token-sum
    use_kl_loss: true
    kl_loss_coef: 0.01
    kl_loss_type: k1
    clip_ratio_low: 0.2
    clip_ratio_high: 0.28
    ppo_mini_batch_size: 8
    ppo_micro_batch_size_per_gpu: 4
    optim: {lr: "${data.lr}"}
reward_model:
  overlong_buffer: {enable: true, len: 128, penalty_factor: 1.0}
trainer: {n_gpus_per_node: 4, nnodes: 2, save_freq: -1}
"""
    )
    conversion = convert_verl(read_verl_config(config))
    recipe, unmapped, lossy = conversion.recipe, conversion.unmapped, conversion.lossy
    assert conversion.invalid == []
    assert recipe["scale_rewards"] == "group" and recipe["advantage_epsilon"] == 1e-6
    assert recipe["beta"] == 0.01 and "k3 only" in lossy["actor_rollout_ref.actor.kl_loss_type"]
    assert (recipe["kl_in_reward_coef"], recipe["kl_estimator"]) == (0.002, "low_var_kl")
    assert (recipe["dynamic_sampling"], recipe["dynamic_sampling_max_rounds"]) == (True, 10)
    assert recipe["dynamic_sampling_exhausted"] == "raise"  # verl raises when the rounds are spent
    assert (recipe["epsilon"], recipe["epsilon_high"]) == (0.2, 0.28)
    # 8 prompts x 16 = 128 completions per update over 8 GPUs x 4 -> 4 accumulation steps; 32 / 8 = 4 updates per
    # rollout -> 16 micro-steps per generation.
    assert (recipe["per_device_train_batch_size"], recipe["gradient_accumulation_steps"]) == (4, 4)
    assert recipe["steps_per_generation"] == 16
    assert recipe["reward_funcs"] == ["accuracy", "overlong"] and recipe["overlong_buffer_length"] == 128
    assert recipe["save_strategy"] == "no"
    # What the recipe cannot keep is refused (lossy), infrastructure is only listed (unmapped).
    assert "loss_type" not in recipe and "seq-mean-token-sum" in lossy["actor_rollout_ref.actor.loss_agg_mode"]
    assert "adaptive" in lossy["algorithm.kl_ctrl.type"]
    # verl concatenates the train files: a mixture without weights does too.
    assert recipe["dataset_mixture"] == [{"dataset_path": "a.parquet"}, {"dataset_path": "b.parquet"}]
    assert "data.train_files" not in lossy and conversion.no_data is None
    assert "cannot resolve" in lossy["actor_rollout_ref.actor.optim.lr"] and "learning_rate" not in recipe
    assert "sglang" in unmapped["actor_rollout_ref.rollout.name"]
    assert "defaults" not in unmapped and "defaults" not in lossy


def test_launch_script_values(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo \\\n  algorithm.adv_estimator=rloo \\\n"
        "  +actor_rollout_ref.actor.optim.lr=3e-7 actor_rollout_ref.rollout.n=4 # a comment\n"
    )
    flat = read_verl_config(script)
    assert flat == {
        "algorithm.adv_estimator": "rloo",
        "actor_rollout_ref.actor.optim.lr": pytest.approx(3e-7),
        "actor_rollout_ref.rollout.n": 4,
    }
    recipe = convert_verl(flat).recipe
    assert recipe["advantage_estimator"] == "leave_one_out" and recipe["scale_rewards"] == "none"
    assert recipe["loss_type"] == "dapo"  # verl's default loss_agg_mode token-mean
    with pytest.raises(ValueError, match="found no verl `key=value` overrides"):
        (tmp_path / "empty.sh").write_text("echo hello\n")
        read_verl_config(tmp_path / "empty.sh")


# --- what verl refuses, and what cannot be carried over, as a user meets it (issue 25) ------------------------------
@pytest.fixture
def from_verl(run_script):
    """`python scripts/from_verl.py run.sh -o recipe.yaml` on a launch script with these overrides, in this process
    (the `run_script` fixture)."""

    def convert(tmp_path: Path, overrides: str, *flags: str) -> tuple[subprocess.CompletedProcess, Path]:
        script = tmp_path / "run.sh"
        script.write_text(f"python3 -m verl.trainer.main_ppo {overrides}\n")
        output = tmp_path / "recipe.yaml"
        return run_script("scripts/from_verl.py", str(script), "-o", str(output), *flags), output

    return convert


GOOD = (
    "algorithm.adv_estimator=grpo data.train_batch_size=64 actor_rollout_ref.actor.ppo_mini_batch_size=16 "
    "actor_rollout_ref.rollout.n=8 actor_rollout_ref.actor.optim.lr=1e-6 trainer.n_gpus_per_node=8"
)


def refused(result: subprocess.CompletedProcess, output: Path) -> str:
    """The stderr of a refusal, after checking its shape: status 2, at most 3 lines, no traceback, nothing written."""
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) <= 3, result.stderr
    assert "Traceback" not in result.stderr and not output.exists()
    return result.stderr


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        # verl's own checks
        ("actor_rollout_ref.actor.ppo_mini_batch_size=128", "ppo_mini_batch_size=128 is larger than data.train_"),
        ("actor_rollout_ref.rollout.n=1", "rollout.n=1: grpo compares each completion"),
        ("trainer.n_gpus_per_node=3", "do not split over 3 GPUs"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5", "not a multiple of actor_rollout_ref.actor.ppo_mic"),
        ("actor_rollout_ref.actor.optim.lr=fast", "optim.lr='fast': verl reads it as a number"),
        ("data.train_batch_size=0", "data.train_batch_size=0: it counts something, so verl needs 1 or more"),
        ("algorithm.adv_estimator=gae", "adv_estimator=gae: PPO with a learned value function (a critic)"),
        ("algorithm.adv_estimator=reinforce_plus_plus", "this trainer implements the group estimators grpo and rloo"),
        # what a recipe cannot carry over faithfully
        ("actor_rollout_ref.actor.optm.lr=1e-6", "did you mean actor_rollout_ref.actor.optim.lr?"),
        ("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum", "has no TRL loss_type"),
        ("data.train_batch_size=40", "40 prompts per rollout are not a whole number of updates of 16"),
        ("actor_rollout_ref.actor.optim.warmup_style=linear", "verl's schedules are constant and cosine"),
        # an unset shell variable in a batch key (set ones are expanded: tests/test_verl_launch.py)
        ("data.train_batch_size=$DRGRPO_UNSET", "$DRGRPO_UNSET is not set, and data.train_batch_size needs it"),
        ("trainer.n_gpus_per_node=${oc.env:GPUS}", "cannot resolve; set the value by hand"),
    ],
)
def test_from_verl_refuses_with_one_line_naming_the_key(tmp_path, change, expected, from_verl):
    key = change.split("=")[0]
    overrides = " ".join(token for token in GOOD.split() if not token.startswith(key + "=")) + " " + change
    stderr = refused(*from_verl(tmp_path, overrides))
    assert stderr.startswith("error: ") and expected in stderr
    assert "nothing written" in stderr


def test_from_verl_refuses_the_default_estimator_gae(tmp_path, from_verl):
    overrides = " ".join(token for token in GOOD.split() if "adv_estimator" not in token)
    assert "algorithm.adv_estimator=gae (not set: verl's default)" in refused(*from_verl(tmp_path, overrides))


def test_allow_lossy_writes_the_recipe_with_the_refusals_listed_as_not_faithful(tmp_path, from_verl):
    result, output = from_verl(tmp_path, GOOD + " actor_rollout_ref.actor.optm.lr=1e-5", "--allow_lossy")
    assert result.returncode == 0, result.stderr
    assert "warning: not faithful (--allow_lossy): actor_rollout_ref.actor.optm.lr" in result.stderr
    text = output.read_text()
    assert "# NOT FAITHFUL to the verl run" in text and "did you mean actor_rollout_ref.actor.optim.lr?" in text
    assert yaml.safe_load(text)["learning_rate"] == 1e-6  # the correctly spelt key's value, not the misspelt one's
    # --allow_lossy never overrides what verl itself refuses.
    (tmp_path / "again").mkdir()
    result, output = from_verl(tmp_path / "again", GOOD + " actor_rollout_ref.rollout.n=1", "--allow_lossy")
    assert "rollout.n=1" in refused(result, output)


def test_missing_keys_take_verl_defaults_not_the_recipes(tmp_path, from_verl):
    result, output = from_verl(tmp_path, "algorithm.adv_estimator=grpo actor_rollout_ref.rollout.n=8")
    assert result.returncode == 0, result.stderr
    recipe = yaml.safe_load(output.read_text())
    # verl: 1024 prompts per rollout, 256 per update, 512-token responses, weight decay 0.01, 30 epochs, no saving,
    # constant learning rate (TRL's defaults: 256 tokens, 0.0, 3 epochs, saving every 500 steps, linear decay).
    assert (recipe["per_device_train_batch_size"], recipe["gradient_accumulation_steps"]) == (256, 1)
    assert recipe["steps_per_generation"] == 4
    assert (recipe["max_completion_length"], recipe["weight_decay"], recipe["num_train_epochs"]) == (512, 0.01, 30)
    assert (recipe["save_strategy"], recipe["lr_scheduler_type"]) == ("no", "constant")
    assert "data.train_batch_size is not set: verl's default 1024 is used" in output.read_text()


@given(
    rollout=st.integers(1, 64),
    update=st.integers(1, 64),
    n=st.integers(1, 9),
    gpus=st.integers(1, 8),
    nodes=st.integers(1, 2),
    micro=st.one_of(st.none(), st.integers(1, 8)),
)
@settings(max_examples=300, deadline=None)
def test_a_converted_config_never_gives_a_schedule_the_planner_crashes_on(rollout, update, n, gpus, nodes, micro):
    flat = {
        "algorithm.adv_estimator": "grpo",
        "data.train_batch_size": rollout,
        "actor_rollout_ref.actor.ppo_mini_batch_size": update,
        "actor_rollout_ref.rollout.n": n,
        "trainer.n_gpus_per_node": gpus,
        "trainer.nnodes": nodes,
    }
    if micro is not None:
        flat["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] = micro
    conversion = convert_verl(flat)
    if conversion.invalid:
        return
    recipe = conversion.recipe
    plan, findings = batch_plan(
        conversion.world_size,
        recipe["per_device_train_batch_size"],
        recipe["gradient_accumulation_steps"],
        recipe["num_generations"],
        steps_per_generation=recipe.get("steps_per_generation"),
    )
    if not conversion.lossy:  # a faithful conversion is one TRL starts with: whole groups in every rollout
        assert plan is not None and findings == [], findings
        assert plan.completions_per_round == rollout * n and plan.completions_per_step == update * n


@pytest.mark.parametrize(
    "extra, expected",
    [
        (  # verl refuses gae, and a key is misspelt: the misspelt key showed only once gae was fixed
            "algorithm.adv_estimator=gae actor_rollout_ref.actor.optm.lr=1e-5",
            ["adv_estimator=gae: PPO with a learned value function", "did you mean actor_rollout_ref.actor.optim.lr?"],
        ),
        (  # a misspelt key and a recipe the planner refuses (vLLM's tensor-parallel size 3 on 8 GPUs)
            "actor_rollout_ref.actor.optm.lr=1e-5 actor_rollout_ref.rollout.name=vllm "
            "actor_rollout_ref.rollout.tensor_model_parallel_size=3",
            [
                "did you mean actor_rollout_ref.actor.optim.lr?",
                "the recipe would not start: [vllm_tensor_parallel_size]",
            ],
        ),
    ],
    ids=["verl_and_lossy", "lossy_and_planner"],
)
def test_from_verl_reports_every_problem_at_once(tmp_path, from_verl, extra, expected):
    """Issue 54, item 11: one `error:` line per problem, all of them in one run, then one line of what next."""
    given = {token.split("=")[0] for token in extra.split()}
    overrides = " ".join(token for token in GOOD.split() if token.split("=")[0] not in given) + " " + extra
    result, output = from_verl(tmp_path, overrides)
    assert result.returncode == 2 and not output.exists() and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == len(expected), result.stderr
    for line, said in zip(errors, expected, strict=True):
        assert said in line, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("nothing written: ") and last.endswith("fix each as its line says and convert again.")
