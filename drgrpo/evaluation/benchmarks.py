"""Benchmark presets: where each benchmark lives, its columns and gold format, and the Dr.GRPO paper's numbers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BenchmarkPreset:
    """Where a standard benchmark lives on the hub and how to read its question and gold answer."""

    name: str
    title: str
    dataset_name: str
    split: str
    question_column: str
    answer_column: str
    answer_format: str
    dataset_config: str | None = None
    note: str = ""


PRESETS: dict[str, BenchmarkPreset] = {
    preset.name: preset
    for preset in (
        BenchmarkPreset("aime24", "AIME 2024", "HuggingFaceH4/aime_2024", "train", "problem", "answer", "plain"),
        BenchmarkPreset(
            "amc",
            "AMC",
            "AI-MO/aimo-validation-amc",
            "train",
            "problem",
            "answer",
            "number",
            note="83 AMC 12 2022-2023 problems, the AMC set of the Dr.GRPO paper's evaluation suite.",
        ),
        BenchmarkPreset(
            "amc23", "AMC 2023", "math-ai/amc23", "test", "question", "answer", "number", note="40 AMC 2023 problems."
        ),
        BenchmarkPreset("math500", "MATH-500", "HuggingFaceH4/MATH-500", "test", "problem", "answer", "plain"),
        BenchmarkPreset(
            "minerva",
            "Minerva Math",
            "knoveleng/Minerva-Math",
            "train",
            "problem",
            "solution",
            "last_boxed",
            note="The gold is the last \\boxed{} of the worked solution.",
        ),
        BenchmarkPreset(
            "olympiadbench",
            "OlympiadBench",
            "Hothan/OlympiadBench",
            "train",
            "question",
            "final_answer",
            "list",
            dataset_config="OE_TO_maths_en_COMP",
            note="Open-ended, text-only English maths competition subset; final_answer is a list.",
        ),
        BenchmarkPreset("gsm8k", "GSM8K", "openai/gsm8k", "test", "question", "answer", "gsm8k", dataset_config="main"),
        BenchmarkPreset(
            "apps",
            "APPS (test)",
            "codeparrot/apps",
            "test",
            "question",
            "input_output",
            "code_tests",
            note="5000 Python problems (Hendrycks et al. 2021); graded by running the programs in the code sandbox. "
            "The hub copy has a loading script: where `datasets` refuses it, download test.jsonl and pass --data.",
        ),
    )
}

# Subsets of presets shipped with the project (data/README.md), named when the hub is out of reach.
SHIPPED_SUBSETS: dict[str, tuple[str, str]] = {
    "gsm8k": ("data/gsm8k_test100.jsonl", "the first 100 problems of GSM8K's test split"),
}

# The order of the Dr.GRPO paper's Table 4, then the rest.
BENCHMARK_ORDER = ["aime24", "amc", "amc23", "math500", "minerva", "olympiadbench", "gsm8k"]

_ALIASES = {
    "aime": "aime24",
    "aime2024": "aime24",
    "aime_2024": "aime24",
    "amc2023": "amc23",
    "math": "math500",
    "math_500": "math500",
    "math-500": "math500",
    "minerva_math": "minerva",
    "minervamath": "minerva",
    "olympiad_bench": "olympiadbench",
    "olympiad": "olympiadbench",
}

# Greedy pass@1 (%) reported in Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective"
# (arXiv 2503.20783), Table 4: Qwen-Math template, 3000 new tokens.
PAPER_RESULTS: dict[str, dict[str, float]] = {
    "Oat-Zero-7B (paper)": {"aime24": 43.3, "amc": 62.7, "math500": 80.0, "minerva": 30.1, "olympiadbench": 41.0},
    "Oat-Zero-1.5B (paper)": {"aime24": 20.0, "amc": 53.0, "math500": 74.2, "minerva": 25.7, "olympiadbench": 37.6},
}


def resolve_preset(name: str) -> BenchmarkPreset:
    """The preset called `name` (case-insensitive, common aliases accepted)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in PRESETS:
        raise ValueError(
            f"Unknown benchmark {name!r}. Presets: {', '.join(PRESETS)}; or pass a local .jsonl/.json/.parquet/.csv "
            "file with --data FILE --question_column ... --answer_column ..."
        )
    return PRESETS[key]
