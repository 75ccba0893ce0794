"""The recipe planner: batch arithmetic, parameter counts, DeepSpeed memory estimates, and every recipe's checks."""

from __future__ import annotations

import json
import math
import runpy
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch
import yaml

from drgrpo.planning import (
    BUILTIN_MODEL_CONFIGS,
    REFERENCE_SCHEDULES,
    ModelSize,
    batch_plan,
    context_findings,
    count_parameters,
    format_report,
    lora_parameters,
    model_states_memory,
    per_device_multiple,
    plan_recipe,
    read_accelerate_config,
)
from drgrpo.recipe.batch_rules import keep_schedule_fix
from drgrpo.recipe.file import read_header

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
QWEN3_8B = BUILTIN_MODEL_CONFIGS["Qwen/Qwen3-8B"]
QWEN3_8B_PARAMS = 8_190_735_360
QWEN3_8B_EMBEDDING = 151_936 * 4096  # 622,329,856: the largest module


# ----------------------------------------------------------------------------------------------------------------------
# Batch arithmetic
# ----------------------------------------------------------------------------------------------------------------------
def test_batch_plan_of_the_8b_recipes():
    """8 GPUs x 16 x 8 accumulation steps = 1024 completions = 128 prompts x 8, generated once per optimizer step."""
    plan, findings = batch_plan(8, 16, 8, 8)
    assert findings == []
    assert plan.completions_per_step == 1024 and plan.prompts_per_step == 128
    assert plan.completions_per_round == 1024 and plan.prompts_per_round == 128
    assert plan.steps_per_generation == 8 and plan.optimizer_steps_per_round == 1


def test_batch_plan_follows_steps_per_generation_and_num_iterations():
    # Generate for 4 micro-steps, step the optimizer every 2: two optimizer steps per generation round.
    plan, _ = batch_plan(2, 8, 2, 8, steps_per_generation=4)
    assert plan.completions_per_round == 64 and plan.completions_per_step == 32
    assert plan.optimizer_steps_per_round == 2
    # Each round is reused for num_iterations passes: 2 x 4 micro-steps / 2 per step = 4 optimizer steps.
    plan, _ = batch_plan(2, 8, 2, 8, steps_per_generation=4, num_iterations=2)
    assert plan.optimizer_steps_per_round == 4
    # Two generation rounds per optimizer step.
    plan, _ = batch_plan(1, 8, 4, 8, steps_per_generation=2)
    assert plan.optimizer_steps_per_round == Fraction(1, 2)


def test_generation_batch_size_sets_steps_per_generation_for_the_target_world():
    plan, findings = batch_plan(4, 16, 8, 8, generation_batch_size=512)
    assert findings == [] and plan.steps_per_generation == 8 and plan.completions_per_round == 512
    plan, findings = batch_plan(8, 16, 8, 8, generation_batch_size=96)
    assert plan is None and findings[0].key == "generation_batch_size" and "size to 128 " in findings[0].fix
    plan, findings = batch_plan(8, 16, 8, 8, generation_batch_size=1024, steps_per_generation=8)
    assert plan is None and "both set" in findings[0].message


def test_a_cut_group_is_an_error_naming_the_per_device_multiple():
    # 2 processes x 6 = 12 completions, not a multiple of 8: per-device batch must be a multiple of 8/gcd(8, 2) = 4.
    _, findings = batch_plan(2, 6, 1, 8)
    assert [(f.level, f.key) for f in findings] == [("error", "per_device_train_batch_size")]
    assert "multiple of 4" in findings[0].fix


def test_an_optimizer_step_may_hold_part_of_a_group():
    # The round holds whole groups (4 x 2 steps = 8), the optimizer step 4 completions: TRL runs this, each step on a
    # random half of the shuffled rollout (`GRPOTrainer._prepare_inputs`), as the paper's schedule does with 8 steps.
    plan, findings = batch_plan(1, 4, 1, 8, steps_per_generation=2)
    assert findings == [] and plan.optimizer_steps_per_round == 2 and plan.completions_per_step == 4
    shared = "each optimizer step: a random share of the rollout"
    assert shared in format_report(plan_recipe(ROOT / "recipes/qwen2.5_math_1.5b_drgrpo.yaml"))  # 8 steps per rollout
    assert shared not in format_report(plan_recipe(ROOT / "recipes/tiny_drgrpo.yaml"))  # one step per rollout


