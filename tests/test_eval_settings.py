"""Evaluation from the user's side (issue 43): a hub preset with no hub fails at once in one line naming the local
fix; the one precision line says what evaluation computes in, and `EVAL_RECIPE`'s `bf16` decides it; evaluations of
one model and benchmark with other settings get folders of their own, resume there, and compare side by side.

Each command runs in-process (`scripts/evaluate.py`'s and `scripts/compare_evals.py`'s `main`, through `run_main`
where the test reads what an error prints) on the session's tiny model, 2 problems and 3 new tokens."""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from drgrpo.core.errors import run_main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def problems(tmp_path) -> Path:
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps({"question": f"{a}+{a}=", "answer": str(2 * a)}) + "\n" for a in (1, 3)))
    return path


def refused(argv: list[str], capsys) -> list[str]:
    """The lines a refused `scripts/evaluate.py ARGV` prints (status 2 asserted)."""
    from scripts.evaluate import main

    with pytest.raises(SystemExit) as exit_info:
        run_main(lambda: main(argv))
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()


# -- 1. hub presets without the hub ------------------------------------------------------------------------------


def test_a_hub_preset_offline_fails_in_one_line_naming_the_local_fix(tiny_model_path, monkeypatch, capsys):
    """`make eval BENCH=gsm8k` with HF_HUB_OFFLINE=1: one line naming the preset and the shipped subset's command,
    no traceback hint; a preset with no shipped subset says how to point it at a downloaded file."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("MAKELEVEL", "1")  # as `make eval` runs it: the fix is a make command
    model = ["--model_name_or_path", str(tiny_model_path)]
    assert refused([*model, "--benchmark", "gsm8k"], capsys) == [
        "error: benchmark gsm8k: openai/gsm8k (main, test) is not in the local cache and the hub is switched off "
        "(HF_HUB_OFFLINE=1). Fix: make eval BENCH=data/gsm8k_test100.jsonl (the project ships the first 100 problems "
        "of GSM8K's test split)."
    ]
    [line] = refused([*model, "--benchmark", "math500"], capsys)
    assert line.startswith("error: benchmark math500: HuggingFaceH4/MATH-500 (test) is not in the local cache")
    assert line.endswith(
        'make eval BENCH=math500 ARGS="--data DIR/FILE" (the preset keeps its columns and gold format).'
    )
    assert "hf download HuggingFaceH4/MATH-500 --repo-type dataset --local-dir DIR" in line


def test_an_unreachable_hub_is_probed_once_not_retried_for_half_a_minute(
    tiny_model_path, tmp_path, monkeypatch, capsys
):
    """No HF_HUB_OFFLINE, and a hub that refuses connections: `datasets` alone retried for ~30 s, printing each retry
    twice; the evaluator asks once, reads the cache only, and fails in one line."""
    import datasets.config
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("MAKELEVEL", raising=False)
    dead = "http://127.0.0.1:9"  # the discard port: nothing listens, the connection is refused at once
    for module, key, value in [
        (constants, "HF_HUB_OFFLINE", False), (datasets.config, "HF_HUB_OFFLINE", False),
        (constants, "ENDPOINT", dead), (datasets.config, "HF_ENDPOINT", dead),
        (constants, "HF_HUB_CACHE", str(tmp_path / "hub")), (datasets.config, "HF_DATASETS_CACHE", tmp_path / "ds"),
    ]:  # fmt: skip
        monkeypatch.setattr(module, key, value)
    start = time.monotonic()
    lines = refused(["--model_name_or_path", str(tiny_model_path), "--benchmark", "gsm8k"], capsys)
    assert time.monotonic() - start < 10
    assert lines == [
        "error: benchmark gsm8k: openai/gsm8k (main, test) is not in the local cache and the hub cannot be reached "
        "from here (ConnectError). Fix: --benchmark data/gsm8k_test100.jsonl (the project ships the first 100 "
        "problems of GSM8K's test split)."
    ]
    assert constants.HF_HUB_OFFLINE is False and datasets.config.HF_HUB_OFFLINE is False  # restored after the call


# -- 2 and 3. the precision line, and the recipe's bf16 ------------------------------------------------------------


def bf16_recipe(tmp_path: Path) -> Path:
    """The tiny recipe (`bf16: false`) with `bf16: true`."""
    text = (ROOT / "recipes" / "tiny_drgrpo.yaml").read_text()
    assert "\nbf16: false\n" in text
    recipe = tmp_path / "tiny_bf16.yaml"
    recipe.write_text(text.replace("\nbf16: false\n", "\nbf16: true\n"))
    return recipe


@pytest.mark.parametrize(
    ("recipe", "flags", "expected", "why"),
    [
        ("recipes/tiny_drgrpo.yaml", [], "float32", "bf16: false as set in recipes/tiny_drgrpo.yaml"),
        ("bf16", [], "bfloat16", "bf16: true as set"),
        ("recipes/tiny_drgrpo.yaml", ["--dtype", "bfloat16"], "bfloat16", "--dtype bfloat16"),
    ],
    ids=["recipe-bf16-false", "recipe-bf16-true", "flag-over-recipe"],
)
def test_one_precision_line_true_to_what_generation_computes_in(
    tiny_model_path, problems, tmp_path, monkeypatch, caplog, recipe, flags, expected, why
):
    """`make eval EVAL_RECIPE=recipe.yaml`: the recipe's `bf16` is the evaluation's precision unless `--dtype` says
    otherwise, and exactly one line names it: the dtype the engine's matmuls produced, measured in the model."""
    from drgrpo.algorithm.rollout import engine
    from scripts.evaluate import main

    seen: set = set()
    generate = engine.GenerationEngine.generate

    def recording(self, model, *args, **kwargs):
        hook = model.model.layers[0].mlp.register_forward_hook(lambda m, i, out: seen.add(out.dtype))
        try:
            return generate(self, model, *args, **kwargs)
        finally:
            hook.remove()

    monkeypatch.setattr(engine.GenerationEngine, "generate", recording)
    monkeypatch.chdir(ROOT)  # the recipe as `make eval` names it, relative to the project
    recipe_path = str(bf16_recipe(tmp_path)) if recipe == "bf16" else recipe
    argv = ["--model_name_or_path", str(tiny_model_path), "--benchmark", str(problems), "--recipe", recipe_path]
    argv += ["--max_new_tokens", "3", "--progress", "false", "--output_dir", str(tmp_path / "out"), *flags]
    with caplog.at_level(logging.INFO):
        summary = main(argv)
    assert seen == {getattr(torch, expected)}
    lines = [r.getMessage() for r in caplog.records if "precision" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"evaluation precision: {expected} (the CPU engine on ")
    assert why in lines[0] and "no autocast" in lines[0]
    assert summary["dtype"] == expected


