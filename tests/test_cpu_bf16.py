"""bf16 on CPU (issue 29): `auto` from the CPU's flags (a pure function, tested with and without each flag), the
recipe key, the start-up precision line, and on the tiny model that bf16 autocast really runs in training and in
TRL's generation while the trained weights and AdamW's states stay float32."""

from __future__ import annotations

import json

import pytest
import torch

from drgrpo.core.cpu_bf16 import (
    CpuBf16,
    cpu_bf16_support,
    parse_bf16,
    read_cpu_flags,
    resolve_bf16,
)
from drgrpo.run.stage_precision import compute_precision, precision_line

ZEN2_FLAGS = "fpu sse sse2 avx avx2 fma f16c bmi2 adx sha_ni".split()  # an AVX2-only EPYC: no bf16
ZEN4_FLAGS = [*ZEN2_FLAGS, "avx512f", "avx512bw", "avx512_bf16"]
SAPPHIRE_RAPIDS_FLAGS = [*ZEN2_FLAGS, "avx512f", "amx_tile", "amx_bf16", "amx_int8"]
GRAVITON3_FEATURES = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp sve bf16 i8mm".split()
GRAVITON2_FEATURES = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp".split()


@pytest.mark.parametrize(
    "flags, machine, supported, named",
    [
        (ZEN4_FLAGS, "x86_64", True, "avx512_bf16"),
        (SAPPHIRE_RAPIDS_FLAGS, "x86_64", True, "amx_bf16"),
        (ZEN2_FLAGS, "x86_64", False, "avx512_bf16 or amx_bf16"),
        (["avx512f", "avx512bw"], "AMD64", False, "avx512_bf16 or amx_bf16"),  # AVX-512 alone is not bf16
        (GRAVITON3_FEATURES, "aarch64", True, "bf16"),
        (GRAVITON2_FEATURES, "aarch64", False, "no bf16 flag"),
        (["bf16"], "arm64", True, "bf16"),  # macOS: sysctl FEAT_BF16 read as the flag `bf16`
        (["avx512_bf16"], "aarch64", False, "no bf16 flag"),  # another architecture's flag does not count
        (["bf16"], "riscv64", False, "no bf16 CPU flag is known for machine 'riscv64'"),
    ],
)
def test_native_bf16_is_a_pure_function_of_the_flags(flags, machine, supported, named):
    result = cpu_bf16_support(flags, machine)
    assert result.supported is supported
    assert named in result.reason
    if not supported and machine in ("x86_64", "AMD64"):
        assert result.reason == (
            "this CPU has no avx512_bf16 or amx_bf16 flag, so bf16 would be emulated, several times slower than float32"
        )