@pytest.mark.parametrize(
    ("num_generations", "others", "expected"), [(8, 64, 1), (8, 2, 4), (8, 1, 8), (12, 64, 3), (7, 64, 7)]
)
def test_per_device_multiple(num_generations, others, expected):
    assert per_device_multiple(num_generations, others) == expected
    assert (expected * others) % num_generations == 0


# ----------------------------------------------------------------------------------------------------------------------
# Parameter counts
# ----------------------------------------------------------------------------------------------------------------------
def test_qwen3_8b_parameter_count_by_hand():
    """Per layer: q 4096x4096 + k,v 4096x1024 each + o 4096x4096 = 41,943,040; MLP 3 x 4096x12288 = 150,994,944;
    q_norm + k_norm 2 x 128 and two RMSNorms 2 x 4096: 192,946,432 per layer x 36 = 6,946,071,552. Embedding and the
    untied lm_head 2 x 151936 x 4096 = 1,244,659,712, final norm 4096: 8,190,735,360, which is the published
    checkpoint size (16,381,470,720 bytes of bf16) / 2."""
    total, largest = count_parameters(QWEN3_8B)
    assert total == QWEN3_8B_PARAMS == 16_381_470_720 // 2
    assert largest == QWEN3_8B_EMBEDDING


def test_qwen25_math_1_5b_parameter_count_by_hand():
    """Per layer: q 1536x1536 + 1536 bias, k and v 1536x256 + 256 bias each, o 1536x1536: 5,507,072; MLP 3 x
    1536x8960 = 41,287,680; two RMSNorms 3072: 46,797,824 x 28 = 1,310,339,072. Tied embedding 151936 x 1536 =
    233,373,696, final norm 1536: 1,543,714,304."""
    total, largest = count_parameters(BUILTIN_MODEL_CONFIGS["Qwen/Qwen2.5-Math-1.5B"])
    assert total == 1_543_714_304
    assert largest == 151_936 * 1536


TINY_LAYOUTS = [
    {"model_type": "qwen3", "tie_word_embeddings": True, "head_dim": 48},
    {"model_type": "qwen3", "tie_word_embeddings": False, "attention_bias": True},
    {"model_type": "qwen2", "tie_word_embeddings": False},
    {"model_type": "llama", "attention_bias": True, "mlp_bias": True},
    {"model_type": "mistral", "tie_word_embeddings": True},
]


def _meta_model(fields: dict):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**fields)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def _tiny_config(layout: dict) -> dict:
    return {
        "vocab_size": 101,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        **layout,
    }


@pytest.mark.parametrize("layout", TINY_LAYOUTS, ids=lambda layout: "-".join(f"{k}={v}" for k, v in layout.items()))
def test_count_parameters_matches_transformers(layout):
    """The formula against the real module tree transformers builds (on the meta device: no memory, no weights)."""
    config = _tiny_config(layout)
    model = _meta_model(config)
    unique = {id(p): p.numel() for p in model.parameters()}  # a tied lm_head is one parameter
    largest = max(sum(p.numel() for p in module.parameters(recurse=False)) for module in model.modules())
    assert count_parameters(config) == (sum(unique.values()), largest)


@pytest.mark.parametrize("target_modules", [None, "all-linear", ["q_proj", "k_proj", "down_proj"]])
def test_lora_parameters_match_peft(target_modules):
    from peft import LoraConfig, get_peft_model

    config = _tiny_config({"model_type": "qwen3"})
    model = get_peft_model(_meta_model(config), LoraConfig(r=4, target_modules=target_modules, task_type="CAUSAL_LM"))
    peft_count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert lora_parameters(config, 4, target_modules) == peft_count


def test_lora_parameters_of_the_8b_lora_recipe_by_hand():
    """r=64 on all 7 projections: r x (in + out) = 64 x (8192 + 5120 + 5120 + 8192 + 3 x 16384) = 4,849,664 per
    layer x 36 layers = 174,587,904."""
    assert lora_parameters(QWEN3_8B, 64, "all-linear") == 174_587_904
    with pytest.raises(ValueError, match="lm_head"):
        lora_parameters(QWEN3_8B, 64, ["lm_head"])


