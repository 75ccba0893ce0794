"""The resumable runner: evaluation arguments, benchmark resolution, resume checks, generation and writing."""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from drgrpo.algorithm.eos import extra_eos_token_ids
from drgrpo.algorithm.sampling_keys import EVALUATION, check_context_length, check_sampling_values
from drgrpo.core.adapters import tokenizer_folder
from drgrpo.core.errors import command_flag
from drgrpo.core.models import read_model_config, resolve_model
from drgrpo.core.threads import adapt_torch_threads
from drgrpo.data.golds import ANSWER_FORMATS
from drgrpo.evaluation.backends import Request, TransformersBackend, VLLMBackend, choose_backend
from drgrpo.evaluation.benchmarks import PRESETS, resolve_preset
from drgrpo.evaluation.code import CODE_TESTS, code_settings, grade_code_completions
from drgrpo.evaluation.dtypes import EvalPrecision, precision_line, resolve_precision
from drgrpo.evaluation.folders import default_output_dir, model_label
from drgrpo.evaluation.folders import sanitize as _sanitize
from drgrpo.evaluation.problems import Problem, build_prompts, data_fingerprint, load_rows, problems_from_rows
from drgrpo.evaluation.report import SAMPLES_FILE, SUMMARY_JSON, SUMMARY_MD, summarize, summary_markdown
from drgrpo.evaluation.sampling import sample_seed
from drgrpo.evaluation.saved_samples import _check_config, read_samples
from drgrpo.evaluation.tool_eval import TOOL_MAX_CALLS_HELP, ToolSession, check_tool_budget
from drgrpo.evaluation.verdicts import CORRECT, answer_extraction_mode, answers_equivalent, grade_completions

logger = logging.getLogger(__name__)


