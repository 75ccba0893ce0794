"""Generation backends: vLLM when it is installed and a GPU is present, else the CPU generation engine that training
uses (`drgrpo.algorithm.rollout.engine`: the same sampler, per-row seeds, a bf16 copy where the CPU computes bf16)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass

from drgrpo.algorithm.eos import merge_token_ids
from drgrpo.evaluation.dtypes import generation_device


@dataclass(frozen=True)
class Request:
    """One sample to generate."""

    problem_index: int
    sample_index: int
    prompt_ids: tuple[int, ...]
    seed: int


@dataclass(frozen=True)
class Generation:
    """What a backend returns for one request."""

    text: str
    num_tokens: int
    truncated: bool


def vllm_usable() -> bool:
    """True when vLLM is installed and a CUDA GPU is visible (vLLM is never imported on a CPU-only machine)."""
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def choose_backend(name: str) -> str:
    """Resolve `auto` to `vllm` or `transformers`; refuse `vllm` where it cannot run."""
    if name == "auto":
        return "vllm" if vllm_usable() else "transformers"
    if name == "vllm" and not vllm_usable():
        raise ValueError(
            "backend 'vllm' needs vLLM installed (`pip install -e '.[vllm]'`) and a CUDA GPU; "
            "use backend 'transformers' or 'auto'."
        )
    if name not in ("vllm", "transformers"):
        raise ValueError(f"Unknown backend {name!r}: choose 'auto', 'vllm' or 'transformers'.")
    return name


def _eos_ids(model_generation_config, tokenizer, extra_eos_ids: Sequence[int] = ()) -> list[int]:
    """The model's eos ids, the tokenizer's eos, then the recipe's `extra_eos_tokens` ids (drgrpo.algorithm.eos)."""
    ids = model_generation_config.eos_token_id if model_generation_config is not None else None
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    ids = merge_token_ids(ids, extra_eos_ids)
    if not ids:
        raise ValueError("The model and tokenizer name no end-of-sequence token; generation would never stop.")
    return ids


def _checkpoint_generation_config(model_path: str):
    """The checkpoint's generation_config.json (for its stop tokens), or None when it has none."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model_path)
    except OSError:
        return None


def training_precision_dtype(bf16: bool) -> str:
    """The evaluator's `dtype` that matches a training run's generation (its resolved `bf16`): the CPU engine's bf16
    copy, or float32. An experiment that evaluates a run it trained passes this, never `auto`: a recipe with
    `bf16: false` on a CPU with native bf16 would otherwise be evaluated in bf16."""
    return "bfloat16" if bf16 else "float32"


def cpu_precision(dtype: str) -> tuple[str, str]:
    """(generation dtype, one line) for the engine on a CPU: `auto` is bfloat16 where the CPU computes bf16 natively
    (drgrpo/core/cpu_bf16.py), as the CPU engine generates in training, else float32; a dtype name is taken as set.
    The weights load in float32 and the engine casts its copy, as in training."""
    from drgrpo.core.cpu_bf16 import this_cpu_bf16

    if dtype == "auto":
        cpu = this_cpu_bf16()
        chosen = "bfloat16" if cpu.supported else "float32"
        return chosen, f"{chosen} weights, the CPU engine's (dtype auto: {cpu.reason})"
    return dtype, f"{dtype} weights, the CPU engine's (dtype {dtype})"


class TransformersBackend:
    """The CPU generation engine of training (`drgrpo.algorithm.rollout.engine`) on a saved model: what runs on CPU,
    and on a GPU without vLLM. Each row draws from its own seed, so its random numbers never depend on its batch (its
    logits can, in bf16: a sample alone and in a batch can differ; docs/demo.md, batch invariance)."""

    def __init__(
        self,
        model_path: str,
        tokenizer,
        dtype: str = "auto",
        device: str | None = None,
        extra_eos_ids: Sequence[int] = (),
    ):
        import torch

        from drgrpo.algorithm.rollout.weights import inference_model
        from drgrpo.core.adapters import load_causal_lm

        self.device = device or generation_device()
        if self.device == "cpu":
            name, self.precision = cpu_precision(dtype)
            load_dtype = torch.float32
        else:
            name = "bfloat16" if dtype == "auto" else dtype
            self.precision = f"{name} weights (dtype {dtype})"
            load_dtype = getattr(torch, name)
        # A LoRA adapter folder loads as its base with the adapter merged in (drgrpo/core/adapters.py).
        model = load_causal_lm(model_path, dtype=load_dtype).to(self.device).eval()
        self.model = inference_model(model, getattr(torch, name))
        # What `computes()` reports; the loaded model itself is not kept (the copy, when there is one, is enough).
        self.copied, self.loaded_dtype = self.model is not model, str(load_dtype).removeprefix("torch.")
        self.tokenizer = tokenizer
        self.eos_ids = _eos_ids(model.generation_config, tokenizer, extra_eos_ids)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self.forwards = 0  # model calls of the engine so far

    def computes(self) -> tuple[str, str]:
        """(the dtype the engine decodes in, on what): read from the weights it generates with (a copy's packed linear
        layers included), not from the dtype asked for; the engine runs no autocast, so the weights' dtype is the
        matmuls' dtype."""
        from drgrpo.algorithm.rollout.weights import PackedLinear

        dtypes = {p.dtype for p in self.model.parameters() if p.is_floating_point()}
        dtypes |= {m.dtype for m in self.model.modules() if isinstance(m, PackedLinear)}
        name = "/".join(sorted(str(dtype).removeprefix("torch.") for dtype in dtypes))
        engine = "the CPU engine" if self.device == "cpu" else f"the generation engine on {self.device}"
        weights = f"a {name} copy of the {self.loaded_dtype} weights" if self.copied else f"the {name} weights"
        return name, f"{engine} on {weights}, no autocast"

    def generate(self, requests: Sequence[Request], temperature: float, top_p: float, max_new_tokens: int):
        completions = self.generate_ids(
            [r.prompt_ids for r in requests], [r.seed for r in requests], temperature, top_p, max_new_tokens
        )
        generations = []
        for ids in completions:
            stop = next((i for i, token in enumerate(ids) if token in self.eos_ids), None)
            kept = ids if stop is None else ids[: stop + 1]  # the stop token counts, as in TRL's completion mask
            generations.append(
                Generation(
                    text=self.tokenizer.decode(kept, skip_special_tokens=True),
                    num_tokens=len(kept),
                    truncated=stop is None,
                )
            )
        return generations

    def _engine(self, temperature: float, top_p: float):
        from drgrpo.algorithm.rollout.engine import GenerationEngine
        from drgrpo.algorithm.rollout.sampler import SamplingParams

        params = SamplingParams(temperature=temperature, top_p=top_p if temperature > 0 else 1.0)
        return GenerationEngine(self.eos_ids, self.pad_id, params)

    def generate_ids(
        self,
        prompts: Sequence[Sequence[int]],
        seeds: Sequence[int],
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        budgets: Sequence[int] | None = None,
        stop=None,
    ) -> list[list[int]]:
        """The generated ids of each prompt (each row's own, ending at its eos or budget), each row sampled from its
        own seed (temperature 0: greedy); `budgets` per row (default `max_new_tokens`), `stop(row, token)` e.g. the
        tool's fence."""
        engine = self._engine(temperature, top_p)
        budgets = list(budgets) if budgets is not None else [max_new_tokens] * len(prompts)
        samples = engine.generate(self.model, prompts, seeds, budgets, stop)
        self.forwards += engine.forwards
        return [sample.ids for sample in samples]

    def generate_turn(
        self,
        rows: Sequence[Sequence[int]],
        seeds: Sequence[int],
        budgets: Sequence[int],
        temperature: float,
        top_p: float,
        reader,
    ) -> list[tuple[list[int], None]]:
        """One turn of the Python tool's loop (`drgrpo.algorithm.rollout.loop`): each row stops at its program's closing
        fence, an eos or its own token budget (`drgrpo.algorithm.rollout.generation.TurnStop`)."""
        from drgrpo.algorithm.rollout.generation import TurnStop

        stop = TurnStop(reader, rows, budgets, self.eos_ids, 0)
        ids = self.generate_ids(rows, seeds, temperature, top_p, max(1, max(budgets)), budgets, stop.ends_row)
        return [(row, None) for row in ids]