def test_flags_are_read_from_cpuinfo(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n")
    flags, _ = read_cpu_flags(str(x86))
    assert {"avx2", "avx512_bf16"} <= flags
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve bf16\nCPU implementer\t: 0x41\n")
    assert "bf16" in read_cpu_flags(str(arm))[0]


NATIVE = CpuBf16(True, "this CPU has avx512_bf16")
EMULATED = CpuBf16(False, "this CPU has no avx512_bf16 or amx_bf16 flag, so bf16 would be emulated")


@pytest.mark.parametrize(
    "value, use_cpu, fp16, gpu_bf16, cpu, expected, reason",
    [
        ("auto", True, False, False, NATIVE, True, "bf16: auto, this CPU has avx512_bf16"),
        ("auto", True, False, False, EMULATED, False, "bf16: auto, this CPU has no avx512_bf16 or amx_bf16 flag"),
        (None, True, False, False, NATIVE, True, "bf16 unset (auto), this CPU has avx512_bf16"),
        (None, True, False, False, EMULATED, False, "bf16 unset (auto), this CPU has no"),
        ("auto", False, False, True, EMULATED, True, "the GPU supports bf16"),  # a GPU run ignores the CPU
        ("auto", False, False, False, NATIVE, False, "no GPU with bf16 and use_cpu is off"),  # parsed on a CPU node
        ("auto", True, True, False, NATIVE, False, "fp16 is on"),
        (True, True, False, False, EMULATED, True, "bf16: true as set, but this CPU has no"),
        ("true", True, False, False, NATIVE, True, "bf16: true as set"),
        ("false", True, False, False, NATIVE, False, "bf16: false as set"),
        (False, False, False, True, NATIVE, False, "bf16: false as set"),
    ],
)
def test_resolve_bf16(value, use_cpu, fp16, gpu_bf16, cpu, expected, reason):
    on, why = resolve_bf16(value, use_cpu=use_cpu, fp16=fp16, gpu_bf16=gpu_bf16, cpu=cpu)
    assert on is expected
    assert why.startswith(reason) or reason in why


def test_a_bad_bf16_value_names_the_choices():
    assert parse_bf16("AUTO") == "auto" and parse_bf16("1") is True and parse_bf16("no") is False
    with pytest.raises(ValueError, match="bf16='maybe': set true, false or auto"):
        parse_bf16("maybe")


def test_the_recipe_key_takes_auto_and_falls_back_in_one_line(monkeypatch):
    """`bf16: auto` in a recipe, on a CPU with and without native bf16 (the detection simulated)."""
    import drgrpo.algorithm.config as config_module
    from drgrpo.recipe.cli import parse_recipe

    for cpu, expected in ((NATIVE, True), (EMULATED, False)):
        monkeypatch.setattr(config_module, "this_cpu_bf16", lambda cpu=cpu: cpu)
        _, args, _ = parse_recipe(["recipes/smollm2_135m_drgrpo.yaml", "--bf16", "auto"])
        assert args.bf16 is expected and args.mixed_precision == ("bf16" if expected else "no")
        assert args.bf16_reason == f"bf16: auto, {cpu.reason}"
        _, forced, _ = parse_recipe(["recipes/smollm2_135m_drgrpo.yaml", "--bf16", "false"])
        assert forced.bf16 is False and forced.bf16_reason == "bf16: false as set"


def test_the_smollm2_recipes_default_to_auto():
    from drgrpo.recipe.file import read_recipe

    for name in ("smollm2_135m_drgrpo", "smollm2_135m_grpo"):
        assert read_recipe(f"recipes/{name}.yaml")["bf16"] == "auto"


def test_precision_line_names_every_stage_and_why():
    line = precision_line(
        "bf16", deepspeed=False, trained_dtypes={"float32"}, use_vllm=False, continuous_batching=False,
        reason="bf16: auto, this CPU has avx512_bf16",
    )  # fmt: skip
    assert line.startswith("precision: training bf16 autocast over float32 trained weights")
    assert "generation bf16 autocast (TRL's transformers generate" in line and "evaluation as generation" in line
    assert line.endswith("bf16: auto, this CPU has avx512_bf16")
    engine = precision_line(
        "bf16", deepspeed=False, trained_dtypes={"float32"}, use_vllm=False, continuous_batching=False,
        reason="bf16: auto, this CPU has avx512_bf16", engine="cpu",
    )  # fmt: skip
    assert "generation bf16 weights (the CPU engine's copy, synced once per optimizer step)" in engine
    float32 = precision_line("no", deepspeed=False, trained_dtypes={"float32"}, use_vllm=False,
                             continuous_batching=False, reason="bf16: false as set", engine="cpu")  # fmt: skip
    assert "generation float32 weights (the CPU engine, on the trained weights)" in float32
    assert compute_precision("no", deepspeed=False) == "float32"
    assert compute_precision("bf16", deepspeed=True) == "bf16 (DeepSpeed)"
    vllm = precision_line("bf16", deepspeed=True, trained_dtypes={"bfloat16"}, use_vllm=True,
                          continuous_batching=False, reason="bf16: true as set")  # fmt: skip
    assert "generation vLLM's own dtype" in vllm


def _tiny_trainer(tmp_path, tiny_model_path, addition_data, **overrides):
    from datasets import Dataset

    from drgrpo.algorithm.config import DrGRPOConfig
    from drgrpo.algorithm.trainer import DrGRPOTrainer
    from rewards import get_reward_funcs

    rows = [json.loads(line) for line in addition_data["train"].read_text().splitlines()][:32]
    dataset = Dataset.from_list([{"prompt": r["question"], "answer": r["answer"]} for r in rows])
    settings = dict(
        output_dir=str(tmp_path / "run"), use_cpu=True, report_to="none", save_strategy="no", max_steps=1,
        per_device_train_batch_size=8, num_generations=4, max_completion_length=8, dr_grpo=True, seed=0,
        learning_rate=1e-3, logging_steps=1, disable_tqdm=True,
    )  # fmt: skip
    settings.update(overrides)
    return DrGRPOTrainer(
        model=str(tiny_model_path), reward_funcs=get_reward_funcs(["accuracy"]), args=DrGRPOConfig(**settings),
        train_dataset=dataset,
    )  # fmt: skip


@pytest.mark.parametrize("bf16", [True, False])
def test_training_autocasts_generation_uses_the_engine_and_masters_stay_float32(
    tmp_path, tiny_model_path, addition_data, bf16
):
    """Measured, not assumed: a forward hook inside the model records the autocast state, the matmul output dtype
    and the weights' dtype in generation and in the loss forward. The loss autocasts with bf16 on; the CPU engine
    generates from a bf16 copy without autocast (bf16) or from the float32 weights themselves; the trained weights
    and AdamW's states are float32 after the update."""
    trainer = _tiny_trainer(tmp_path, tiny_model_path, addition_data, bf16=bf16)
    seen: dict[str, set] = {"generation": set(), "loss": set()}
    stage = {"now": "loss"}

    def record(module, inputs, output):
        weight = module.weight.dtype if hasattr(module, "weight") else module.packed.dtype
        seen[stage["now"]].add((torch.is_autocast_enabled("cpu"), output.dtype, weight))

    trainer.model.model.layers[0].mlp.down_proj.register_forward_hook(record)
    engine = trainer._engine
    generate = engine.engine.generate

    def in_generation(model, *args, **kwargs):
        stage["now"] = "generation"
        hook = model.model.layers[0].mlp.down_proj.register_forward_hook(record) if model is not trainer.model else None
        try:
            return generate(model, *args, **kwargs)
        finally:
            stage["now"] = "loss"
            if hook is not None:
                hook.remove()

    engine.engine.generate = in_generation
    trainer.train()
    compute = torch.bfloat16 if bf16 else torch.float32
    assert seen["generation"] == {(False, compute, compute)}
    assert seen["loss"] == {(bf16, compute, torch.float32)}
    assert trainer.accelerator.mixed_precision == ("bf16" if bf16 else "no")
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    states = [v for state in trainer.optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    assert states and {v.dtype for v in states if v.dim() > 0} == {torch.float32}


def test_start_up_line_says_each_stage(tmp_path, tiny_model_path, addition_data):
    from drgrpo.run.stage_precision import trainer_precision_line

    line = trainer_precision_line(_tiny_trainer(tmp_path, tiny_model_path, addition_data, bf16=True))
    assert line.startswith("precision: training bf16 autocast over float32 trained weights")
    assert "generation bf16 weights (the CPU engine's copy" in line and "bf16: true as set" in line
    line = trainer_precision_line(_tiny_trainer(tmp_path, tiny_model_path, addition_data, bf16=False))
    assert line.startswith("precision: training float32 over float32 trained weights")
    assert "generation float32 weights (the CPU engine" in line and line.endswith("bf16: false as set")
    line = trainer_precision_line(
        _tiny_trainer(tmp_path, tiny_model_path, addition_data, bf16=True, generation_engine="trl")
    )
    assert "generation bf16 autocast (TRL's transformers generate, the same forward)" in line


def _float32_logps(model_path, output: dict, temperature: float) -> torch.Tensor:
    """Per-token log-probs of the completions in `output` under the model as saved, in float32, without TRL."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    width = output["completion_ids"].size(1)
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        logits = model(input_ids=input_ids, attention_mask=mask).logits[:, -width - 1 : -1].float() / temperature
    return logits.log_softmax(-1).gather(-1, output["completion_ids"].unsqueeze(-1)).squeeze(-1)


# bf16 keeps 8 significant bits. Measured on the tiny model (178 completion tokens): bf16 autocast against float32,
# mean 0.0011 and max 0.0041 per token; float32 (TRL's fused head) against float32 (a plain log-softmax), below 5e-6.
# So more than AUTOCAST_FLOOR means autocast ran, and the bounds leave 10x room over what bf16 gave.
AUTOCAST_FLOOR = 1e-4
BF16_MAX_ABS_BOUND = 0.05
BF16_MEAN_ABS_BOUND = 0.01


@pytest.mark.parametrize("bf16", [True, False])
def test_bf16_logps_differ_boundedly_and_the_first_update_ratio_is_one(tmp_path, tiny_model_path, addition_data, bf16):
    """With `num_iterations: 2` TRL keeps the sampling policy's log-probs (computed in the run's precision). Under
    bf16 they differ from float32 ones of the same completions by more than float32 noise (autocast really ran) and
    by less than a stated bound; in float32 they agree to float32 noise. pi_theta / pi_old at the first update is
    exactly 1 either way: the loss's forward reproduces the sampling forward bit for bit."""
    trainer = _tiny_trainer(
        tmp_path, tiny_model_path, addition_data, bf16=bf16, num_iterations=2, gradient_accumulation_steps=2,
        temperature=1.0, max_completion_length=12,
    )  # fmt: skip
    captured = []
    score = trainer._score_generation

    def capture(inputs):
        captured.append(score(inputs))
        return captured[-1]

    trainer._score_generation = capture
    trainer.train()
    output = captured[0]
    completion_mask = output["completion_mask"].bool()
    difference = (output["old_per_token_logps"] - _float32_logps(tiny_model_path, output, 1.0)).abs()[completion_mask]
    if bf16:
        assert AUTOCAST_FLOOR < difference.max() < BF16_MAX_ABS_BOUND, difference.max()
        assert difference.mean() < BF16_MEAN_ABS_BOUND, difference.mean()
    else:
        assert difference.max() < AUTOCAST_FLOOR, difference.max()
    logged = next(entry for entry in trainer.state.log_history if "diag/ratio/first_update_mean" in entry)
    assert logged["diag/ratio/first_update_mean"] == 1.0
    assert logged["diag/ratio/first_update_max_abs_log"] == 0.0


def test_evaluation_precision_on_cpu(monkeypatch):
    import drgrpo.core.cpu_bf16 as cpu_module
    from drgrpo.evaluation.backends import cpu_precision

    monkeypatch.setattr(cpu_module, "this_cpu_bf16", lambda: NATIVE)
    assert cpu_precision("auto") == ("bfloat16", "bfloat16 weights, the CPU engine's (dtype auto: this CPU has "
                                     "avx512_bf16)")  # fmt: skip
    monkeypatch.setattr(cpu_module, "this_cpu_bf16", lambda: EMULATED)
    assert cpu_precision("auto")[0] == "float32" and "no avx512_bf16" in cpu_precision("auto")[1]
    assert cpu_precision("float32")[0] == "float32" and cpu_precision("bfloat16")[0] == "bfloat16"


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_evaluator_generates_in_the_precision_it_names(tiny_model_path, dtype):
    """The evaluator's engine decodes with weights of the dtype it names (bf16: the engine's copy), never autocast."""
    from transformers import AutoTokenizer

    from drgrpo.evaluation.backends import Request, TransformersBackend

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    backend = TransformersBackend(str(tiny_model_path), tokenizer, dtype=dtype, device="cpu")
    seen = set()

    def record(module, inputs, output):
        weight = module.weight.dtype if hasattr(module, "weight") else module.packed.dtype
        seen.add((torch.is_autocast_enabled("cpu"), output.dtype, weight))

    backend.model.model.layers[0].mlp.down_proj.register_forward_hook(record)
    ids = tuple(tokenizer("1+2=")["input_ids"])
    backend.generate([Request(0, 0, ids, 0), Request(1, 0, ids, 1)], temperature=0.0, top_p=1.0, max_new_tokens=3)
    expected = getattr(torch, dtype)
    assert seen == {(False, expected, expected)}


def test_auto_on_this_machine_from_the_users_side(tiny_model_path, addition_data, tmp_path, run_script):
    """No simulation: `scripts/train.py` with `bf16: auto` on the CPU the tests run on. The development machine has no
    native bf16 (an AVX2-only Zen 2), so there it must train in float32 and say why in one line naming the flags it
    looked for; on a CPU with native bf16 the same line says bf16 autocast and the flag found. The script runs in this
    process (the `run_script` fixture): `auto` reads the CPU's flags (/proc/cpuinfo), not torch's start-up state."""
    import platform

    from drgrpo.core.cpu_bf16 import bf16_flags_for, this_cpu_bf16

    cpu = this_cpu_bf16()
    result = run_script(
        "scripts/train.py", "recipes/tiny_drgrpo.yaml", "--bf16", "auto",
        "--model_name_or_path", str(tiny_model_path), "--dataset_path", str(addition_data["train"]),
        "--output_dir", str(tmp_path / "run"), "--max_steps", "1", "--per_device_train_batch_size", "8",
        "--num_generations", "4",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if "bf16: auto" in line]
    assert len(lines) == 1, lines
    assert lines[0].endswith(f"bf16: auto, {cpu.reason}")
    if cpu.supported:
        assert "precision: training bf16 autocast over float32 trained weights" in lines[0]
    else:
        assert "precision: training float32 over float32 trained weights" in lines[0]
        assert "generation float32" in lines[0]
        assert all(flag in lines[0] for flag in bf16_flags_for(platform.machine()))  # avx512_bf16, amx_bf16 on x86


@pytest.mark.parametrize("bf16, dtype", [(True, "bfloat16"), (False, "float32")])
def test_experiments_evaluate_in_the_precision_they_trained(monkeypatch, tmp_path, bf16, dtype):
    """The tool demo and the GRPO-vs-Dr.GRPO comparison evaluate their runs in training's precision, never the
    evaluator's `auto`: a recipe with `bf16: false` on a CPU with native bf16 was evaluated in bf16 before."""
    import drgrpo.evaluation as evaluation
    from drgrpo.evaluation.backends import training_precision_dtype
    from drgrpo.experiments import comparison, tools_demo

    seen = []
    monkeypatch.setattr(evaluation, "evaluate", lambda **kwargs: seen.append(kwargs["dtype"]) or {})
    monkeypatch.setattr(tools_demo, "strict_accuracy", lambda *args, **kwargs: 0.0)
    assert training_precision_dtype(bf16) == dtype
    tools_demo.held_out("m", "r.yaml", tmp_path / "t.jsonl", tmp_path, 8, 4, 2, bf16)
    comparison.held_out_evaluation("m", tmp_path / "t.jsonl", tmp_path, 8, "chat", bf16=bf16)
    assert seen == [dtype, dtype]