@dataclass
class EvalArguments:
    """One evaluation: a model, a benchmark (preset or local file), the prompt, the sampling and the output folder."""

    model_name_or_path: str = field(metadata={"help": "A run's output_dir (a LoRA adapter too), short name or hub id."})
    benchmark: str | None = field(
        default=None,
        metadata={"help": f"Preset ({', '.join(PRESETS)}) or a local data file (same as --data)."},
    )
    data: str | None = field(
        default=None,
        metadata={"help": "Local .jsonl/.json/.parquet/.csv file. With a preset, read it with the preset's columns."},
    )
    question_column: str | None = field(
        default=None, metadata={"help": "Column holding the question (default: the preset's, else 'question')."}
    )
    answer_column: str | None = field(
        default=None, metadata={"help": "Column holding the gold answer (default: the preset's, else 'answer')."}
    )
    answer_format: str | None = field(
        default=None,
        metadata={"help": f"How the gold is stored: {', '.join(ANSWER_FORMATS)} (default: the preset's, else 'auto')."},
    )
    split: str | None = field(default=None, metadata={"help": "Hub split (default: the preset's)."})
    max_problems: int | None = field(default=None, metadata={"help": "Evaluate only the first N problems (None: all)."})
    recipe: str | None = field(
        default=None,
        metadata={
            "help": "Training recipe YAML whose prompt_template, system_prompt, chat_template_kwargs, bf16 (the "
            "precision, unless --dtype is set) and, for code benchmarks, code_* sandbox limits to use."
        },
    )
    prompt_template: str | None = field(
        default=None,
        metadata={"help": "'chat', 'r1', 'qwen_math' or 'plain' (default: the recipe's, else 'chat')."},
    )
    system_prompt: str | None = field(default=None, metadata={"help": "System message for the 'chat' template."})
    chat_template_kwargs: str | None = field(
        default=None,
        metadata={"help": "JSON object passed to the chat template, e.g. '{\"enable_thinking\": false}'."},
    )
    extra_eos_tokens: list[str] | None = field(
        default=None,
        metadata={
            "help": "Tokens that also end a completion, besides the model's own eos, e.g. '<|im_end|>' (default: "
            "the recipe's extra_eos_tokens). Each must be a single token of the model's tokenizer."
        },
    )
    answer_extraction_mode: str | None = field(
        default=None,
        metadata={
            "help": "Which part of a completion is its final answer: boxed_only, math_verify or lenient "
            "(docs/grading.md). Default: the recipe's answer_extraction_mode, else math_verify, as in training.",
            "choices": ["boxed_only", "math_verify", "lenient"],
        },
    )
    n: int = field(default=1, metadata={"help": "Samples per problem."})
    temperature: float = field(default=0.0, metadata={"help": "Sampling temperature; 0 is greedy decoding."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling cut (1.0: off)."})
    max_new_tokens: int = field(default=3000, metadata={"help": "Generation budget per sample (paper: 3000)."})
    seed: int = field(default=0, metadata={"help": "Seed; every sample's randomness derives from it."})
    backend: str = field(
        default="auto", metadata={"help": "'auto' (vLLM if installed and a GPU is present), 'vllm' or 'transformers'."}
    )
    batch_size: int | None = field(
        default=None,
        metadata={"help": "Samples per generate call and per write (default: 32 transformers, 1024 vLLM)."},
    )
    dtype: str = field(
        default="auto",
        metadata={
            "help": "Generation dtype: auto, float32, bfloat16 or float16. auto: the recipe's bf16 when it sets true "
            "(bfloat16) or false (float32); else bfloat16 on a GPU (vLLM: its own choice), and on CPU bfloat16 where "
            "the CPU computes bf16 natively (the CPU engine's copy, as training generates), else float32."
        },
    )
    tensor_parallel_size: int = field(default=1, metadata={"help": "vLLM: GPUs per model."})
    gpu_memory_utilization: float = field(default=0.9, metadata={"help": "vLLM: share of GPU memory to use."})
    output_dir: str | None = field(
        default=None,
        metadata={
            "help": "Output folder (default: outputs/eval/<model>/<benchmark>, with the settings that differ from the "
            "defaults after a dash, e.g. math500-n8-t1.0 for --n 8 --temperature 1.0)."
        },
    )
    overwrite: bool = field(
        default=False, metadata={"help": "Delete existing results in output_dir instead of resuming."}
    )
    progress: bool = field(default=True, metadata={"help": "Show a progress bar while generating."})
    truncated_as_wrong: bool = field(
        default=False,
        metadata={
            "help": "Count samples cut off at max_new_tokens as wrong in every metric, whatever the grader read in "
            "them, as the Dr.GRPO paper scores them (`make eval BENCH=paper` turns it on). Truncated samples are "
            "reported separately either way; the setting only changes the summary, so it never blocks a resume."
        },
    )

    tool_max_calls: int = field(default=0, metadata={"help": TOOL_MAX_CALLS_HELP})

    def __post_init__(self):
        check_tool_budget(self.tool_max_calls)
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}.")
        # The sampling table training uses (drgrpo/algorithm/sampling_keys.py), where temperature 0 is greedy.
        check_sampling_values({"temperature": self.temperature, "top_p": self.top_p}, "evaluation", purpose=EVALUATION)
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}.")
        if self.answer_format is not None and self.answer_format not in ANSWER_FORMATS:
            raise ValueError(f"answer_format {self.answer_format!r}: choose one of {', '.join(ANSWER_FORMATS)}.")
        if self.answer_extraction_mode is not None:
            from rewards.answer_policy import check_extraction_mode

            check_extraction_mode(self.answer_extraction_mode)
        if self.n > 1 and self.temperature == 0:
            logger.warning("n=%d with temperature 0: greedy samples are identical, pass@k = pass@1.", self.n)


@dataclass(frozen=True)
class ResolvedBenchmark:
    """The benchmark as the run reads it."""

    name: str
    problems: list[Problem]
    source: str
    answer_format: str = "auto"


def resolve_benchmark(args: EvalArguments) -> ResolvedBenchmark:
    """Load the problems named by `--benchmark` and/or `--data` with the right columns and gold format."""
    benchmark, data = args.benchmark, args.data
    preset = None
    if benchmark and (data is None) and (Path(benchmark).exists() or Path(benchmark).suffix in _DATA_SUFFIXES):
        data, benchmark = benchmark, None  # `BENCH=path/to/file.jsonl`
    if benchmark:
        preset = resolve_preset(benchmark)
    if preset is None and data is None:
        raise ValueError("Name a benchmark: --benchmark PRESET (e.g. math500) or --data FILE.")
    question_column = args.question_column or (preset.question_column if preset else "question")
    answer_column = args.answer_column or (preset.answer_column if preset else "answer")
    answer_format = args.answer_format or (preset.answer_format if preset else "auto")
    if data is not None:
        path = Path(data)
        rows = load_rows(data=data)
        source = str(path)
        generic = path.stem.lower() in {"test", "train", "validation", "eval", "data", "dataset"}
        name = preset.name if preset else _sanitize(f"{path.parent.name}_{path.stem}" if generic else path.stem)
    else:
        rows = load_rows(
            dataset_name=preset.dataset_name,
            dataset_config=preset.dataset_config,
            split=args.split or preset.split,
            preset=preset.name,
        )
        source = f"{preset.dataset_name} ({preset.dataset_config or 'default'}, {args.split or preset.split})"
        name = preset.name
    if args.max_problems is not None:
        rows = rows[: args.max_problems]
    problems = problems_from_rows(rows, question_column, answer_column, answer_format, source=source)
    if not problems:
        raise ValueError(f"{source} has no rows to evaluate.")
    return ResolvedBenchmark(name=name, problems=problems, source=source, answer_format=answer_format)


