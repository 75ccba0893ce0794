"""The planner's GPU memory beyond model states: activations (checked against the tensors transformers saves), colocated
vLLM's KV cache (hand-computed), the two phases, and docs/scaling.md's hand calculation for the three GPU recipes."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from conftest import ROOT

from drgrpo.planning import format_report, plan_recipe
from drgrpo.planning.activations import HEAD_TILE_TOKENS, HEAD_TILE_VOCAB, layer_bytes_per_token, training_activations
from drgrpo.planning.gpu_budget import GpuBudget
from drgrpo.planning.kv_cache import TRL_MAX_NUM_BATCHED_TOKENS, kv_bytes_per_token
from drgrpo.planning.memory import GIB
from drgrpo.planning.model_size import BUILTIN_MODEL_CONFIGS, with_defaults

GPU_RECIPES = {
    "Qwen3-8B": "qwen3_8b_drgrpo.yaml",
    "Coder-7B": "qwen2.5_coder_7b_drgrpo_code.yaml",
    "Math-1.5B": "qwen2.5_math_1.5b_drgrpo.yaml",
}
TINY = {"vocab_size": 1000, "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False}  # fmt: skip


def saved_bytes(model, **inputs) -> int:
    """Bytes of the distinct tensors autograd saves for backward in one forward (parameters excluded)."""
    storages: dict[int, int] = {}

    def pack(tensor):
        storages.setdefault(tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(**inputs)
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(size for pointer, size in storages.items() if pointer not in parameters)


@pytest.mark.parametrize("model_type", ["qwen3", "qwen2"])
@pytest.mark.parametrize("padded", [True, False])
def test_activation_formula_is_what_transformers_saves(model_type, padded):
    """The backbone's saved tensors (bf16, SDPA), byte for byte, on a tiny model of each family."""
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {**TINY, **({"head_dim": 16} if model_type == "qwen3" else {})}
    config = AutoConfig.for_model(model_type, attn_implementation="sdpa", **fields)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16).train()
    batch, length = 2, 32
    ids = torch.randint(0, 1000, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    if padded:
        mask[0, :3] = 0  # left padding, as GRPO batches have: transformers then repeats k/v and SDPA gets a mask
    measured = saved_bytes(model.model, input_ids=ids, attention_mask=mask, use_cache=False)
    full = with_defaults({"model_type": model_type, **fields})
    estimate = training_activations(full, batch, length, 0, padded=padded)
    assert estimate.all_layers + estimate.shared == measured
    mask = 2 * batch * length**2 if padded else 0
    assert estimate.one_layer == batch * length * layer_bytes_per_token(full, padded=padded) + mask


def test_fused_head_saved_tensors_match():
    """TRL's fused LM head (CPU path: every position scored) saves the scored hidden states, targets, log-normalizer,
    entropy and two masks: the formula's head term, up to an 8-byte scalar."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    config = AutoConfig.for_model("qwen3", attn_implementation="sdpa", head_dim=16, **TINY)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16).train()
    batch, length = 2, 32
    ids = torch.randint(0, 1000, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    backbone = saved_bytes(model.model, input_ids=ids, attention_mask=mask, use_cache=False)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))  # as DrGRPOTrainer's parent does
    labels = ids.clone()
    labels[:, :12] = -100
    with_head = saved_bytes(model, input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    scored = batch * (length - 1)  # without Triton, TRL's kernel scores every shifted position
    full = with_defaults({"model_type": "qwen3", "head_dim": 16, **TINY})
    estimate = training_activations(full, batch, length, scored)
    assert 0 <= (with_head - backbone) - estimate.head_saved <= 8


def test_trl_constants_the_planner_uses():
    from trl.generation import vllm_generation
    from trl.kernels import chunked_logprob
    from trl.trainer import grpo_trainer, utils

    assert (HEAD_TILE_TOKENS, HEAD_TILE_VOCAB) == (chunked_logprob.TOKEN_CHUNK_SIZE, utils._CHUNKED_LOGPROB_CHUNK_SIZE)
    assert f"max_num_batched_tokens={TRL_MAX_NUM_BATCHED_TOKENS}" in inspect.getsource(vllm_generation)
    source = re.sub(r"\s+", " ", inspect.getsource(grpo_trainer))  # TRL's max_num_seqs, what the planner counts
    assert (
        "max_num_seqs=args.per_device_train_batch_size * args.vllm_tensor_parallel_size * args.steps_per_generation"
        in source
    )
    assert "self.llm.sleep(level=2)" in inspect.getsource(vllm_generation)  # sleep mode frees weights and KV cache
    assert "fused_lm_head=True" in inspect.getsource(grpo_trainer)  # no (batch, seq, vocab) logits


def test_kv_bytes_per_token_hand_computed():
    qwen3 = with_defaults(BUILTIN_MODEL_CONFIGS["Qwen/Qwen3-8B"])
    assert kv_bytes_per_token(qwen3) == 2 * 36 * 8 * 128 * 2 == 147_456
    assert kv_bytes_per_token(qwen3, tensor_parallel=2) == 147_456 // 2  # KV heads split across GPUs
    assert kv_bytes_per_token(qwen3, tensor_parallel=16) == 2 * 36 * 1 * 128 * 2  # replicated: at least one head
    coder = with_defaults(BUILTIN_MODEL_CONFIGS["Qwen/Qwen2.5-Coder-7B-Instruct"])
    assert kv_bytes_per_token(coder) == 2 * 28 * 4 * 128 * 2 == 57_344
    math = with_defaults(BUILTIN_MODEL_CONFIGS["Qwen/Qwen2.5-Math-1.5B"])
    assert kv_bytes_per_token(math) == 2 * 28 * 2 * 128 * 2 == 28_672


def test_8b_at_utilization_0_15_is_refused_with_the_numbers(tmp_path):
    report = plan_recipe(ROOT / "recipes/qwen3_8b_drgrpo.yaml", overrides=["--vllm_gpu_memory_utilization", "0.15"])
    (error,) = report.errors
    assert error.key == "vllm_gpu_memory_utilization"
    assert error.message == (
        "vLLM cannot start: vllm_gpu_memory_utilization 0.15 x 80.0 GiB = 12.0 GiB is less than Qwen/Qwen3-8B's "
        "15.3 GiB of weights per GPU."
    )
    assert "at least 0.22" in error.fix
    # Above the weights but with no room for one 4,096-token sequence: refused too (vLLM would not start either).
    tight_report = plan_recipe(
        ROOT / "recipes/qwen3_8b_drgrpo.yaml", overrides=["--vllm_gpu_memory_utilization", "0.2"]
    )
    (tight,) = tight_report.errors
    assert "leaves 0.0 GiB of KV cache, less than one 4096-token sequence needs (0.6 GiB)" in tight.message


def test_the_shipped_8b_recipe_warns_that_generation_is_kv_bound():
    report = plan_recipe(ROOT / "recipes/qwen3_8b_drgrpo.yaml")
    assert report.ok
    (warning,) = [f for f in report.findings if f.key == "vllm_gpu_memory_utilization"]
    assert warning.level == "warning"
    assert warning.message.startswith(
        "Generation is KV-bound: vLLM's KV cache (7.2 GiB per GPU, 147,456 bytes per token) holds 12 sequences of "
        "4,096 tokens at once, and each engine gets 128 requests per rollout (per_device_train_batch_size 16 x "
        "steps_per_generation 8 x vllm_tensor_parallel_size 1): up to 11 waves"
    )
    assert "vllm_gpu_memory_utilization 1.11, more than the GPU" in warning.fix
    text = format_report(report)
    assert "KV cache 7.2 GiB = 12 sequences of 4,096 tokens (147,456 bytes per token) for 128 requests" in text
    assert "activations with gradient checkpointing 33.7 GiB" in text and "<- this run" in text
    # 30k-token completions: one sequence at a time (and far too many activations to train)
    long = plan_recipe(
        ROOT / "recipes/qwen3_8b_drgrpo.yaml",
        overrides=["--max_completion_length", "30000", "--vllm_max_model_length", "32000"],
    )
    assert "KV cache 7.2 GiB = 1 sequence of 32,000 tokens" in format_report(long)
    assert [error.key for error in long.errors] == ["memory"]
    # The 1.5B recipe's KV cache holds all 128 requests at once: no warning.
    math = plan_recipe(ROOT / "recipes/qwen2.5_math_1.5b_drgrpo.yaml")
    assert not [f for f in math.findings if f.key == "vllm_gpu_memory_utilization"]


def test_sleep_mode_and_checkpointing_change_the_training_peak():
    recipe = ROOT / "recipes/qwen2.5_coder_7b_drgrpo_code.yaml"
    asleep = plan_recipe(recipe).budget
    awake = plan_recipe(recipe, overrides=["--vllm_enable_sleep_mode", "false"])
    assert awake.budget.training_peak == asleep.training_peak + awake.budget.vllm.budget  # vLLM keeps its share
    (error,) = awake.errors  # 61.7 + 28 GiB > 80 GiB
    assert error.key == "memory" and "vLLM awake 28.0 GiB (no sleep mode)" in error.message
    assert "vllm_enable_sleep_mode: true" in error.fix
    unchecked = plan_recipe(recipe, overrides=["--gradient_checkpointing", "false"])
    (error,) = unchecked.errors
    assert "gradient_checkpointing: true (43.7 GiB of activations)" in error.fix
    assert isinstance(asleep, GpuBudget) and asleep.vllm_during_training == 0


def _doc_table(title_row: str) -> dict[str, list[str]]:
    """{term: [Qwen3-8B, Coder-7B, Math-1.5B]} of the docs/scaling.md table whose header row starts `title_row`."""
    text = (ROOT / "docs/scaling.md").read_text()
    section = text[text.index("### Memory, term by term") :]
    rows = {}
    for block in section.split("\n\n"):
        lines = block.strip().splitlines()
        if lines and lines[0].startswith(title_row):
            for line in lines[2:]:
                cells = [cell.strip() for cell in line.strip("|").split("|")]
                rows[cells[0]] = cells[2:]
    return rows


def _gib(value: int) -> str:
    return f"{value / GIB:.2f} GiB"


def test_scaling_doc_hand_calculation_matches_the_planner():
    """Every number of docs/scaling.md's "Memory, term by term" tables is the planner's, and the KV and activation
    terms are recomputed here from the doc's formulas."""
    table = _doc_table("| term | formula |")
    assert len(table) == 17, list(table)
    for column, (name, recipe) in enumerate(GPU_RECIPES.items()):
        report = plan_recipe(ROOT / "recipes" / recipe)
        budget, vllm, acts = report.budget, report.budget.vllm, report.budget.activations
        planner = {
            "model states (ZeRO-3)": _gib(budget.states),
            "vLLM share": _gib(vllm.budget),
            "vLLM weights": _gib(vllm.weights),
            "vLLM profile run": _gib(vllm.profile),
            "vLLM runtime reserve": _gib(vllm.reserve),
            "KV cache": _gib(vllm.kv_cache),
            "KV per token": f"{vllm.kv_bytes_per_token:,} B",
            "sequences at once": str(vllm.concurrent_sequences),
            "generation peak": _gib(budget.generation_peak),
            "layer inputs (kept by checkpointing)": _gib(acts.layer_inputs),
            "one layer (recomputed)": _gib(acts.one_layer),
            "shared": _gib(acts.shared),
            "LM head, saved": _gib(acts.head_saved),
            "LM head, backward": _gib(acts.head_backward),
            "activations, gradient checkpointing": _gib(acts.with_checkpointing),
            "activations, no checkpointing": _gib(acts.without_checkpointing),
            "training peak": _gib(budget.training_peak),
        }
        assert {term: values[column] for term, values in table.items()} == planner, name
        # The hand calculation, from the doc's formulas and the model's config.json fields.
        c = with_defaults(BUILTIN_MODEL_CONFIGS[_model(recipe)])
        L, h, I, V = c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"], c["vocab_size"]  # noqa: E741
        a, kv = c["num_attention_heads"], c["num_key_value_heads"]
        d = c.get("head_dim") or h // a
        B, s, C = acts.micro_batch, acts.sequence_length, acts.scored_tokens
        T = B * s
        per_token = 16 * h + 8 + 8 * a * d + 4 * a + 8 * I
        if c["model_type"] == "qwen3":
            per_token += 6 * (a + kv) * d + 4 * (a + kv)
        assert vllm.kv_bytes_per_token == 2 * L * kv * d * 2
        assert acts.layer_inputs == L * T * 2 * h
        assert acts.one_layer == T * per_token + 2 * B * s**2
        assert acts.shared == T * (8 + 6 * h + 4) + 4 * s * d
        assert acts.head_saved == C * (2 * h + 16) + 2 * B * (s - 1)
        assert acts.head_backward == 4 * C * h + 4 * V * h + 2 * 4096 * 32768
        assert vllm.profile == 4096 * 2 * (2 * h + (a + 2 * kv) * d + 3 * I) + 2 * 4 * 128 * V
        assert budget.states == 4 * report.size.largest_layer_params + 18 * report.size.total_params // 8


def _model(recipe: str) -> str:
    import yaml

    return yaml.safe_load((ROOT / "recipes" / recipe).read_text())["model_name_or_path"]


def test_ddp_with_bf16_weights_reports_float32_master_weights():
    """accelerate_configs/ddp.yaml with the 1.5B recipe's dtype bfloat16: the plan says train() keeps float32 master
    weights (drgrpo/run/precision.py), and its DDP memory is DeepSpeed's 20 bytes per parameter, which counts them."""
    report = plan_recipe(
        ROOT / "recipes/qwen2.5_math_1.5b_drgrpo.yaml", accelerate_config=ROOT / "accelerate_configs/ddp.yaml"
    )
    assert report.master_weights == "bfloat16"
    assert report.memory[0].gpu_bytes == 20 * report.size.total_params
    assert "master weights: dtype bfloat16 without DeepSpeed: train() trains float32 copies" in format_report(report)
    assert plan_recipe(ROOT / "recipes/qwen2.5_math_1.5b_drgrpo.yaml").master_weights is None  # ZeRO-3 keeps its own
