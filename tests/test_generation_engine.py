"""The CPU generation engine (issue 40): its sampler, KV cache, attention, weights copy and sync, the importance-
sampling correction with hand-computed numbers, and on the tiny model that the trainer, the tool loop and the
evaluator generate with it."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
import torch
from datasets import Dataset

from drgrpo.algorithm.rollout.arguments import resolve_generation_engine
from drgrpo.algorithm.rollout.engine import (
    GenerationEngine,
    GrowingLayer,
    decode_attention,
    engine_attention,
    uses_engine_attention,
)
from drgrpo.algorithm.rollout.sampler import (
    SamplingParams,
    draw_uniforms,
    inverse_cdf_tokens,
    row_seed,
    sample_next,
)
from drgrpo.algorithm.rollout.weights import GenerationWeights, PackedLinear, build_copy, packs_linears, views_packed
from drgrpo.algorithm.sampler_correction import corrected_advantages, sampler_weights

# --- the sampler ---------------------------------------------------------------------------------------------------


def test_inverse_cdf_picks_the_first_token_past_the_uniform_and_never_a_zero_probability_one():
    probs = torch.tensor([[0.125, 0.25, 0.0, 0.625, 0.0]])  # cumulative: 0.125, 0.375, 0.375, 1.0, 1.0 (exact)
    for uniform, token in [(0.0, 0), (0.1, 0), (0.125, 1), (0.37, 1), (0.375, 3), (0.9999, 3), (1 - 2**-53, 3)]:
        assert inverse_cdf_tokens(probs, torch.tensor([uniform], dtype=torch.float64)).item() == token, uniform
    # Unnormalised probabilities: u scales with the total.
    assert inverse_cdf_tokens(2 * probs, torch.tensor([0.2], dtype=torch.float64)).item() == 1


def test_the_sampler_draws_the_softmax_distribution_at_its_temperature():
    torch.manual_seed(0)
    logits = torch.randn(1, 12) * 2
    params = SamplingParams(temperature=0.7)
    draws = 30_000
    generators = [torch.Generator().manual_seed(row) for row in range(draws)]
    tokens, logprobs = sample_next(logits.expand(draws, -1), params, generators)
    counts = torch.bincount(tokens, minlength=12)
    expected = torch.softmax(logits[0] / 0.7, dim=-1)
    assert (counts / draws - expected).abs().max() < 0.01
    # The log-prob returned is the token's under the tempered distribution.
    assert torch.allclose(logprobs, torch.log_softmax(logits[0] / 0.7, -1)[tokens], atol=1e-6)


def test_top_p_and_top_k_cut_as_transformers_does_and_the_logprob_is_the_processed_one():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    generators = [torch.Generator().manual_seed(seed) for seed in range(200)]
    batch = logits.expand(200, -1)
    tokens, logprobs = sample_next(batch, SamplingParams(temperature=1.0, top_p=0.75), generators)
    assert set(tokens.tolist()) == {0, 1}  # the nucleus of 0.75: 0.5 + 0.3
    kept = torch.log(torch.tensor([0.5, 0.3]) / 0.8)
    assert torch.allclose(logprobs, kept[tokens], atol=1e-6)
    tokens, _ = sample_next(batch, SamplingParams(temperature=1.0, top_k=3), generators)
    assert set(tokens.tolist()) == {0, 1, 2}


def test_greedy_is_the_argmax_with_its_temperature_one_logprob():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, -1.0, 0.5]])
    tokens, logprobs = sample_next(logits, SamplingParams(temperature=0.0), [])
    assert tokens.tolist() == [1, 0]
    assert torch.allclose(logprobs, torch.log_softmax(logits, -1)[[0, 1], [1, 0]])


def test_a_rows_draw_depends_only_on_its_own_generator():
    seeds = [row_seed(7, row) for row in range(5)]
    together = draw_uniforms([torch.Generator().manual_seed(s) for s in seeds])
    alone = torch.cat([draw_uniforms([torch.Generator().manual_seed(s)]) for s in seeds])
    assert torch.equal(together, alone)


def test_row_seed_is_the_evaluators_old_sample_seed():
    from drgrpo.evaluation.sampling import sample_seed

    digest = hashlib.blake2b(b"3:14:2", digest_size=8).digest()
    assert sample_seed(3, 14, 2) == row_seed(3, 14, 2) == int.from_bytes(digest, "big") >> 1
    assert row_seed(3, 14, 2) < 2**63


# --- the correction, by hand ---------------------------------------------------------------------------------------

LEARNER = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -3.0, 0.0]])
SAMPLER = torch.tensor([[-1.5, -1.0, -0.5], [-0.1, -0.5, 0.0]])  # differences 0.5, -1.0, 0; 0, -2.5, (masked)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def test_token_truncate_by_hand():
    result = sampler_weights(LEARNER, SAMPLER, MASK, "token_truncate", None, 1.5)
    expected = torch.tensor([[min(math.exp(0.5), 1.5), math.exp(-1.0), 1.0], [1.0, math.exp(-2.5), 1.0]])
    assert torch.allclose(result.weights, expected, atol=1e-6)
    assert result.changed.tolist() == [True, False, False, False, False]  # only exp(0.5) = 1.65 was cut
    assert result.logp_difference.tolist() == pytest.approx([0.5, 1.0, 0.0, 0.0, 2.5])


def test_token_mask_by_hand():
    result = sampler_weights(LEARNER, SAMPLER, MASK, "token_mask", 0.2, 1.5)
    expected = torch.tensor([[0.0, math.exp(-1.0), 1.0], [1.0, 0.0, 1.0]])  # 1.65 > 1.5 and 0.082 < 0.2 dropped
    assert torch.allclose(result.weights, expected, atol=1e-6)
    assert result.changed.sum().item() == 2


def test_sequence_modes_by_hand():
    truncated = sampler_weights(LEARNER, SAMPLER, MASK, "sequence_truncate", None, 3.0)
    assert truncated.weights.shape == (2, 1)
    assert torch.allclose(truncated.weights[:, 0], torch.tensor([math.exp(-0.5), math.exp(-2.5)]), atol=1e-6)
    masked = sampler_weights(LEARNER, SAMPLER, MASK, "sequence_mask", 0.1, 3.0)
    assert torch.allclose(masked.weights[:, 0], torch.tensor([math.exp(-0.5), 0.0]), atol=1e-6)


def test_an_unknown_sampler_logprob_weighs_one_and_a_bad_mode_is_refused():
    sampler = SAMPLER.clone()
    sampler[0, 0] = float("nan")
    result = sampler_weights(LEARNER, sampler, MASK, "token_truncate", None, 3.0)
    assert result.weights[0, 0].item() == 1.0 and result.logp_difference.numel() == 4
    with pytest.raises(ValueError, match="vllm_importance_sampling_mode='token'"):
        sampler_weights(LEARNER, SAMPLER, MASK, "token", None, 3.0)


def test_weights_on_the_advantage_equal_weights_on_the_clipped_loss():
    """TRL multiplies -min(r A, clip(r) A) by w; the trainer puts w on A instead: the same loss for w >= 0."""
    torch.manual_seed(0)
    advantages = torch.tensor([0.5, -0.5])
    ratio = torch.exp(torch.randn(2, 3) * 0.3)
    weights = torch.rand(2, 3) * 3

    def clipped(a):
        return -torch.min(ratio * a, ratio.clamp(0.8, 1.2) * a)

    trl = clipped(advantages.unsqueeze(1)) * weights
    ours = clipped(corrected_advantages(advantages, weights))
    assert torch.allclose(trl, ours, atol=1e-6)


# --- cache and attention -------------------------------------------------------------------------------------------


def test_the_growing_layer_writes_in_place_and_drops_rows():
    layer = GrowingLayer(capacity=5)
    keys, values = layer.update(torch.ones(3, 2, 2, 4), torch.ones(3, 2, 2, 4))
    assert keys.shape == (3, 2, 2, 4) and layer.get_seq_length() == 2
    keys, _ = layer.update(torch.full((3, 2, 1, 4), 2.0), torch.zeros(3, 2, 1, 4))
    assert keys.shape == (3, 2, 3, 4) and keys[:, :, 2].eq(2).all() and keys.data_ptr() == layer.key_buffer.data_ptr()
    layer.key_buffer[1] = 7
    layer.batch_select_indices(torch.tensor([1, 2]))
    assert layer.keys.shape == (2, 2, 3, 4) and layer.keys[0].eq(7).all()
    with pytest.raises(RuntimeError, match="exceed the capacity of 5"):
        layer.update(torch.ones(2, 2, 3, 4), torch.ones(2, 2, 3, 4))


def test_decode_attention_is_grouped_query_attention():
    from transformers.integrations.sdpa_attention import repeat_kv

    torch.manual_seed(0)
    rows, heads, kv_heads, dim, length = 3, 6, 2, 8, 5
    query = torch.randn(rows, heads, 1, dim)
    key, value = torch.randn(rows, kv_heads, length, dim), torch.randn(rows, kv_heads, length, dim)
    mask = torch.ones(rows, 1, 1, length, dtype=torch.bool)
    mask[0, ..., :2] = False  # a left-padded row
    output, _ = decode_attention(None, query, key, value, mask, scaling=dim**-0.5)
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, repeat_kv(key, heads // kv_heads), repeat_kv(value, heads // kv_heads), attn_mask=mask
    )
    assert output.shape == (rows, 1, heads, dim)
    assert torch.allclose(output, expected.transpose(1, 2), atol=1e-5)


# --- the engine on the tiny model ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    prompts = [tokenizer(text)["input_ids"] for text in ("12+7=", "3+45=", "9+9=", "15+16=", "1+1=")]
    return model, tokenizer, prompts


def engine_for(tokenizer, **params) -> GenerationEngine:
    return GenerationEngine([tokenizer.eos_token_id], tokenizer.pad_token_id, SamplingParams(**params))


def test_greedy_decoding_is_transformers_generate(tiny):
    model, tokenizer, prompts = tiny
    samples = engine_for(tokenizer, temperature=0.0).generate(model, prompts, [0] * 5, [12] * 5)
    for prompt, sample in zip(prompts, samples, strict=True):
        expected = model.generate(
            torch.tensor([prompt]), do_sample=False, max_new_tokens=12, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )[0, len(prompt):].tolist()  # fmt: skip
        assert sample.ids == expected


def test_sampled_logprobs_are_the_models_tempered_logprobs_in_float32(tiny):
    """In float32 with temperature only, the sampler's log-probs equal a full forward's to 1e-4: the correction's
    weights are 1 within that."""
    model, tokenizer, prompts = tiny
    rows = [p for p in prompts for _ in range(4)]
    samples = engine_for(tokenizer, temperature=0.8).generate(model, rows, range(len(rows)), [10] * len(rows))
    gaps = []
    for prompt, sample in zip(rows, samples, strict=True):
        ids = torch.tensor([prompt + sample.ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / 0.8
        learner = torch.log_softmax(logits, -1).gather(-1, torch.tensor(sample.ids).unsqueeze(-1)).squeeze(-1)
        gaps.append((learner - torch.tensor(sample.logprobs)).abs().max().item())
    assert max(gaps) < 1e-4


def test_a_sample_is_the_same_at_batch_1_and_32(tiny):
    model, tokenizer, prompts = tiny
    rows = [prompts[i % 5] for i in range(32)]
    seeds = [row_seed(0, i) for i in range(32)]
    engine = engine_for(tokenizer, temperature=1.0)
    batched = engine.generate(model, rows, seeds, [16] * 32)
    for index in (0, 7, 13, 31):
        alone = engine.generate(model, [rows[index]], [seeds[index]], [16])[0]
        assert alone.ids == batched[index].ids
        assert alone.logprobs == pytest.approx(batched[index].logprobs, abs=1e-5)
    assert len({tuple(s.ids) for s in batched}) > 5  # the rows really sampled different answers


def test_budgets_stops_and_padding_rows(tiny):
    model, tokenizer, prompts = tiny
    engine = engine_for(tokenizer, temperature=1.0)
    stops = []
    samples = engine.generate(
        model, prompts[:3], [1, 2, 3], [0, 3, 8], stop=lambda row, token: stops.append(row) or row == 2
    )
    assert samples[0].ids == [] and samples[0].logprobs == []  # budget 0: a padding row, not generated
    assert len(samples[1].ids) <= 3 and len(samples[1].ids) == len(samples[1].logprobs)
    assert len(samples[2].ids) == 1  # its stop said yes at its first token
    assert 0 not in stops


def test_identical_prompts_are_prefilled_once(tiny):
    model, tokenizer, prompts = tiny
    engine = engine_for(tokenizer, temperature=1.0)
    engine.generate(model, [prompts[0]] * 8 + [prompts[1]] * 8, range(16), [1] * 16)
    assert engine.forwards == 1  # one prefill of the two distinct prompts; one token each needs no decode step


def test_engine_attention_is_chosen_per_model_and_put_back(tiny):
    model, _, _ = tiny
    assert uses_engine_attention(model.config)
    before = model.config._attn_implementation
    with engine_attention(model) as own:
        assert own and model.config._attn_implementation == "drgrpo_engine"
    assert model.config._attn_implementation == before


# --- the generation weights ----------------------------------------------------------------------------------------


def test_the_copy_is_the_cast_model_its_buffers_untouched_and_packed_for_onednn(tiny):
    model, tokenizer, prompts = tiny
    copy = build_copy(model, torch.bfloat16)
    assert copy is not model and copy.config is not model.config
    reference = {name: p.to(torch.bfloat16) for name, p in model.named_parameters()}
    packed = packs_linears(torch.bfloat16, torch.device("cpu"))
    linears = [m for m in copy.modules() if isinstance(m, PackedLinear)]
    assert bool(linears) == packed
    for name, parameter in copy.named_parameters():
        assert parameter.dtype == torch.bfloat16 and torch.equal(parameter, reference[name]), name
    assert all(b.dtype == torch.float32 for n, b in copy.named_buffers() if n.endswith("inv_freq"))
    ids = torch.tensor([prompts[0]])
    cast = build_copy(model, torch.bfloat16)
    with torch.no_grad():
        bf16_model = type(model)._from_config(model.config, dtype=torch.bfloat16)
        bf16_model.load_state_dict({k: v.to(torch.bfloat16) for k, v in model.state_dict().items()})
        assert torch.allclose(cast(ids).logits.float(), bf16_model.eval()(ids).logits.float(), atol=0.05)


def test_the_copy_follows_the_trained_weights_after_each_optimizer_step_not_before(tiny):
    model, _, _ = tiny
    trained = type(model)._from_config(model.config, dtype=torch.float32)
    trained.load_state_dict(model.state_dict())
    weights = GenerationWeights(torch.bfloat16)
    first = weights.for_generation(trained, step=0)
    embed = trained.get_input_embeddings().weight
    with torch.no_grad():
        embed.add_(1.0)  # an optimizer step
    same_step = weights.for_generation(trained, step=0)
    assert same_step is first and weights.syncs == 1
    assert not torch.equal(first.get_input_embeddings().weight, embed.to(torch.bfloat16))  # not before the step
    after = weights.for_generation(trained, step=1)
    assert after is first and weights.syncs == 2 and weights.sync_seconds > 0
    assert torch.equal(after.get_input_embeddings().weight, embed.to(torch.bfloat16))


def test_free_drops_the_bf16_copy_and_the_next_step_builds_it_from_the_current_weights(tiny):
    """The trainer frees the copy when a step's generation is done, so the loss's forward and backward never hold it
    (270 MB for SmolLM2-135M): the next step's first call builds it again, from the weights the optimizer left, and
    counts one sync for that step, as the in-place cast did."""
    model, _, _ = tiny
    trained = type(model)._from_config(model.config, dtype=torch.float32)
    trained.load_state_dict(model.state_dict())
    weights = GenerationWeights(torch.bfloat16)
    first = weights.for_generation(trained, step=0)
    assert weights.for_generation(trained, step=0) is first  # the calls of one step share it until it is freed
    weights.free()
    assert weights.copy is None
    embed = trained.get_input_embeddings().weight
    with torch.no_grad():
        embed.add_(1.0)  # an optimizer step
    rebuilt = weights.for_generation(trained, step=1)
    assert rebuilt is not first and weights.syncs == 2
    assert torch.equal(rebuilt.get_input_embeddings().weight, embed.to(torch.bfloat16))


def test_float32_generates_from_a_packed_view_sharing_the_trained_tensors_rebuilt_each_step_and_freed(tiny):
    """A float32 model on a CPU: the engine decodes with a view whose parameters are the trained tensors themselves
    (no copy) and whose linear layers are packed for oneDNN; the next optimizer step packs again, and `free` drops it
    (the trainer frees it before the loss's forward and backward)."""
    model, tokenizer, prompts = tiny
    trained = type(model)._from_config(model.config, dtype=torch.float32)
    trained.load_state_dict(model.state_dict())
    weights = GenerationWeights(None)
    assert not weights.is_copy(trained) and views_packed(trained)
    view = weights.for_generation(trained, step=5)
    assert view is not trained and weights.syncs == 1 and weights.for_generation(trained, step=5) is view
    assert not any(type(m) is torch.nn.Linear for m in view.modules())
    assert sum(isinstance(m, PackedLinear) for m in view.modules()) == sum(
        type(m) is torch.nn.Linear for m in trained.modules()
    )
    embed = trained.get_input_embeddings().weight
    assert view.get_input_embeddings().weight.data_ptr() == embed.data_ptr()  # shared, not copied
    ids = torch.tensor([prompts[0]])
    with torch.no_grad():
        assert (view(ids).logits - trained(ids).logits).abs().max() < 1e-4
        for parameter in trained.parameters():  # an optimizer step
            parameter.add_(0.01 * torch.randn_like(parameter))
        stale = view(ids).logits
        after = weights.for_generation(trained, step=6)
        assert after is not view and weights.syncs == 2
        assert (after(ids).logits - trained(ids).logits).abs().max() < 1e-4
        assert (stale - trained(ids).logits).abs().max() > 1e-3  # the old view's packed layers were the old weights
    weights.free()
    assert weights.copy is None
    assert trained.config._attn_implementation == model.config._attn_implementation


def test_a_sharded_run_builds_the_copy_per_call_and_drops_it(tiny):
    model, _, _ = tiny
    weights = GenerationWeights(torch.bfloat16, persistent=False)
    first = weights.for_generation(model, step=0)
    weights.release()
    assert weights.copy is None
    second = weights.for_generation(model, step=0)
    assert second is not first and weights.syncs == 2


def test_a_lora_copy_holds_the_merged_weights(tiny):
    from peft import LoraConfig, get_peft_model

    model, _, _ = tiny
    base = type(model)._from_config(model.config, dtype=torch.float32)
    base.load_state_dict(model.state_dict())
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for name, parameter in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.5)  # peft starts B at 0: make the delta real
    copy = build_copy(peft_model, torch.bfloat16)
    merged = peft_model.merge_and_unload()
    targets = dict(copy.named_parameters())
    for name, parameter in merged.named_parameters():
        if name in targets:
            assert torch.equal(targets[name], parameter.detach().to(torch.bfloat16)), name
    delta = merged.model.layers[0].self_attn.q_proj.weight - model.model.layers[0].self_attn.q_proj.weight
    assert delta.abs().max() > 0