# GPT-2, outside the Llama layout: learned positions, Conv1D layers, a tied lm_head. By hand: per layer ln_1 and ln_2
# 2 x 128, c_attn 64x192 + 192, attn c_proj 64x64 + 64, mlp c_fc 64x256 + 256 and c_proj 256x64 + 64 = 49,984,
# x 2 layers = 99,968; wte 100x64 = 6,400, wpe 4096x64 = 262,144 (the largest module), ln_f 128: 368,640.
GPT2_FIELDS = {"vocab_size": 100, "n_positions": 4096, "n_embd": 64, "n_layer": 2, "n_head": 4}
GPT2_PARAMS, GPT2_WPE = 368_640, 4096 * 64


def test_another_architecture_is_counted_and_planned(tmp_path):
    """`make plan` on a model outside the four: counts from transformers' GPT-2 (meta device), LoRA through peft's
    own target mapping (its GPT-2 default is c_attn: r x (64 + 192) per layer), model states without a GPU budget.
    With r=64 on c_attn and both c_proj (64x64 in attention, 256x64 in the MLP): 64 x (256 + 128 + 320) x 2 layers."""
    from transformers import GPT2Config

    GPT2Config(**GPT2_FIELDS).to_json_file(tmp_path / "config.json")
    assert count_parameters({"model_type": "gpt2", **GPT2_FIELDS}) == (GPT2_PARAMS, GPT2_WPE)
    assert lora_parameters({"model_type": "gpt2", **GPT2_FIELDS}, 4, None) == 4 * (64 + 192) * 2
    overrides = ["--model_name_or_path", str(tmp_path), "--lora_target_modules", "c_attn", "c_proj"]
    report = plan_recipe(ROOT / "recipes/qwen3_8b_drgrpo_lora.yaml", overrides=overrides)
    assert (report.size.total_params, report.size.largest_layer_params) == (GPT2_PARAMS, GPT2_WPE)
    assert report.size.context_length == 4096 and report.trainable_params == 64 * (256 + 128 + 320) * 2
    assert report.ok and 3 in report.memory and report.budget is None
    assert [f.key for f in report.findings if "Llama layout" in f.message] == ["memory"]
    assert "Model: 0.000B parameters" in format_report(report)


def test_lora_targets_are_read_as_training_reads_them():
    """TRL turns a one-item target list into a string, which peft matches as a regex against the full module name:
    `q_proj` alone targets nothing (training would stop at `get_peft_model`), `.*q_proj` every q_proj."""
    recipe = ROOT / "recipes/qwen3_8b_drgrpo_lora.yaml"
    (finding,) = plan_recipe(recipe, overrides=["--lora_target_modules", "q_proj"]).errors
    assert finding.key == "lora_target_modules" and "'.*q_proj'" in finding.fix
    assert plan_recipe(recipe, overrides=["--lora_target_modules", ".*q_proj"]).trainable_params == 36 * 64 * 8192


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"model_type": "t5"}, "model_type 't5'."),  # no causal LM
        ({"model_type": "phi3", "vocab_size": 100}, "(AssertionError: Padding_idx"),  # its pad_token_id 32000
    ],
)
def test_a_model_transformers_cannot_build_is_an_error(tmp_path, fields, says):
    (tmp_path / "config.json").write_text(json.dumps(fields))
    report = plan_recipe(ROOT / "recipes/qwen3_8b_drgrpo.yaml", overrides=["--model_name_or_path", str(tmp_path)])
    (finding,) = [f for f in report.errors if f.key == "model_name_or_path"]
    assert "builds no causal LM for model_type" in finding.message and says in finding.message
    assert report.size is None


# ----------------------------------------------------------------------------------------------------------------------
# Memory
# ----------------------------------------------------------------------------------------------------------------------
SIZE_8B = ModelSize(QWEN3_8B_PARAMS, QWEN3_8B_EMBEDDING, 40960, "test")


def test_zero3_memory_is_deepspeeds_formula():
    """ZeRO-3, no offload: 4 bytes x largest layer + 18 bytes x params / GPUs
    = 4 x 622,329,856 + 18 x 8,190,735,360 / 8 = 2,489,319,424 + 18,429,154,560 bytes."""
    estimate = model_states_memory(3, SIZE_8B, 8, 1)
    assert estimate.gpu_bytes == 2_489_319_424 + 18_429_154_560
    # Twice the GPUs, half the sharded part.
    assert model_states_memory(3, SIZE_8B, 8, 2).gpu_bytes == 2_489_319_424 + 18_429_154_560 // 2
    # Optimizer and parameters offloaded: only the largest layer's working buffer stays on the GPU.
    offloaded = model_states_memory(3, SIZE_8B, 4, 1, offload_optimizer=True, offload_params=True)
    assert offloaded.gpu_bytes == 2_489_319_424
    assert offloaded.cpu_bytes == int(QWEN3_8B_PARAMS * 18 * 1.5)


