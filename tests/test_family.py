"""The family card: every shipped recipe has one (`--explain` prints it after training's checks, without loading a
model: tests/test_explain_checks.py); its lines follow the resolved config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.family import family_card
from drgrpo.recipe.preflight import explain_recipe, recipe_card

RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
QUESTIONS = ("advantage", "ratio", "loss", "log-probs", "KL", "staleness")


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_every_shipped_recipe_has_a_card(recipe):
    # The card alone: --explain runs training's checks first, which need each recipe's data (built by its demo).
    text = recipe_card([str(recipe)])
    lines = text.splitlines()
    assert lines[0].startswith("algorithm: ") and lines[1].startswith("GRPO family card: ")
    # A recipe with the Python tool has one more line: its multi-turn rollout (what max_completion_length counts).
    rollout = ["rollout"] if yaml.safe_load(recipe.read_text()).get("python_tool") else []
    assert [line.split()[0] for line in lines[2:]] == [*QUESTIONS, *rollout]


def test_explain_refuses_a_missing_model_folder_as_training_does(tmp_path, run_script):
    """Before issue 54 --explain printed the card for a model folder that does not exist; training refused it."""
    missing = tmp_path / "no-such-model"
    result = run_script(
        "scripts/train.py", "recipes/tiny_drgrpo.yaml", "--model_name_or_path", str(missing), "--explain"
    )
    assert result.returncode == 2 and "GRPO family card" not in result.stdout
    assert f"error: model_name_or_path {str(missing)!r}: no such model folder." in result.stderr
    assert not Path(missing).exists()


def card(tmp_path, **settings) -> dict[str, str]:
    config = DrGRPOConfig(output_dir=str(tmp_path), use_cpu=True, **settings)
    lines = family_card(config).splitlines()
    return {"name": lines[0], **{line.split()[0]: line.split(None, 1)[1] for line in lines[1:]}}


def test_card_follows_the_config(tmp_path):
    grpo = card(tmp_path, num_generations=8, per_device_train_batch_size=8, epsilon_high=0.28, beta=0.04)
    assert grpo["name"] == "GRPO family card: GRPO"
    assert "group mean; divided by the group std (ddof=1, eps=0.0001)" in grpo["advantage"]
    assert "clip [1 - 0.2, 1 + 0.28]" in grpo["ratio"]
    assert grpo["KL"] == "in the loss, beta=0.04 (TRL k3); reference model loaded"

    family = card(
        tmp_path, dr_grpo=True, num_generations=4, per_device_train_batch_size=8, max_completion_length=100,
        advantage_estimator="leave_one_out", kl_in_reward_coef=0.001, kl_estimator="low_var_kl",
        dynamic_sampling=True, importance_sampling_level="sequence", gradient_accumulation_steps=2,
        steps_per_generation=4,
    )  # fmt: skip
    assert family["name"] == "GRPO family card: Dr.GRPO + leave-one-out + KL in the reward + dynamic sampling"
    assert "baseline: leave-one-out mean of the other completions; not divided by any std" in family["advantage"]
    assert family["ratio"].startswith("sequence-level")
    assert "(B x 100), B = 8" in family["loss"]
    assert "pi_old recomputed by the trainer" in family["log-probs"]
    assert family["KL"] == "in the reward, coef=0.001, estimator low_var_kl (summed); reference model loaded"
    assert "steps_per_generation=4" in family["staleness"] and "up to 4 generation rounds" in family["staleness"]


def test_explain_on_a_cpu_node_uses_the_recipes_own_batch_for_its_target_world_size():
    # Valid at the recipe's 8 GPUs (8 x 1 x 4 = 32 completions per round, whole groups of 8), not at one process:
    # --explain inspects the recipe, so it must not apply TRL's batch check at this machine's world size, and its
    # card must show the recipe's values, not the pre-flight stand-ins.
    argv = ["recipes/qwen3_8b_drgrpo.yaml", "--per_device_train_batch_size", "1", "--steps_per_generation", "4"]
    text = explain_recipe([str(ROOT / argv[0]), *argv[1:], "--explain"])
    rows = {line.split()[0]: line.split(None, 1)[1] for line in text.splitlines()[2:]}
    assert rows["staleness"].startswith("num_iterations=1, steps_per_generation=4 (gradient_accumulation_steps=1)")
    assert "B = 1" in rows["loss"]
    assert "generation_batch_size" not in text


def test_explain_without_steps_per_generation_uses_the_recipes_accumulation():
    text = recipe_card([str(ROOT / "recipes/tiny_grpo.yaml"), "--gradient_accumulation_steps", "3"])
    assert "steps_per_generation=3 (gradient_accumulation_steps=3)" in text


def test_explain_says_when_the_ratio_is_one_and_the_vllm_mismatch_uncorrected(run_script):
    """From the user's side (issue 30): vLLM without its importance-sampling correction, and
    gradient_accumulation_steps == steps_per_generation, so TRL never recomputes pi_old. The ratio is then exactly 1
    and nothing corrects vLLM's sampling against the trainer's probabilities; the card must say both."""
    result = run_script(
        "scripts/train.py", "recipes/qwen2.5_math_1.5b_drgrpo.yaml", "--gradient_accumulation_steps", "8", "--explain"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    line = next(line for line in result.stdout.splitlines() if line.split()[:1] == ["log-probs"])
    assert "sampled by vLLM" in line
    assert "pi_old = pi_theta (not recomputed: the ratio is exactly 1)" in line
    assert "vLLM-vs-trainer mismatch not corrected" in line


def test_log_probs_line_follows_trls_rule_for_recomputing_pi_old(tmp_path):
    base = {"num_generations": 8, "per_device_train_batch_size": 8, "use_vllm": True}
    # Aligned, IS correction on: TRL recomputes pi_old for the correction, which corrects the mismatch.
    on = card(
        tmp_path, **base, vllm_importance_sampling_correction=True, vllm_importance_sampling_mode="token_truncate"
    )
    assert "pi_old recomputed by the trainer" in on["log-probs"]
    assert "mismatch corrected by IS token_truncate (cap 3.0)" in on["log-probs"]
    # Misaligned (1 accumulation step, 4 per generation), no correction: recomputed, the mismatch stays.
    stale = card(
        tmp_path, **base, vllm_importance_sampling_correction=False, gradient_accumulation_steps=1,
        steps_per_generation=4,
    )  # fmt: skip
    assert "pi_old recomputed by the trainer" in stale["log-probs"] and "mismatch not corrected" in stale["log-probs"]
    aligned = card(tmp_path, **base, vllm_importance_sampling_correction=False, num_iterations=2,
                   gradient_accumulation_steps=4, steps_per_generation=2)  # fmt: skip
    assert "the ratio is exactly 1" in aligned["log-probs"] and "mismatch not corrected" in aligned["log-probs"]


def test_a_recipe_without_the_correction_mode_gets_token_truncate_on_the_cpu_engine(
    tmp_path, tiny_model_path, addition_data, run_script
):
    """Issue 54, item 7: every shipped CPU recipe sets token_truncate; a user's own recipe that leaves the mode unset
    got TRL's sequence_mask (a length bias the card names) silently. Now the CPU engine takes token_truncate, and the
    card says so, once; a mode the recipe sets is kept."""
    from drgrpo.recipe.cli import parse_recipe

    shipped = (ROOT / "recipes/tiny_drgrpo.yaml").read_text().splitlines()
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("\n".join(line for line in shipped if "vllm_importance_sampling" not in line) + "\n")
    flags = ["--model_name_or_path", str(tiny_model_path), "--dataset_path", str(addition_data["train"])]
    _, training_args, _ = parse_recipe([str(recipe), *flags])  # as training parses it
    assert (training_args.engine, training_args.vllm_importance_sampling_mode) == ("cpu", "token_truncate")
    result = run_script("scripts/train.py", str(recipe), *flags, "--explain")
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if line.split()[:1] == ["log-probs"]]
    said = "corrected by IS token_truncate (cap 3.0; token_truncate: the CPU engine's default, "
    assert said + "vllm_importance_sampling_mode unset)" in line and result.stdout.count("unset") == 1
    assert "length bias" not in line
    _, kept, _ = parse_recipe([str(recipe), *flags, "--vllm_importance_sampling_mode", "sequence_mask"])
    assert kept.vllm_importance_sampling_mode == "sequence_mask" and "unset" not in family_card(kept)