_DATA_SUFFIXES = {".jsonl", ".json", ".parquet", ".csv"}
_TEMPLATE_KEYS = ("prompt_template", "system_prompt", "chat_template_kwargs", "extra_eos_tokens", "chat_examples")


def _recipe_settings(recipe: str | Path | None) -> dict:
    """Every key of a training recipe YAML, typed as training reads it ({} without one)."""
    from drgrpo.recipe.cli import recipe_values  # bad YAML, a key written twice, a wrong value: one line

    if recipe is None:
        return {}
    if not Path(recipe).is_file():
        raise FileNotFoundError(f"recipe {str(recipe)!r} not found.")
    return recipe_values(recipe)


def recipe_prompt_settings(recipe: str | Path) -> dict:
    """The prompt settings (template, system prompt, chat-template kwargs, extra end-of-answer tokens) of a training
    recipe YAML."""
    settings = _recipe_settings(recipe)
    return {key: settings[key] for key in _TEMPLATE_KEYS if settings.get(key) is not None}


def extraction_mode(args: EvalArguments) -> str:
    """The answer-extraction mode: the argument, else the recipe's, else the reward library's default."""
    return answer_extraction_mode(args.answer_extraction_mode, _recipe_settings(args.recipe))


def _prompt_settings(args: EvalArguments) -> tuple[str, str | None, dict]:
    from drgrpo.data.templates import check_template

    recipe = recipe_prompt_settings(args.recipe) if args.recipe else {}
    template = args.prompt_template or recipe.get("prompt_template") or "chat"
    system_prompt = args.system_prompt if args.system_prompt is not None else recipe.get("system_prompt")
    check_template(template, system_prompt, recipe.get("chat_examples"))
    kwargs = recipe.get("chat_template_kwargs") or {}
    if args.chat_template_kwargs:
        try:
            kwargs = json.loads(args.chat_template_kwargs)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"chat_template_kwargs must be a JSON object, e.g. '{{\"enable_thinking\": false}}': {error}"
            ) from error
        if not isinstance(kwargs, dict):
            raise ValueError("chat_template_kwargs must be a JSON object, e.g. '{\"enable_thinking\": false}'.")
    return template, system_prompt, kwargs


def _extra_eos_tokens(args: EvalArguments) -> list[str]:
    """`--extra_eos_tokens`, else the recipe's: the same stop tokens as in training (docs/eos-tokens.md)."""
    if args.extra_eos_tokens is not None:
        return list(args.extra_eos_tokens)
    tokens = recipe_prompt_settings(args.recipe).get("extra_eos_tokens") if args.recipe else None
    return [tokens] if isinstance(tokens, str) else list(tokens or [])