# --- resolution ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "requested, flags, engine, reason",
    [
        ("auto", {}, "cpu", "the CPU engine"),
        ("auto", {"use_vllm": True}, "trl", "use_vllm is on"),
        ("auto", {"on_cpu": False}, "trl", "not on a CPU"),
        ("auto", {"gathers_for_generation": False}, "trl", "ds3_gather_for_generation is off"),
        ("trl", {}, "trl", "trl as set"),
    ],
)
def test_which_engine_generates(requested, flags, engine, reason):
    settings = {"on_cpu": True, "use_vllm": False, "continuous_batching": False, **flags}
    chosen, why = resolve_generation_engine(requested, **settings)
    assert chosen == engine and reason in why


def test_the_cpu_engine_where_it_cannot_run_is_one_line():
    with pytest.raises(ValueError, match="generation_engine: cpu cannot run here: use_vllm is on"):
        resolve_generation_engine("cpu", on_cpu=True, use_vllm=True, continuous_batching=False)


# --- the trainer ---------------------------------------------------------------------------------------------------


def make_trainer(tiny_model_path, addition_data, tmp_path, **config):
    from rank_probe import digit_reward

    from drgrpo.algorithm.config import DrGRPOConfig
    from drgrpo.algorithm.trainer import DrGRPOTrainer

    rows = [json.loads(line) for line in open(addition_data["train"])][:16]
    dataset = Dataset.from_list([{"prompt": r["question"], "answer": r["answer"]} for r in rows])
    settings = {
        "output_dir": str(tmp_path), "use_cpu": True, "bf16": False, "report_to": "none", "save_strategy": "no",
        "max_steps": 2, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "num_generations": 4,
        "max_completion_length": 6, "logging_steps": 1, "seed": 5, "dr_grpo": True, "learning_rate": 1e-2,
        "vllm_importance_sampling_mode": "token_truncate", "vllm_importance_sampling_clip_max": 3.0, **config,
    }  # fmt: skip
    return DrGRPOTrainer(
        model=str(tiny_model_path), reward_funcs=[digit_reward], args=DrGRPOConfig(**settings), train_dataset=dataset
    )