def test_zero2_and_ddp_memory():
    """ZeRO-2 keeps the 2-byte weights whole and shards the other 18 bytes; DDP (stage 0) shards nothing: 20 bytes."""
    assert model_states_memory(2, SIZE_8B, 8, 1).gpu_bytes == 2 * QWEN3_8B_PARAMS + 18 * QWEN3_8B_PARAMS // 8
    assert model_states_memory(0, SIZE_8B, 8, 1).gpu_bytes == 20 * QWEN3_8B_PARAMS


def test_lora_memory_adds_the_frozen_weights():
    """Adapters get DeepSpeed's 18 bytes (sharded); the frozen bf16 base 2 bytes, sharded under ZeRO-3 only."""
    adapters = 174_587_904
    zero3 = model_states_memory(3, SIZE_8B, 8, 1, adapter_params=adapters)
    assert zero3.gpu_bytes == 2_489_319_424 + int(18 * adapters / 8) + math.ceil(2 * QWEN3_8B_PARAMS / 8)
    zero2 = model_states_memory(2, SIZE_8B, 8, 1, adapter_params=adapters)
    assert zero2.gpu_bytes == 2 * adapters + int(18 * adapters / 8) + 2 * QWEN3_8B_PARAMS


# ----------------------------------------------------------------------------------------------------------------------
# Context
# ----------------------------------------------------------------------------------------------------------------------
def test_context_fits_or_names_both_fixes():
    assert context_findings(1024, 3000, 4096, None) == []
    (finding,) = context_findings(1200, 3000, 4096, None)
    assert finding.level == "error" and "4200 tokens exceed the model's context (4096)" in finding.message
    assert "max_completion_length to 2896" in finding.fix and "max_prompt_tokens to 1096" in finding.fix
    (finding,) = context_findings(1024, 3000, 40960, 4000)
    assert "vllm_max_model_length (4000)" in finding.message
    (finding,) = context_findings(1024, 3000, 4096, 8192)
    assert finding.key == "vllm_max_model_length" and "at most 4096" in finding.fix
    (finding,) = context_findings(None, 3000, 4096, None)
    assert finding.level == "warning" and finding.key == "max_prompt_tokens"


# ----------------------------------------------------------------------------------------------------------------------
# Accelerate configs and recipe headers
# ----------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "world", "nodes", "stage", "offload"),
    [
        ("zero3", 8, 1, 3, False),
        ("zero3_offload", 4, 1, 3, True),
        ("zero2", 8, 1, 2, False),
        ("ddp", 8, 1, 0, False),
        ("zero3_multinode", 16, 2, 3, False),
        ("zero3_vllm_server", 4, 1, 3, False),
        ("zero3_cpu", 2, 1, 3, False),
    ],
)
def test_accelerate_configs(name, world, nodes, stage, offload):
    from accelerate.commands.config.config_args import load_config_from_file

    path = ROOT / "accelerate_configs" / f"{name}.yaml"
    load_config_from_file(str(path))  # accelerate itself accepts every key
    setup = read_accelerate_config(path)
    assert (setup.world_size, setup.num_nodes, setup.zero_stage) == (world, nodes, stage)
    assert setup.offload_optimizer == setup.offload_params == offload
    assert setup.on_gpu == (name != "zero3_cpu")
    raw = yaml.safe_load(path.read_text())
    if name == "zero3_vllm_server":
        assert str(raw["gpu_ids"]) == "0,1,2,3"


def test_every_recipe_states_its_world_size():
    sizes = {path.name: read_header(path)["world_size"] for path in RECIPES}
    assert None not in sizes.values(), sizes
    assert sizes["qwen3_8b_drgrpo.yaml"] == 8 and sizes["qwen3_8b_drgrpo_vllm_server.yaml"] == 4
    assert sizes["tiny_drgrpo.yaml"] == 1 and read_header(ROOT / "recipes/tiny_drgrpo.yaml")["cpu"]
    # "Oat-Zero-1.5B" in a header is a model name, not a ZeRO stage.
    assert read_header(ROOT / "recipes/qwen2.5_math_1.5b_drgrpo.yaml")["zero_stage"] == 3


