"""Float32 master weights for a half-precision full fine-tune without DeepSpeed (drgrpo/run/precision.py)."""

from __future__ import annotations

import logging

import pytest
import torch
from safetensors import safe_open

from drgrpo.run.precision import keep_float32_master_weights, needs_master_weights, restore_dtype


def test_a_1e6_update_rounds_away_in_bfloat16_only():
    """Why: Adam at learning_rate 1e-6 moves a weight by about 1e-6 of itself; bf16 keeps 8 significant bits."""
    weight = torch.tensor([0.02, -0.5, 1.3])
    update = 1e-6 * weight.abs()
    assert torch.equal((weight.bfloat16() + update.bfloat16()).float(), weight.bfloat16().float())
    assert not torch.equal(weight + update, weight)


def test_needs_master_weights():
    assert needs_master_weights("bfloat16", deepspeed=False) and needs_master_weights("torch.float16", deepspeed=False)
    assert not needs_master_weights("bfloat16", deepspeed=True)  # DeepSpeed keeps float32 copies itself
    assert not needs_master_weights("float32", deepspeed=False) and not needs_master_weights(None, deepspeed=False)


def test_trained_half_parameters_become_float32_and_go_back(caplog):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)).to(torch.bfloat16)
    model[1].weight.requires_grad_(False)  # frozen: stays bf16
    with caplog.at_level(logging.WARNING, logger="drgrpo.run.precision"):
        cast = keep_float32_master_weights(model, deepspeed=False)
    assert cast == (torch.bfloat16, ["0.weight", "0.bias", "1.bias"], True)
    assert [p.dtype for p in model.parameters()] == [torch.float32, torch.float32, torch.bfloat16, torch.float32]
    assert "master weights: 22 trained parameters are bfloat16" in caplog.text
    restore_dtype(model, cast)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert keep_float32_master_weights(model, deepspeed=True) is None
    assert keep_float32_master_weights(model.float(), deepspeed=False) is None


def test_the_reference_follows_the_trained_copy_and_fsdp_is_left_to_accelerate(caplog):
    def bf16_model() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)).to(torch.bfloat16)

    model, reference = bf16_model(), bf16_model().requires_grad_(False)  # TRL's reference: frozen, same dtype
    with caplog.at_level(logging.WARNING, logger="drgrpo.run.precision"):
        cast = keep_float32_master_weights(model, deepspeed=False, reference=reference)
    assert {p.dtype for p in reference.parameters()} == {
        torch.float32
    } and "and so does the reference model" in caplog.text
    restore_dtype(model, cast)  # the final save: the trained copy only
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    # FSDP with mixed precision: accelerate upcasts the trained parameters itself when it wraps the model.
    model = bf16_model()
    assert not needs_master_weights("bfloat16", deepspeed=False, fsdp=True, mixed_precision="bf16")
    assert keep_float32_master_weights(model, deepspeed=False, fsdp=True, mixed_precision="bf16") is None
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    # FSDP without mixed precision: cast here, but nothing can be put back through the wrapper, and the reference,
    # which TRL has already wrapped, cannot be reached: said in a warning.
    reference = bf16_model().requires_grad_(False)
    with caplog.at_level(logging.WARNING, logger="drgrpo.run.precision"):
        cast = keep_float32_master_weights(model, deepspeed=False, fsdp=True, mixed_precision="no", reference=reference)
    assert cast is not None and cast[2] is False
    assert {p.dtype for p in reference.parameters()} == {
        torch.bfloat16
    } and "KL before any update is not 0" in caplog.text
    restore_dtype(torch.nn.Linear(1, 1), cast)  # the wrapper's renamed parameters: no KeyError, nothing to do
    assert {p.dtype for p in model.parameters()} == {torch.float32}


@pytest.mark.slow
def test_bf16_tiny_run_trains_float32_and_saves_bf16(tiny_model_path, addition_data, tmp_path, run_script):
    """scripts/train.py in one process (no DeepSpeed) with dtype bfloat16: the checkpoint holds float32 master
    weights, which moved; the final model is bf16, as loaded. Run in this process (the `run_script` fixture)."""
    output_dir = tmp_path / "run"
    args = [
        "recipes/tiny_drgrpo.yaml",
        "--model_name_or_path", str(tiny_model_path), "--dtype", "bfloat16",
        "--dataset_path", str(addition_data["train"]), "--output_dir", str(output_dir),
        "--max_steps", "2", "--logging_steps", "1", "--save_strategy", "steps", "--save_steps", "2",
        "--per_device_train_batch_size", "16", "--num_generations", "4", "--learning_rate", "1e-6",
        "--reward_funcs", "accuracy", "tests/fixtures/digit_share.py:digit_share",
    ]  # fmt: skip
    result = run_script("scripts/train.py", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "master weights:" in result.stderr and "are bfloat16" in result.stderr

    def tensors(path):
        with safe_open(str(path), "pt") as file:
            return {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118

    checkpoint = tensors(output_dir / "checkpoint-2" / "model.safetensors")
    final = tensors(output_dir / "model.safetensors")
    original = tensors(tiny_model_path / "model.safetensors")
    assert {t.dtype for t in checkpoint.values()} == {torch.float32}
    assert {t.dtype for t in final.values()} == {torch.bfloat16}
    moved = [name for name in checkpoint if not torch.equal(checkpoint[name], original[name].bfloat16().float())]
    assert moved, "two steps at lr 1e-6 moved no float32 master weight"


def test_kl_before_any_update_is_zero_with_bf16_weights_and_float32_masters(
    tiny_model_path, addition_data, tmp_path, monkeypatch
):
    """Issue 30: bf16 weights, bf16 autocast, one process, beta > 0. The trained copy trains float32 master weights;
    TRL's reference was built in bf16, so before any update the two disagreed (tiny model: max per-token k3 3e-5). The
    reference follows the trained copy's precision: the KL the loss sees at step 0 is at most 1e-6 per token."""
    from drgrpo.algorithm.trainer import DrGRPOTrainer
    from drgrpo.recipe.cli import parse_recipe
    from drgrpo.run.training import train

    first: dict = {}
    compute_loss = DrGRPOTrainer._compute_loss

    def record_first_kl(self, model, inputs):
        if not first:  # the first micro-step: no update yet; the policy's log-probs as the loss computes them
            with torch.no_grad():
                ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
                mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
                logps = self._get_per_token_logps_and_entropies(model, ids, mask, inputs["completion_ids"].size(1))[0]
            delta = (inputs["ref_per_token_logps"] - logps)[inputs["completion_mask"].bool()]
            first["k3"] = torch.exp(delta) - delta - 1  # TRL's per-token KL in the loss
            first["dtypes"] = {p.dtype for p in (*self.model.parameters(), *self.ref_model.parameters())}
        return compute_loss(self, model, inputs)

    monkeypatch.setattr(DrGRPOTrainer, "_compute_loss", record_first_kl)
    argv = [
        "recipes/tiny_grpo.yaml", "--model_name_or_path", str(tiny_model_path), "--dtype", "bfloat16",
        "--bf16", "true", "--dataset_path", str(addition_data["train"]), "--output_dir", str(tmp_path / "run"),
        "--max_steps", "1", "--beta", "0.04", "--per_device_train_batch_size", "16", "--num_generations", "4",
        "--save_strategy", "no",
    ]  # fmt: skip
    train(*parse_recipe(argv))
    assert first["dtypes"] == {torch.float32}  # master weights, and the reference with them
    assert first["k3"].numel() > 0 and first["k3"].abs().max().item() <= 1e-6