def run_evaluation(args: EvalArguments) -> dict:
    """Evaluate, resuming from whatever `output_dir/samples.jsonl` already holds; write and return the summary."""
    from transformers import AutoTokenizer

    # A short name becomes its cached folder; a missing folder or an uncached hub id offline fails in one line. A
    # LoRA run's output_dir (an adapter) is evaluated as its base with the adapter merged in (drgrpo/core/adapters.py).
    model_path = resolve_model(args.model_name_or_path, key="model_name_or_path", adapters=True)
    bench = resolve_benchmark(args)
    template, system_prompt, chat_kwargs = _prompt_settings(args)
    examples = recipe_prompt_settings(args.recipe).get("chat_examples") if args.recipe else None
    mode = extraction_mode(args)
    backend_name = choose_backend(args.backend)
    precision = resolve_precision(args.dtype, _recipe_settings(args.recipe), args.recipe, backend_name)
    config = {
        "model": model_label(args.model_name_or_path),  # one model, one name however typed (folders.py)
        "benchmark": bench.name,
        "source": bench.source,
        "data_fingerprint": data_fingerprint(bench.problems),
        "num_problems": len(bench.problems),
        "prompt_template": template,
        "system_prompt": system_prompt,
        "chat_template_kwargs": chat_kwargs,
        "answer_extraction_mode": mode,
        "n": args.n,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens,
        "seed": args.seed,
        "dtype": precision.dtype,  # precision changes the samples (a bf16 and a float32 run differ)
    }
    extra_eos_tokens = _extra_eos_tokens(args)
    if extra_eos_tokens:  # only when set, so that evaluations written before the key existed still resume
        config["extra_eos_tokens"] = extra_eos_tokens
    if examples:  # the same: only when the recipe has few-shot turns
        config["chat_examples"] = examples
    tool = ToolSession.from_recipe(args.tool_max_calls, _recipe_settings(args.recipe)) if args.tool_max_calls else None
    if tool is not None:  # B = 0 writes the config as before the tool existed
        config.update(tool.config())
    # The default folder names the settings that differ from the defaults (drgrpo/evaluation/folders.py), so runs of
    # other settings get folders of their own; the same command finds its folder again and resumes.
    output_dir = (
        Path(args.output_dir)
        if args.output_dir
        else default_output_dir(args.model_name_or_path, bench.name, config, args.max_problems, precision)
    )
    # A folder written before `dtype` was recorded resumes when the precision is `auto`, as it was then.
    _check_config(
        output_dir, config, args.overwrite, optional=() if precision.chosen else ("dtype",), same={"model": model_label}
    )
    samples_path = output_dir / SAMPLES_FILE
    done = {(r["problem_index"], r["sample_index"]) for r in read_samples(samples_path)}

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder(model_path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    extra_eos_ids = extra_eos_token_ids(tokenizer, extra_eos_tokens)  # an unknown token fails before the model loads
    questions = [p.question for p in bench.problems]
    built = build_prompts(tokenizer, questions, template, system_prompt, chat_kwargs, examples)
    # The longest prompt and max_new_tokens must fit the model's context (drgrpo/algorithm/sampling_keys.py): said
    # here, from its config.json, before the model loads.
    if (model_config := read_model_config(model_path)) is not None:
        longest = max((len(ids) for _, ids in built), default=0)
        check_context_length(
            model_config, args.model_name_or_path, args.max_new_tokens, longest, "max_new_tokens", "the longest prompt"
        )
    prompts = {p.index: prompt for p, prompt in zip(bench.problems, built, strict=True)}
    pending = [
        Request(p.index, s, tuple(prompts[p.index][1]), sample_seed(args.seed, p.index, s))
        for p in bench.problems
        for s in range(args.n)
        if (p.index, s) not in done
    ]
    total = len(bench.problems) * args.n
    if done:
        logger.info("Resuming %s: %d of %d samples already written.", output_dir, total - len(pending), total)
    if pending:
        try:
            _generate_and_write(
                args, model_path, backend_name, tokenizer, bench, prompts, pending, samples_path, extra_eos_ids, mode,
                tool, precision,
            )  # fmt: skip
        except KeyboardInterrupt:
            saved = len(read_samples(samples_path))
            again = "the same make eval command" if os.environ.get("MAKELEVEL") else "the same command"
            raise KeyboardInterrupt(
                f"{saved} of {total} samples are saved in {samples_path}; rerun {again} to resume (saved samples are "
                "not generated again)."
            ) from None

    rows = read_samples(samples_path)
    keys = [(r["problem_index"], r["sample_index"]) for r in rows]
    if len(keys) != len(set(keys)):
        raise ValueError(f"{samples_path} has duplicate samples; rerun with {command_flag('--overwrite true')}.")
    summary = {
        **config,
        "backend": backend_name,
        **summarize(rows, args.n, answers_equivalent, args.truncated_as_wrong),
    }
    if bench.answer_format == CODE_TESTS:  # programs have no answer to vote on
        summary.pop(f"maj@{args.n}")
    if tool is not None:
        summary.update(tool.summary(rows))
    (output_dir / SUMMARY_JSON).write_text(json.dumps(summary, indent=2) + "\n")
    (output_dir / SUMMARY_MD).write_text(summary_markdown(summary))
    summary["output_dir"] = str(output_dir)
    return summary


def _generate_and_write(
    args, model_path, backend_name, tokenizer, bench, prompts, pending, samples_path, extra_eos_ids, mode, tool=None,
    precision: EvalPrecision | None = None,
) -> None:  # fmt: skip
    from tqdm.auto import tqdm

    precision = precision or EvalPrecision(args.dtype, f"dtype {args.dtype}", args.dtype != "auto")
    if backend_name == "vllm":
        backend = VLLMBackend(
            model_path,
            tokenizer,
            dtype=precision.dtype,
            tensor_parallel_size=args.tensor_parallel_size,
            gpu_memory_utilization=args.gpu_memory_utilization,
            seed=args.seed,
            extra_eos_ids=extra_eos_ids,
        )
        batch_size = args.batch_size or 1024
    else:
        backend = TransformersBackend(model_path, tokenizer, dtype=precision.dtype, extra_eos_ids=extra_eos_ids)
        batch_size = args.batch_size or 32
        # Similar prompt lengths share a batch, so left padding wastes little; samples do not depend on batching.
        pending = sorted(pending, key=lambda r: (-len(r.prompt_ids), r.problem_index, r.sample_index))
    # The stage's one precision line, read from the built backend: what it computes in, not what was asked for.
    logger.info(precision_line(*backend.computes(), precision.why))
    golds = {p.index: p.gold for p in bench.problems}
    questions = {p.index: p.question for p in bench.problems}
    grade = functools.partial(grade_completions, extraction_mode=mode)
    if bench.answer_format == CODE_TESTS:  # run the programs on the tests, with the training recipe's code limits
        settings = code_settings(_recipe_settings(args.recipe))

        def grade(completions, tests, questions=None):
            return grade_code_completions(completions, tests, settings)

    with (
        open(samples_path, "a") as out,
        tqdm(total=len(pending), desc=f"eval {bench.name}", unit="sample", disable=not args.progress) as bar,
    ):
        for start in range(0, len(pending), batch_size):
            batch = pending[start : start + batch_size]
            if backend_name == "transformers" and backend.device == "cpu":
                adapt_torch_threads()  # the cores other processes leave free (drgrpo/core/threads.py)
            # With the Python tool: its loop, graded on the policy's own text (drgrpo/evaluation/tool_eval.py).
            generate = backend.generate if tool is None else functools.partial(tool.generate, backend, tokenizer)
            generations = generate(batch, args.temperature, args.top_p, args.max_new_tokens)
            grades = grade(
                [g.text for g in generations],
                [golds[r.problem_index] for r in batch],
                questions=[questions[r.problem_index] for r in batch],
            )
            lines = []
            for request, generation, (verdict, extracted) in zip(batch, generations, grades, strict=True):
                row = {
                    "problem_index": request.problem_index,
                    "sample_index": request.sample_index,
                    "question": questions[request.problem_index],
                    "gold": golds[request.problem_index],
                    "prompt": prompts[request.problem_index][0],
                    "completion": generation.text,
                    "extracted": extracted,
                    "verdict": verdict,
                    "correct": verdict == CORRECT,
                    "num_tokens": generation.num_tokens,
                    "truncated": generation.truncated,
                }
                if tool is not None:
                    row.update(generation.record())  # every turn: its text, program, observation, status
                lines.append(json.dumps(row, ensure_ascii=False) + "\n")
            out.write("".join(lines))  # one write per batch: a kill leaves at most one torn line
            out.flush()
            os.fsync(out.fileno())
            bar.update(len(batch))


def evaluate(
    model_path: str,
    data_file: str | None = None,
    question_column: str | None = None,
    answer_column: str | None = None,
    prompt_template: str | None = None,
    n: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = 3000,
    output_dir: str | None = None,
    batch_size: int | None = None,
    **kwargs: Any,
) -> dict:
    """Evaluate `model_path` on a local file (or `benchmark=PRESET`) and return the summary dict.

    The Python entry point used by the demo; keyword arguments are those of `EvalArguments` (top_p, seed,
    benchmark, answer_format, system_prompt, max_problems, backend, overwrite, progress, ...).
    """
    unknown = set(kwargs) - {f.name for f in fields(EvalArguments)}
    if unknown:
        raise TypeError(f"evaluate() got unknown arguments {sorted(unknown)}; see drgrpo.evaluation.EvalArguments.")
    args = EvalArguments(
        model_name_or_path=str(model_path),
        data=None if data_file is None else str(data_file),
        question_column=question_column,
        answer_column=answer_column,
        prompt_template=prompt_template,
        n=n,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        output_dir=None if output_dir is None else str(output_dir),
        batch_size=batch_size,
        **kwargs,
    )
    return run_evaluation(args)