# ----------------------------------------------------------------------------------------------------------------------
# Whole recipes
# ----------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda path: path.name)
def test_every_shipped_recipe_passes_at_its_world_size(recipe):
    report = plan_recipe(recipe)
    assert report.ok, format_report(report)
    assert report.setup.world_size == read_header(recipe)["world_size"]
    assert report.batch is not None and report.batch.completions_per_step % report.batch.num_generations == 0
    if report.setup.on_gpu:
        assert report.setup.zero_stage in report.memory  # the memory of the stage it runs with was checked


def test_gpu_recipes_keep_the_papers_schedule():
    """Every Qwen recipe samples 128 prompts x 8 per rollout and steps on 128 completions, at its own world size."""
    for recipe in sorted((ROOT / "recipes").glob("qwen*.yaml")):
        batch = plan_recipe(recipe).batch
        assert (batch.prompts_per_round, batch.num_generations, batch.completions_per_step) == (128, 8, 128), recipe


# The optimizer steps per rollout of every shipped recipe: Oat's 8 for the GPU recipes (the Dr.GRPO paper's
# schedule), 1 for the CPU demos (one step per generated batch).
STEPS_PER_ROLLOUT = {
    "qwen2.5_coder_7b_drgrpo_code.yaml": 8,
    "qwen2.5_math_1.5b_drgrpo.yaml": 8,
    "qwen2.5_math_1.5b_drgrpo_from_verl.yaml": 8,  # verl's train_batch_size 128 / ppo_mini_batch_size 16
    "qwen3_8b_drgrpo.yaml": 8,
    "qwen3_8b_drgrpo_lora.yaml": 8,
    "qwen3_8b_drgrpo_vllm_server.yaml": 8,
    "qwen3_8b_grpo.yaml": 8,
    "smollm2_135m_drgrpo_code.yaml": 1,  # make code-rl: the same schedule as make demo
    "smollm2_135m_drgrpo.yaml": 1,  # make demo: 8 micro-batches of 4 accumulated into one step per rollout of 32
    "smollm2_135m_grpo.yaml": 1,
    "smollm2_135m_drgrpo_tools.yaml": 1,  # make demo-tools: the same schedule as make demo
    "smollm2_135m_drgrpo_tool_rl.yaml": 1,  # make tool-rl: both arms, the same schedule as make demo
    "smollm2_135m_long_drgrpo.yaml": 1,  # make bias-real: 4 micro-batches of 4 into one step per rollout of 16
    "smollm2_135m_long_grpo.yaml": 1,
    "smollm2_135m_long_grpo_constant_loss.yaml": 1,  # make compare's smollm2-long-ablation, the same schedule
    "smollm2_135m_long_grpo_no_std.yaml": 1,
    "tiny_bias_drgrpo.yaml": 1,  # make bias: one optimizer step per generation round, like the demo
    "tiny_bias_grpo.yaml": 1,
    "tiny_drgrpo.yaml": 1,
    "tiny_drgrpo_code.yaml": 1,
    "tiny_grpo.yaml": 1,
}


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda path: path.name)
def test_optimizer_steps_per_rollout_of_every_shipped_recipe(recipe):
    assert recipe.name in STEPS_PER_ROLLOUT, f"pin the optimizer steps per rollout of {recipe.name} here"
    report = plan_recipe(recipe)
    expected = STEPS_PER_ROLLOUT[recipe.name]
    assert report.batch.optimizer_steps_per_round == expected
    assert f"optimizer steps per rollout: {expected} " in format_report(report)


def test_reproduction_recipe_prints_the_papers_schedule_beside_ours():
    report = plan_recipe(ROOT / "recipes/qwen2.5_math_1.5b_drgrpo.yaml")
    assert report.reference is REFERENCE_SCHEDULES["Oat-Zero-1.5B"]
    assert not [f for f in report.findings if f.key == "schedule"]
    text = format_report(report)
    assert "Schedule beside the paper's run, Oat-Zero-1.5B" in text and "<- differs" not in text
    # Each row: ours, then the paper's.
    assert schedule_row(text, "prompts x samples per rollout") == ["128", "x", "8", "128", "x", "8"]
    assert schedule_row(text, "completions per optimizer step") == ["128", "128"]
    assert schedule_row(text, "optimizer steps per rollout") == ["8", "8"]
    assert schedule_row(text, "passes over a rollout") == ["1", "1"]
    # The recipe's former schedule: one optimizer step per rollout of 1024 completions.
    old = plan_recipe(ROOT / "recipes/qwen2.5_math_1.5b_drgrpo.yaml", overrides=["--gradient_accumulation_steps", "8"])
    (warning,) = [f for f in old.findings if f.key == "schedule"]
    assert "completions per optimizer step 1024 (paper 128)" in warning.message
    assert "optimizer steps per rollout 1 (paper 8)" in warning.message
    assert "--gradient_accumulation_steps 1 --steps_per_generation 8" in warning.fix
    assert schedule_row(format_report(old), "optimizer steps per rollout") == ["1", "8", "<-", "differs"]
    # Only recipes that name a run get the comparison.
    assert plan_recipe(ROOT / "recipes/qwen3_8b_drgrpo.yaml").reference is None