def logged(trainer, name: str) -> list[float]:
    return [entry[name] for entry in trainer.state.log_history if name in entry]


def test_float32_training_samples_with_the_learners_own_logprobs(tiny_model_path, addition_data, tmp_path):
    trainer = make_trainer(tiny_model_path, addition_data, tmp_path)
    assert trainer._engine is not None and trainer._engine.weights.dtype is None
    trainer.train()
    assert max(logged(trainer, "sampling/sampling_logp_difference/max")) < 1e-4
    for name in ("sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/max"):
        assert logged(trainer, name) == pytest.approx([1.0, 1.0], abs=1e-4)
    assert logged(trainer, "engine/weight_syncs") == [1.0, 2.0]  # the packed view, packed once per step
    assert trainer._engine.weights.copy is None  # freed once each step's generation was done


def test_bf16_syncs_once_per_step_and_its_weights_change_the_loss(tiny_model_path, addition_data, tmp_path):
    trainer = make_trainer(tiny_model_path, addition_data, tmp_path, bf16=True)
    engine = trainer._engine
    seen = []
    generate = engine.engine.generate

    def record(model, *args, **kwargs):
        trained = {n: p.detach().to(torch.bfloat16) for n, p in trainer.model.named_parameters()}
        seen.append(all(torch.equal(p, trained[n]) for n, p in model.named_parameters()))
        return generate(model, *args, **kwargs)

    engine.engine.generate = record
    losses = {}
    compute = trainer._compute_loss

    def both_losses(model, inputs):
        correction = trainer.args.vllm_importance_sampling_correction
        trainer.args.vllm_importance_sampling_correction = False
        with torch.no_grad():
            plain = compute(model, inputs).item()
        trainer.args.vllm_importance_sampling_correction = correction
        loss = compute(model, inputs)
        losses.setdefault("pairs", []).append((plain, loss.item()))
        losses.setdefault("copy_held", []).append(engine.weights.copy is not None)
        return loss

    trainer._compute_loss = both_losses
    trainer.train()
    assert seen == [True, True]  # the copy was the cast trained weights at each step's generation
    assert engine.weights.syncs == 2 and logged(trainer, "engine/weight_syncs") == [1.0, 2.0]
    assert not any(losses["copy_held"])  # the loss's forward and backward never hold the bf16 copy
    assert max(logged(trainer, "sampling/sampling_logp_difference/max")) > 1e-3  # bf16 samples off-policy
    assert any(abs(plain - corrected) > 1e-7 for plain, corrected in losses["pairs"])