class VLLMBackend:
    """vLLM offline generation; each request carries its own seed, so samples do not depend on scheduling."""

    def __init__(
        self,
        model_path: str,
        tokenizer,
        dtype: str = "auto",
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        seed: int = 0,
        extra_eos_ids: Sequence[int] = (),
    ):
        from vllm import LLM

        from drgrpo.core.adapters import whole_model_folder

        model_path = whole_model_folder(model_path)  # vLLM reads a folder: a LoRA adapter's merged model
        self.llm = LLM(
            model=model_path,
            dtype=dtype,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=seed,
        )
        self.tokenizer = tokenizer
        self.eos_ids = _eos_ids(_checkpoint_generation_config(model_path), tokenizer, extra_eos_ids)
        self.dtype = dtype

    def computes(self) -> tuple[str, str]:
        """(the dtype vLLM holds the weights in, on what): from its model config, else the dtype asked for."""
        config = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        dtype = getattr(config, "dtype", None)
        return (self.dtype if dtype is None else str(dtype).removeprefix("torch.")), "vLLM's weights"

    def generate(self, requests: Sequence[Request], temperature: float, top_p: float, max_new_tokens: int):
        from vllm import SamplingParams

        params = [
            SamplingParams(
                n=1,
                temperature=temperature,
                top_p=top_p if temperature > 0 else 1.0,
                max_tokens=max_new_tokens,
                seed=request.seed if temperature > 0 else None,
                stop_token_ids=self.eos_ids,
                skip_special_tokens=True,
            )
            for request in requests
        ]
        prompts = [{"prompt_token_ids": list(request.prompt_ids)} for request in requests]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        generations = []
        for output in outputs:
            completion = output.outputs[0]
            generations.append(
                Generation(
                    text=completion.text,
                    num_tokens=len(completion.token_ids),
                    truncated=completion.finish_reason == "length",
                )
            )
        return generations

    def generate_turn(
        self,
        rows: Sequence[Sequence[int]],
        seeds: Sequence[int],
        budgets: Sequence[int],
        temperature: float,
        top_p: float,
        reader,
    ) -> list[tuple[list[int], None]]:
        """One turn of the Python tool's loop: each row's own budget and seed, and the stop string of the usual
        closing fence (the loop cuts every row on its ids, so a late or early stop gives the same trajectory)."""
        from vllm import SamplingParams

        from drgrpo.algorithm.rollout.generation import VLLM_STOP

        params = [
            SamplingParams(
                n=1,
                temperature=temperature,
                top_p=top_p if temperature > 0 else 1.0,
                max_tokens=max(1, budget),
                seed=seed if temperature > 0 else None,
                stop_token_ids=self.eos_ids,
                stop=[VLLM_STOP],
                include_stop_str_in_output=True,
            )
            for seed, budget in zip(seeds, budgets, strict=True)
        ]
        prompts = [{"prompt_token_ids": list(ids)} for ids in rows]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [(list(output.outputs[0].token_ids), None) for output in outputs]