def schedule_row(text: str, label: str) -> list[str]:
    """The words after `label` on its row of the schedule table."""
    (line,) = [line for line in text.splitlines() if line.startswith(f"  {label} ")]
    return line[len(label) + 2 :].split()


def test_reference_schedule_and_header():
    oat = REFERENCE_SCHEDULES["Oat-Zero-1.5B"]
    assert (oat.completions_per_rollout, oat.completions_per_step, oat.optimizer_steps_per_rollout) == (1024, 128, 8)
    assert read_header(ROOT / "recipes/qwen2.5_math_1.5b_drgrpo.yaml")["reproduces"] == "Oat-Zero-1.5B"
    assert read_header(ROOT / "recipes/qwen3_8b_drgrpo.yaml")["reproduces"] is None


def test_keep_schedule_fix_by_hand():
    # 8 -> 2 processes, micro-batch 16: 128 / (16 x 2) = 4 accumulation steps, 1024 / 32 = 32 generation steps.
    assert keep_schedule_fix(16, 128, 1024, 2, num_generations=8).endswith(
        "--gradient_accumulation_steps 4 --steps_per_generation 32."
    )
    # 8 -> 16: 128 per step needs 8 per process: micro-batch 8, 1 step; 1024 / (8 x 16) = 8 generation steps.
    assert keep_schedule_fix(16, 128, 1024, 16, num_generations=8).endswith(
        "--per_device_train_batch_size 8 --gradient_accumulation_steps 1 --steps_per_generation 8."
    )
    # 128 per step over 3 processes cannot be whole. Whole groups on every process need multiples of lcm(3, 8) = 24:
    # 120 (micro-batch 10: 30 per micro-step, 4 of them; 960 / 30 = 32) or 144 (16: 48, 3; 1152 / 48 = 24), each
    # with 8 optimizer steps per rollout as written.
    assert keep_schedule_fix(16, 128, 1024, 3, num_generations=8) == (
        "the recipe's schedule (128 completions per optimizer step, 1024 per rollout) cannot be kept at 3 processes "
        "(128 is not a multiple of 3 processes); the nearest that fit, with the same optimizer steps per rollout: "
        "120 per step and 960 per rollout (--per_device_train_batch_size 10 --gradient_accumulation_steps 4 "
        "--steps_per_generation 32) or 144 per step and 1152 per rollout (--gradient_accumulation_steps 3 "
        "--steps_per_generation 24)."
    )


def read_header_lines(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line + "\n")
    return "".join(lines)


