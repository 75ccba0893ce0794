"""The evaluation's precision: which dtype it asks its backend for, why, and the one line that says what it computes in.

Precedence: `--dtype` when set (not `auto`); else the recipe's `bf16` when it sets true or false (`EVAL_RECIPE`, so a
run trained with `bf16: false` is evaluated in float32, as it generated in training); else `auto`: on a CPU bfloat16
where the CPU computes bf16 natively (`drgrpo.core.cpu_bf16`, what `bf16: auto` picks in training), else float32; on
a GPU bfloat16 for the generation engine, and vLLM's own choice for the checkpoint.

The line is written after the backend is built, from what it holds (`TransformersBackend.computes()`: the dtype of
the weights the engine decodes with, a copy or the loaded weights; the engine never autocasts), so it cannot say one
precision while another runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

AUTO = "auto"
SHORT = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}  # in the default folder's name


@dataclass(frozen=True)
class EvalPrecision:
    """The dtype an evaluation asks its backend for and why; `chosen`: set by `--dtype` or the recipe, not `auto`."""

    dtype: str
    why: str
    chosen: bool


def generation_device() -> str:
    """Where the generation engine runs (`TransformersBackend`'s default): cuda when a GPU is visible, else cpu."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_precision(dtype: str, recipe: dict, recipe_path: str | Path | None, backend: str) -> EvalPrecision:
    """The evaluation's dtype: `dtype` (the `--dtype` argument) unless `auto`, else the recipe's `bf16` when it sets
    true or false, else what `auto` means for `backend` ('vllm' or 'transformers') on this machine."""
    if dtype != AUTO:
        return EvalPrecision(dtype, f"--dtype {dtype}", True)
    from drgrpo.core.cpu_bf16 import parse_bf16, this_cpu_bf16

    device = generation_device() if backend == "transformers" else "cuda"
    bf16 = parse_bf16(recipe.get("bf16"))
    if isinstance(bf16, bool):
        why = f"bf16: {str(bf16).lower()} as set in {recipe_path}"
        if bf16 and device == "cpu" and not this_cpu_bf16().supported:  # as training says it: it runs, emulated
            why += f", but {this_cpu_bf16().reason}"
        return EvalPrecision("bfloat16" if bf16 else "float32", why, True)
    if backend == "vllm":
        return EvalPrecision(AUTO, "dtype auto: vLLM's choice for this checkpoint", False)
    if device == "cpu":
        cpu = this_cpu_bf16()
        return EvalPrecision("bfloat16" if cpu.supported else "float32", f"dtype auto: {cpu.reason}", False)
    return EvalPrecision("bfloat16", "dtype auto: bfloat16 on a GPU", False)


def precision_line(computes: str, how: str, why: str) -> str:
    """The evaluation's one precision line: the dtype it computes in, on what, and why."""
    return f"evaluation precision: {computes} ({how}; {why})"