# -- 4. other settings, other folders; side by side -------------------------------------------------------------


def test_two_settings_get_two_folders_resume_and_compare_side_by_side(
    tiny_model_path, problems, tmp_path, monkeypatch, caplog, capsys
):
    """`make eval N=1` then `make eval N=2` (TEMPERATURE 1.0) on one model and benchmark: two default folders, the
    same command again resumes its own, and `make eval-compare` shows one row per setting instead of refusing."""
    from scripts.compare_evals import main as compare
    from scripts.evaluate import main

    monkeypatch.chdir(tmp_path)  # the default folders are relative: outputs/eval/<model>/<benchmark>[-settings]
    model = str(tiny_model_path)
    common = ["--model_name_or_path", model, "--benchmark", str(problems), "--max_new_tokens", "3"]
    common += ["--progress", "false"]
    greedy = main([*common, "--n", "1", "--temperature", "0"])
    sampled = main([*common, "--n", "2", "--temperature", "1.0"])
    base = Path("outputs/eval") / re.sub(r"[^A-Za-z0-9._-]+", "_", model.strip("/")).strip("_")
    assert greedy["output_dir"] == str(base / "sums-tok3")
    assert sampled["output_dir"] == str(base / "sums-n2-t1.0-tok3")

    samples = Path(sampled["output_dir"]) / "samples.jsonl"
    size = samples.stat().st_size
    with caplog.at_level(logging.INFO):
        again = main([*common, "--n", "2", "--temperature", "1.0"])
    assert again["output_dir"] == sampled["output_dir"] and samples.stat().st_size == size
    assert f"Resuming {sampled['output_dir']}: 4 of 4 samples already written." in caplog.text

    capsys.readouterr()
    table = compare(["outputs/eval"]).splitlines()
    assert table[0] == "| model | metric (%) | sums (2 problems) | Avg. |"
    greedy_cell, sampled_cell = f"{100 * greedy['pass@1']:.1f}", f"{100 * sampled['pass@1']:.1f}"
    assert table[2:] == [
        f"| {model} (n=1, temperature=0.0) | pass@1 | {greedy_cell} | {greedy_cell} |",
        f"| {model} (n=2, temperature=1.0) | pass@1 | {sampled_cell} | {sampled_cell} |",
    ]


def _config(**changes) -> dict:
    config = {
        "model": "m", "benchmark": "b", "n": 1, "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 3000, "seed": 0,
        "prompt_template": "chat", "system_prompt": None, "chat_template_kwargs": {},
        "answer_extraction_mode": "math_verify", "dtype": "bfloat16",
    }  # fmt: skip
    return {**config, **changes}


def auto_bf16():
    from drgrpo.evaluation.dtypes import EvalPrecision

    return EvalPrecision("bfloat16", "dtype auto: this CPU has avx512_bf16", False)