def _broken(tmp_path: Path, source: str, **changes) -> Path:
    """A copy of a shipped recipe (header comment kept) with some keys changed (None: removed)."""
    text = (ROOT / "recipes" / source).read_text()
    header = read_header_lines(text)
    values = yaml.safe_load(text)
    for key, value in changes.items():
        if value is None:
            values.pop(key, None)
        else:
            values[key] = value
    path = tmp_path / f"broken_{source}"
    path.write_text(header + yaml.safe_dump(values, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("source", "changes", "key", "fix"),
    [
        ("qwen3_8b_drgrpo.yaml", {"num_generations": 12}, "per_device_train_batch_size", "multiple of 3"),
        ("qwen2.5_math_1.5b_drgrpo.yaml", {"max_completion_length": 4000}, "max_completion_length", "to 3072"),
        (
            "qwen3_8b_drgrpo.yaml",
            {"vllm_importance_sampling_correction": None},
            "vllm_importance_sampling_correction",
            "explicitly",
        ),
        ("qwen3_8b_drgrpo.yaml", {"ds3_gather_for_generation": False}, "ds3_gather_for_generation", "true"),
        ("qwen3_8b_drgrpo.yaml", {"vllm_tensor_parallel_size": 3}, "vllm_tensor_parallel_size", "divisor of 8"),
        ("qwen3_8b_drgrpo.yaml", {"vllm_gpu_memory_utilization": 0.8}, "memory", "vllm_gpu_memory_utilization"),
        (
            "qwen3_8b_drgrpo.yaml",
            {"generation_batch_size": 96, "steps_per_generation": None},
            "generation_batch_size",
            "size to 128",
        ),
    ],
)
def test_broken_recipes_are_rejected_with_the_fix(tmp_path, source, changes, key, fix):
    report = plan_recipe(_broken(tmp_path, source, **changes))
    assert not report.ok
    matching = [f for f in report.errors if f.key == key]
    assert matching, format_report(report)
    assert fix in matching[0].fix, matching[0]


def test_a_full_8b_fine_tune_does_not_fit_two_gpus():
    """ZeRO-3 on 2 GPUs: 4 x 622M + 18 x 8.19B / 2 bytes = 76 GB of model states: with 24 GiB of colocated vLLM
    generation does not fit, and neither does training with 33.7 GiB of activations."""
    report = plan_recipe(ROOT / "recipes/qwen3_8b_drgrpo.yaml", num_processes=2)
    assert [f.key for f in report.errors] == ["memory", "memory"]
    assert report.errors[0].message.startswith("Generation needs 95.0 GiB per GPU (ZeRO-3 model states 71.0 GiB")
    assert report.errors[1].message.startswith("Training needs 104.6 GiB per GPU (ZeRO-3 model states 71.0 GiB")
    assert any(f.key == "world size" and f.level == "warning" for f in report.findings)
    # ...while the LoRA variant does: 2 bytes per frozen parameter instead of 18 + 2.
    assert plan_recipe(ROOT / "recipes/qwen3_8b_drgrpo_lora.yaml", num_processes=2).ok


def test_two_nodes_keep_the_schedule_only_with_the_fix():
    recipe = ROOT / "recipes/qwen3_8b_drgrpo.yaml"
    doubled = plan_recipe(recipe, num_processes=16)
    assert doubled.ok and doubled.batch.completions_per_step == 256 and doubled.setup.num_nodes == 2
    (warning,) = [f for f in doubled.findings if f.key == "world size"]
    assert "128 completions per optimizer step, 1024 per rollout" in warning.message
    assert "--per_device_train_batch_size 8 --gradient_accumulation_steps 1 --steps_per_generation 8" in warning.fix
    kept = plan_recipe(recipe, num_processes=16, overrides=["--per_device_train_batch_size", "8"])
    assert kept.ok and (kept.batch.completions_per_step, kept.batch.completions_per_round) == (128, 1024)
    assert not [f for f in kept.findings if f.key == "world size"]
    # Keeping the step but not the rollout still warns: the schedule per rollout changed.
    half = plan_recipe(recipe, num_processes=16, overrides=["--per_device_train_batch_size", "8",
                                                          "--steps_per_generation", "16"])  # fmt: skip
    assert [f for f in half.findings if f.key == "world size"]


def test_lora_recipe_on_two_gpus_keeps_the_schedule_with_its_stated_overrides():
    recipe = ROOT / "recipes/qwen3_8b_drgrpo_lora.yaml"
    overrides = ["--gradient_accumulation_steps", "4", "--steps_per_generation", "32"]  # as its header says
    report = plan_recipe(recipe, num_processes=2, overrides=overrides)
    assert report.ok and not [f for f in report.findings if f.key == "world size"]
    assert (report.batch.completions_per_step, report.batch.optimizer_steps_per_round) == (128, 8)


def test_ddp_for_the_8b_recipe_is_rejected():
    report = plan_recipe(ROOT / "recipes/qwen3_8b_drgrpo.yaml", accelerate_config=ROOT / "accelerate_configs/ddp.yaml")
    (error,) = report.errors
    assert error.key == "memory" and "DDP model states need 152.6 GiB" in error.message
    assert "zero3.yaml" in error.fix


def test_unknown_keys_and_missing_world_size_are_errors(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("# World size: 8 GPUs\nmodel_name_or_path: Qwen/Qwen3-8B\nnum_generatons: 8\n")
    with pytest.raises(ValueError, match="num_generations"):
        plan_recipe(recipe)
    recipe.write_text("model_name_or_path: Qwen/Qwen3-8B\n")
    with pytest.raises(ValueError, match="World size"):
        plan_recipe(recipe)


def _run_plan_script(monkeypatch, capsys, *argv: str) -> tuple[int, str]:
    """scripts/plan.py in this process (as `python scripts/plan.py ARGV`): its exit code and what it printed."""
    monkeypatch.setattr(sys, "argv", ["scripts/plan.py", *argv])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(ROOT / "scripts/plan.py"), run_name="__main__")
    return exit_info.value.code, capsys.readouterr().out


def test_plan_script_exit_codes(monkeypatch, capsys):
    code, out = _run_plan_script(monkeypatch, capsys, "recipes/qwen3_8b_drgrpo.yaml")
    assert code == 0, out
    assert "128 prompts x 8 = 1024 completions" in out and out.rstrip().endswith("OK")
    code, out = _run_plan_script(monkeypatch, capsys, "recipes/qwen3_8b_drgrpo.yaml", "--", "--num_generations", "12")
    assert code == 1
    assert "ERROR [per_device_train_batch_size]" in out and "multiple of 3" in out


def test_plan_script_prints_vllm_serve_args(monkeypatch, capsys):
    code, out = _run_plan_script(monkeypatch, capsys, "recipes/qwen3_8b_drgrpo_vllm_server.yaml", "--vllm_serve_args")
    assert code == 0
    # max_model_len = max_prompt_tokens 1024 + max_completion_length 3000
    assert out.split() == [
        "--model", "Qwen/Qwen3-8B", "--port", "8000", "--dtype", "bfloat16", "--max_model_len", "4024"
    ]  # fmt: skip


def test_an_explicit_null_generation_batch_size_is_unset_for_the_planner_too(tmp_path):
    # The planner and --show_prompts/--explain share one set of pre-flight stand-ins (drgrpo.recipe.cli): a recipe
    # saying `generation_batch_size: null` beside steps_per_generation gets steps_per_generation's stand-in only;
    # the planner's former copy tested `in values` and set both, which TRL refuses.
    path = _broken(tmp_path, "qwen3_8b_drgrpo.yaml")
    path.write_text(path.read_text() + "generation_batch_size: null\n")
    report = plan_recipe(path)
    assert report.batch.steps_per_generation == 8 and not [f for f in report.findings if f.level == "error"]


def test_a_model_the_planner_cannot_size_is_a_warning_and_the_batch_checks_still_run(run_script, tmp_path):
    """Issue 54, item 12: a verl script naming Qwen/Qwen2.5-3B-Instruct converted, then `make plan` stopped with ERROR
    (the meta-device count needs a config.json); a model the planner cannot size here is a warning, its batch,
    family and generation checks still run, and a broken batch is still refused."""
    recipe, flags = "recipes/qwen3_8b_drgrpo.yaml", ["--model_name_or_path", "Qwen/Qwen2.5-3B-Instruct"]
    result = run_script("scripts/plan.py", recipe, "--", *flags)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "per optimizer step:    16 prompts x 8 = 128 completions" in result.stdout
    assert "WARNING [model_name_or_path] Cannot size 'Qwen/Qwen2.5-3B-Instruct' here" in result.stdout
    assert "`hf download Qwen/Qwen2.5-3B-Instruct config.json`" in result.stdout and "ERROR" not in result.stdout
    broken = run_script("scripts/plan.py", recipe, "--", *flags, "--num_generations", "12")
    assert broken.returncode != 0 and "ERROR [per_device_train_batch_size]" in broken.stdout


def test_a_hub_model_whose_config_is_cached_is_sized_from_the_cache(tmp_path, tiny_model_path, monkeypatch):
    """The planner reads the Hugging Face cache (never the network): a hub model's cached config.json sizes it."""
    from huggingface_hub import constants

    snapshot = tmp_path / "hub" / "models--someone--tiny" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((tiny_model_path / "config.json").read_text())
    (tmp_path / "hub" / "models--someone--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--tiny" / "refs" / "main").write_text("0123abc")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    report = plan_recipe(ROOT / "recipes/qwen3_8b_drgrpo.yaml", overrides=["--model_name_or_path", "someone/tiny"])
    assert report.size is not None and report.size.source == str(snapshot / "config.json")
    assert not [f for f in report.findings if f.key == "model_name_or_path"]
