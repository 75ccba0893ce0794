"""Evaluation: pass@1, pass@k and maj@k on math benchmarks (pass@k on code benchmarks), graded by the same verifier
that rewards training.

One run = one model on one benchmark with one set of settings, written to one folder (by default
`outputs/eval/<model>/<benchmark>[-<settings>]`, `folders`):
- `samples.jsonl`: one row per (problem, sample), appended and flushed batch by batch, so an interrupted run loses
  nothing and a rerun of the same command generates only what is missing;
- `summary.json` / `summary.md`: pass@1 (mean over samples), unbiased pass@k for k = 1, 2, 4, ..., n, maj@n,
  mean completion length of correct and of incorrect answers, truncation rate, unparsable golds;
- `eval_config.json`: everything that decides the samples, checked on resume so that runs never mix.

Every sample is a deterministic function of (seed, problem index, sample index), not of batch composition: each
sample draws from its own random generator (the CPU engine's sampler, `drgrpo.algorithm.rollout.sampler`), so a
resumed run writes the same rows as an uninterrupted one. Generation runs on vLLM when it is installed and a GPU is
present, else on the CPU generation engine that training uses.

Golds are read by training's reader (`drgrpo.data.golds`: `--answer_format` names the same readers as a recipe's
`answer_extraction`). Modules, each importing only the ones listed before it:
- `metrics`: pass@k (unbiased estimator) and majority voting;
- `benchmarks`: presets (hub id, split, columns, gold format), aliases, the paper's reference numbers;
- `hub`: presets from the hub, one probe of it, the cache only where it is out of reach, one line naming the fix;
- `problems`: benchmark rows as problems, their fingerprint, their prompts;
- `sampling`: per-sample seeds;
- `dtypes`: the dtype an evaluation asks for (`--dtype`, else the recipe's `bf16`, else auto) and its one line;
- `backends`: vLLM, and the CPU generation engine on a saved model;
- `verdicts`: the reward library's verifier as evaluation verdicts;
- `code`: code benchmarks, whose programs the code reward's sandbox runs on their tests (pass@k, no maj@k);
- `tool_eval`: evaluation with the Python tool at a call budget (the training rollout's loop, every turn kept);
- `report`: summaries, their markdown, comparison tables across runs (a row per setting where a model has several);
- `folders`: the default output folder, named by the settings that differ from the defaults;
- `saved_samples`: the samples written so far, and the settings check that keeps runs from mixing;
- `runner`: `EvalArguments`, resume checks, `run_evaluation` / `evaluate`.
"""

from drgrpo.data.golds import (
    ANSWER_FORMATS,
    auto_answer,
    gsm8k_final_answer,
    last_boxed,
    list_answer,
    normalize_gold,
    number_answer,
    plain_answer,
)
from drgrpo.evaluation.backends import (
    Generation,
    Request,
    TransformersBackend,
    VLLMBackend,
    choose_backend,
    vllm_usable,
)
from drgrpo.evaluation.benchmarks import BENCHMARK_ORDER, PAPER_RESULTS, PRESETS, BenchmarkPreset, resolve_preset
from drgrpo.evaluation.metrics import majority_vote, pass_at_k, pass_at_k_values
from drgrpo.evaluation.problems import Problem, build_prompts, data_fingerprint, load_rows, problems_from_rows
from drgrpo.evaluation.report import (
    CONFIG_FILE,
    SAMPLES_FILE,
    SUMMARY_JSON,
    SUMMARY_MD,
    comparison_table,
    find_summaries,
    summarize,
    summary_markdown,
)
from drgrpo.evaluation.runner import (
    EvalArguments,
    ResolvedBenchmark,
    evaluate,
    recipe_prompt_settings,
    resolve_benchmark,
    run_evaluation,
)
from drgrpo.evaluation.sampling import sample_seed
from drgrpo.evaluation.verdicts import (
    CORRECT,
    GOLD_UNPARSABLE,
    GRADING_FAILURES,
    INCORRECT,
    NO_ANSWER,
    answers_equivalent,
    grade_completions,
)

__all__ = [
    "ANSWER_FORMATS",
    "BENCHMARK_ORDER",
    "BenchmarkPreset",
    "CONFIG_FILE",
    "CORRECT",
    "EvalArguments",
    "GOLD_UNPARSABLE",
    "GRADING_FAILURES",
    "Generation",
    "INCORRECT",
    "NO_ANSWER",
    "PAPER_RESULTS",
    "PRESETS",
    "Problem",
    "Request",
    "ResolvedBenchmark",
    "SAMPLES_FILE",
    "SUMMARY_JSON",
    "SUMMARY_MD",
    "TransformersBackend",
    "VLLMBackend",
    "answers_equivalent",
    "auto_answer",
    "build_prompts",
    "choose_backend",
    "comparison_table",
    "data_fingerprint",
    "evaluate",
    "find_summaries",
    "grade_completions",
    "gsm8k_final_answer",
    "last_boxed",
    "list_answer",
    "load_rows",
    "majority_vote",
    "normalize_gold",
    "number_answer",
    "pass_at_k",
    "pass_at_k_values",
    "plain_answer",
    "problems_from_rows",
    "read_samples",
    "recipe_prompt_settings",
    "resolve_benchmark",
    "resolve_preset",
    "run_evaluation",
    "sample_seed",
    "summarize",
    "summary_markdown",
    "vllm_usable",
]

# Private helpers that tests reach as `drgrpo.evaluation.<name>`, kept importable from the package.
from drgrpo.evaluation.runner import _prompt_settings  # noqa: E402, F401
from drgrpo.evaluation.saved_samples import _check_config, read_samples  # noqa: E402, F401