def test_no_extra_forward_on_policy(tiny_model_path, addition_data, tmp_path):
    trainer = make_trainer(tiny_model_path, addition_data, tmp_path, bf16=True, max_steps=1)
    calls = []
    trainer.model.register_forward_pre_hook(lambda module, args: calls.append(torch.is_grad_enabled()))
    trainer.train()
    # One forward per micro-batch, the loss's own (with gradients); no pi_old recomputed for the correction.
    assert calls == [True] * trainer.args.gradient_accumulation_steps
    assert logged(trainer, "sampling/importance_sampling_ratio/mean")


def test_the_evaluator_generates_with_the_engine(tiny_model_path, monkeypatch):
    from transformers import AutoTokenizer, GenerationMixin

    from drgrpo.evaluation.backends import Request, TransformersBackend

    monkeypatch.setattr(GenerationMixin, "generate", lambda *a, **k: pytest.fail("transformers generate was called"))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    backend = TransformersBackend(str(tiny_model_path), tokenizer, dtype="float32")
    # float32 on a CPU: the loaded model's linear layers packed for oneDNN in place (no second copy of the weights)
    assert not backend.copied and not any(type(m) is torch.nn.Linear for m in backend.model.modules())
    assert any(isinstance(m, PackedLinear) for m in backend.model.modules())
    prompt = tuple(tokenizer("12+7=")["input_ids"])
    requests = [Request(0, i, prompt, row_seed(0, i)) for i in range(4)]
    generations = backend.generate(requests, temperature=1.0, top_p=1.0, max_new_tokens=5)
    assert len(generations) == 4 and backend.forwards > 0
    again = backend.generate(requests[2:3], temperature=1.0, top_p=1.0, max_new_tokens=5)
    assert again[0] == generations[2]  # the same sample alone as in its batch


def test_the_engine_stops_at_the_recipes_extra_end_tokens(tiny_model_path, addition_data, tmp_path):
    """Built after `extra_eos_tokens` joined TRL's eos list: a row ends at any of them (not only the tokenizer's)."""
    trainer = make_trainer(tiny_model_path, addition_data, tmp_path, extra_eos_tokens=[*"0123456789"])
    digits = set(trainer._tokenizer.convert_tokens_to_ids(list("0123456789")))
    assert digits <= trainer._engine.engine.eos
    prompts = [trainer._tokenizer("12+7=")["input_ids"]] * 16
    samples = trainer._engine.generate(trainer, prompts, [40] * 16)
    ended = [sample.ids[-1] for sample in samples if len(sample.ids) < 40]
    assert ended and all(token in trainer._engine.engine.eos for token in ended)
    assert any(token in digits for token in ended)