def test_the_default_evaluation_keeps_its_folder_and_others_name_their_settings():
    from drgrpo.evaluation.dtypes import EvalPrecision
    from drgrpo.evaluation.folders import settings_suffix

    assert settings_suffix(_config(), None, auto_bf16()) == ""  # outputs/eval/<model>/<benchmark>/, as before
    assert settings_suffix(_config(n=4, temperature=1.0), None, auto_bf16()) == "n4-t1.0"
    changed = _config(top_p=0.95, max_new_tokens=256, seed=1, prompt_template="qwen_math", system_prompt="Be brief.")
    suffix = settings_suffix(changed, 50, EvalPrecision("float32", "bf16: false as set in r.yaml", True))
    assert suffix.startswith("p0.95-tok256-seed1-first50-qwen_math-prompt") and suffix.endswith("-fp32")


def test_an_evaluation_from_before_suffixes_resumes_in_its_folder(tmp_path, monkeypatch):
    """A run started by an older version in outputs/eval/<model>/<benchmark>/ (its eval_config.json without `dtype`)
    is found again by the same command; a run of other settings, or of a precision the user chose, is not."""
    from drgrpo.evaluation.dtypes import EvalPrecision
    from drgrpo.evaluation.folders import default_output_dir

    monkeypatch.chdir(tmp_path)
    config = _config(n=4, temperature=1.0)
    legacy = Path("outputs/eval/m/b")
    legacy.mkdir(parents=True)
    (legacy / "eval_config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "dtype"}))
    assert default_output_dir("m", "b", config, None, auto_bf16()) == legacy
    assert default_output_dir("m", "b", _config(n=8, temperature=1.0), None, auto_bf16()) == legacy.parent / "b-n8-t1.0"
    chosen = EvalPrecision("bfloat16", "--dtype bfloat16", True)
    assert default_output_dir("m", "b", config, None, chosen) == legacy.parent / "b-n4-t1.0-bf16"


def test_compare_labels_rows_by_the_settings_that_differ():
    from drgrpo.evaluation import comparison_table

    def summary(benchmark, n, value):
        return {"model": "a", "benchmark": benchmark, "n": n, "temperature": 1.0 if n > 1 else 0.0, "pass@1": value}

    lines = comparison_table([summary("math500", 1, 0.5), summary("math500", 4, 0.25), summary("aime24", 1, 0.1)])
    assert lines.splitlines()[2:4] == [
        "| a (n=1, temperature=0.0) | pass@1 | 10.0 | 50.0 | 30.0 |",
        "| a (n=4, temperature=1.0) | pass@1 | – | 25.0 | – |",
    ]
    with pytest.raises(ValueError, match="Two evaluations of a on math500 with the same settings; pass only one"):
        comparison_table([summary("math500", 1, 0.5), summary("math500", 1, 0.6)])


def test_the_precision_follows_the_flag_then_the_recipe_then_auto_on_each_backend(monkeypatch):
    """Where no test machine reaches: a GPU (the engine in bf16 by default, vLLM's own choice) and a CPU without
    native bf16 (float32), and the recipe's `bf16` over both."""
    import drgrpo.core.cpu_bf16 as cpu_bf16
    from drgrpo.evaluation import dtypes

    emulated = cpu_bf16.CpuBf16(False, "this CPU has no avx512_bf16 or amx_bf16 flag")
    monkeypatch.setattr(cpu_bf16, "this_cpu_bf16", lambda: emulated)
    resolve = dtypes.resolve_precision
    assert resolve("auto", {}, None, "vllm") == dtypes.EvalPrecision("auto", "dtype auto: vLLM's choice for this "
                                                                     "checkpoint", False)  # fmt: skip
    assert resolve("auto", {"bf16": True}, "r.yaml", "vllm") == dtypes.EvalPrecision(
        "bfloat16", "bf16: true as set in r.yaml", True
    )
    assert resolve("float16", {"bf16": True}, "r.yaml", "vllm").dtype == "float16"
    monkeypatch.setattr(dtypes, "generation_device", lambda: "cpu")
    assert resolve("auto", {"bf16": "auto"}, "r.yaml", "transformers") == dtypes.EvalPrecision(
        "float32", "dtype auto: this CPU has no avx512_bf16 or amx_bf16 flag", False
    )
    assert resolve("auto", {"bf16": True}, "r.yaml", "transformers").why == (
        "bf16: true as set in r.yaml, but this CPU has no avx512_bf16 or amx_bf16 flag"
    )
    monkeypatch.setattr(dtypes, "generation_device", lambda: "cuda")
    assert resolve("auto", {}, None, "transformers") == dtypes.EvalPrecision(
        "bfloat16", "dtype auto: bfloat16 on a GPU", False
    )
    assert resolve("auto", {"bf16": False}, "r.yaml", "transformers").dtype == "float32"
