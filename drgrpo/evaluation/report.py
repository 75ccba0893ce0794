"""Summaries (pure functions of the sample rows), their markdown, and comparison tables across runs."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from drgrpo.evaluation.benchmarks import BENCHMARK_ORDER, PRESETS
from drgrpo.evaluation.metrics import majority_vote, pass_at_k, pass_at_k_values
from drgrpo.evaluation.verdicts import GOLD_UNPARSABLE, GRADING_FAILURES, NO_ANSWER

SAMPLES_FILE = "samples.jsonl"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
CONFIG_FILE = "eval_config.json"


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def truncated_counted_wrong(row: dict) -> dict:
    """A sample cut off by the token budget, as the Dr.GRPO paper scores it: wrong, and no vote in maj@k (a cut-off
    text has no final answer, even when it contains the right intermediate number)."""
    return {**row, "correct": False, "extracted": None} if row.get("truncated") else row


def summarize(
    rows: Sequence[dict], n: int, equivalent: Callable[[str, str], bool], truncated_as_wrong: bool = False
) -> dict:
    """Benchmark metrics from the sample rows (each with problem_index, correct, extracted, num_tokens, truncated).

    pass@1 is the mean correctness over all samples; pass@k is the mean over problems of `pass_at_k(n, c, k)`;
    maj@n is the mean over problems of `majority_vote`. A problem whose gold cannot be parsed counts as wrong (the
    denominator stays the benchmark's size, as in published numbers) and is counted in `unparsable_golds`.
    Truncated samples are reported separately (`truncated_samples`, and `truncated_graded_correct`: how many of
    them the grader credited); with `truncated_as_wrong` every metric counts them wrong (`truncated_counted_wrong`).
    """
    truncated = [r for r in rows if r.get("truncated")]
    if truncated_as_wrong:
        rows = [truncated_counted_wrong(r) for r in rows]
    by_problem: dict[int, list[dict]] = {}
    for row in rows:
        by_problem.setdefault(row["problem_index"], []).append(row)
    incomplete = sorted(p for p, samples in by_problem.items() if len(samples) != n)
    if incomplete:
        raise ValueError(f"Problems {incomplete[:5]} do not have exactly n={n} samples; the run is incomplete.")
    if not by_problem:
        raise ValueError("No samples to summarise.")
    per_problem = [sorted(samples, key=lambda r: r["sample_index"]) for _, samples in sorted(by_problem.items())]
    correct_lengths = [r["num_tokens"] for r in rows if r["correct"]]
    incorrect_lengths = [r["num_tokens"] for r in rows if not r["correct"]]
    summary = {
        "num_problems": len(per_problem),
        "num_samples": len(rows),
        "pass@1": _mean([float(r["correct"]) for r in rows]),
    }
    for k in pass_at_k_values(n):
        if k > 1:
            summary[f"pass@{k}"] = _mean([pass_at_k(n, sum(r["correct"] for r in s), k) for s in per_problem])
    summary[f"maj@{n}"] = _mean(
        [float(majority_vote([r["extracted"] for r in s], [r["correct"] for r in s], equivalent)) for s in per_problem]
    )
    summary.update(
        {
            "mean_length_correct": _mean(correct_lengths),
            "mean_length_incorrect": _mean(incorrect_lengths),
            "mean_length": _mean([r["num_tokens"] for r in rows]),
            "truncation_rate": _mean([float(r["truncated"]) for r in rows]),
            "truncated_samples": len(truncated),
            "truncated_graded_correct": sum(bool(r["correct"]) for r in truncated),
            "truncated_as_wrong": truncated_as_wrong,
            "no_answer_rate": _mean([float(r["verdict"] == NO_ANSWER) for r in rows]),
            "unparsable_golds": sum(s[0]["verdict"] == GOLD_UNPARSABLE for s in per_problem),
            "grading_failures": sum(r["verdict"] in GRADING_FAILURES for r in rows),
        }
    )
    return summary


def _fmt(value: Any, percent: bool = False) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{100 * value:.1f}" if percent else f"{value:.1f}"
    return str(value)


def summary_markdown(summary: dict) -> str:
    """A human-readable summary: the run's settings and its metrics (rates in percent)."""
    metric_keys = [k for k in summary if k.startswith(("pass@", "maj@"))]
    lines = [
        f"# {summary['benchmark']}: {summary['model']}",
        "",
        f"{summary['num_problems']} problems x n={summary['n']} samples; template `{summary['prompt_template']}`, "
        f"temperature {summary['temperature']}, top_p {summary['top_p']}, max_new_tokens {summary['max_new_tokens']}, "
        f"seed {summary['seed']}, backend {summary['backend']}"
        + (f", dtype {summary['dtype']}." if summary.get("dtype") else "."),
        "",
        "| metric | value |",
        "|---|---|",
        *[f"| {k} (%) | {_fmt(summary[k], percent=True)} |" for k in metric_keys],
        f"| mean length, correct (tokens) | {_fmt(summary['mean_length_correct'])} |",
        f"| mean length, incorrect (tokens) | {_fmt(summary['mean_length_incorrect'])} |",
        f"| truncated (%) | {_fmt(summary['truncation_rate'], percent=True)} |",
        f"| truncated samples graded correct ({_truncated_rule(summary)}) | "
        f"{_fmt(summary.get('truncated_graded_correct'))} of {_fmt(summary.get('truncated_samples'))} |",
        f"| no answer found (%) | {_fmt(summary['no_answer_rate'], percent=True)} |",
        f"| unparsable golds (problems, scored wrong) | {summary['unparsable_golds']} |",
        f"| grading failures (samples, scored wrong) | {summary['grading_failures']} |",
        "",
    ]
    return "\n".join(lines)


def _truncated_rule(summary: dict) -> str:
    return "counted wrong" if summary.get("truncated_as_wrong") else "counted as graded"


def _benchmark_sort_key(name: str) -> tuple[int, str]:
    return (BENCHMARK_ORDER.index(name), name) if name in BENCHMARK_ORDER else (len(BENCHMARK_ORDER), name)


def _why_missing(summary: dict, metric: str) -> str:
    """Why a summary has no `metric`: the metrics it has, and the sample count that decides them."""
    has = [key for key in summary if key.startswith(("pass@", "maj@"))]
    n = summary.get("n")
    why = f"its summary has {', '.join(has) or 'no metric'}"
    if n is not None and metric.startswith(("maj@", "pass@")) and metric != "pass@1":
        k = metric.split("@", 1)[1]
        rule = "maj@k is reported at k = n" if metric.startswith("maj@") else "pass@k needs k <= n"
        why += f" (n={n} samples: {rule}; rerun with N={k}, or pick one of those with --metric)"
    return why


# What decides an evaluation's samples or its summary (eval_config.json's keys and `truncated_as_wrong`), in the order
# a row label names them; the defaults stand in for keys that older summaries lack.
SETTING_KEYS = (
    "n", "temperature", "top_p", "max_new_tokens", "seed", "prompt_template", "system_prompt", "chat_template_kwargs",
    "chat_examples", "extra_eos_tokens", "answer_extraction_mode", "dtype", "tool_max_calls", "tool_output_chars",
    "tool_output_keep", "tool_timeout", "truncated_as_wrong", "backend",
)  # fmt: skip
SETTING_DEFAULTS = {"tool_max_calls": 0, "truncated_as_wrong": False}


def _setting(summary: dict, key: str) -> str:
    """One setting of a summary as short text (long prompts and few-shot turns cut to 24 characters)."""
    value = summary.get(key, SETTING_DEFAULTS.get(key))
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 24 else text[:23] + "…"


def _settings_order(summary: dict) -> tuple:
    """A sort key of a summary's settings: numbers by value (n=1 before n=4), anything else by its text."""
    values = [summary.get(key, SETTING_DEFAULTS.get(key)) for key in SETTING_KEYS]
    return tuple(
        (0, float(v), "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0.0, _setting(summary, k))
        for k, v in zip(SETTING_KEYS, values, strict=True)
    )


def row_labels(summaries: Sequence[dict]) -> list[str]:
    """Each summary's row in a comparison: its model, and where the model has several evaluations of one benchmark,
    the settings that tell them apart (`m (n=4, temperature=1.0)`), so two settings stand side by side as rows.
    Evaluations that differ in nothing but their problems, or not at all, are refused: one cell cannot hold both."""
    by_cell: dict[tuple[str, str], list[dict]] = {}
    for summary in summaries:
        by_cell.setdefault((summary["model"], summary["benchmark"]), []).append(summary)
    differing: dict[str, list[str]] = {}
    for (model, benchmark), group in by_cell.items():
        if len(group) < 2:
            continue
        keys = [k for k in SETTING_KEYS if len({_setting(s, k) for s in group}) > 1]
        if not keys or len({tuple(_setting(s, k) for k in keys) for s in group}) < len(group):
            sizes = sorted({str(s.get("num_problems", "?")) for s in group})
            same = "the same settings" + (f" on {' and '.join(sizes)} problems" if len(sizes) > 1 else "")
            raise ValueError(f"Two evaluations of {model} on {benchmark} with {same}; pass only one of their folders.")
        differing[model] = [k for k in SETTING_KEYS if k in differing.get(model, []) or k in keys]
    return [
        f"{s['model']} ({', '.join(f'{k}={_setting(s, k)}' for k in differing[s['model']])})"
        if s["model"] in differing
        else s["model"]
        for s in summaries
    ]


def comparison_table(
    summaries: Sequence[dict],
    metric: str = "pass@1",
    references: dict | None = None,
    reference_metric: str = "greedy pass@1",
) -> str:
    """One markdown table, models as rows and benchmarks as columns (like the Dr.GRPO paper's Table 4), in percent,
    each row labelled with its metric; a note under the table for every empty cell says why it is empty. A model
    evaluated on one benchmark with several settings (`N=1` greedy and `N=4` sampled) has a row per setting, each
    labelled with the settings that differ (`row_labels`).

    `references` adds rows of published numbers ({row label: {benchmark: percent}}) measured with `reference_metric`
    (the paper's Table 4: greedy pass@1), labelled as such whatever `metric` the runs are shown in. The average is
    over the row's benchmarks only when it has all of the table's columns ("–" otherwise, rather than an average of
    a subset).
    """
    cells: dict[str, dict[str, float | None]] = {}
    row_metric: dict[str, str] = {}
    missing: dict[tuple[str, str], str] = {}
    labels = row_labels(summaries)
    # Rows in the models' order, a model's settings rows from the smallest n (greedy before sampled) up.
    first: dict[str, int] = {}
    for summary in summaries:
        first.setdefault(summary["model"], len(first))
    ordered = sorted(
        zip(summaries, labels, strict=True), key=lambda pair: (first[pair[0]["model"]], _settings_order(pair[0]))
    )
    for summary, label in ordered:
        row = cells.setdefault(label, {})
        row_metric[label] = metric
        value = summary.get(metric)
        row[summary["benchmark"]] = None if value is None else 100 * value
        if value is None:
            missing[(label, summary["benchmark"])] = _why_missing(summary, metric)
    for label, values in (references or {}).items():
        cells[label] = dict(values)
        row_metric[label] = reference_metric
    benchmarks = sorted({b for row in cells.values() for b in row}, key=_benchmark_sort_key)
    if not benchmarks:
        raise ValueError("No evaluation summaries to compare.")
    # How many problems each run had: in the column title when every run of the benchmark had the same number (an
    # evaluation cut with --max_problems is not the benchmark), else in each cell.
    sizes: dict[str, dict[str, int]] = {}
    for summary, label in zip(summaries, labels, strict=True):
        if isinstance(summary.get("num_problems"), int):
            sizes.setdefault(summary["benchmark"], {})[label] = summary["num_problems"]
    titles = []
    for benchmark in benchmarks:
        title = PRESETS[benchmark].title if benchmark in PRESETS else benchmark
        counts = set(sizes.get(benchmark, {}).values())
        titles.append(f"{title} ({counts.pop()} problems)" if len(counts) == 1 else title)

    def cell(label: str, benchmark: str, value: float | None) -> str:
        if value is None:
            return "–"
        per_run = sizes.get(benchmark, {})
        differ = len(set(per_run.values())) > 1 and label in per_run
        return f"{value:.1f} ({per_run[label]} problems)" if differ else f"{value:.1f}"

    lines = [
        "| model | metric (%) | " + " | ".join(titles) + " | Avg. |",
        "|---|---|" + "---:|" * (len(benchmarks) + 1),
    ]
    for label, row in cells.items():
        values = [row.get(b) for b in benchmarks]
        average = sum(values) / len(values) if all(v is not None for v in values) else None
        lines.append(
            f"| {label} | {row_metric[label]} | "
            + " | ".join(cell(label, b, v) for b, v in zip(benchmarks, values, strict=True))
            + f" | {'–' if average is None else f'{average:.1f}'} |"
        )
    notes = []
    for label, row in cells.items():
        for benchmark in benchmarks:
            if row.get(benchmark) is not None:
                continue
            if (label, benchmark) in missing:
                why = f"no {metric}: {missing[(label, benchmark)]}"
            elif label in (references or {}):
                why = "not in the published table"
            else:
                why = "not evaluated on it"
            notes.append(f"- – {label} on {benchmark}: {why}.")
    if references and metric != reference_metric:
        notes.append(
            f"- the published rows are {reference_metric} whatever --metric; compare them with --metric pass@1 of "
            "greedy (N=1) runs."
        )
    if any("–" in line.rsplit("|", 2)[-2] for line in lines[2:]):
        notes.append("- Avg. is – where a row lacks one of the benchmarks (no average of a subset).")
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def find_summaries(paths: Sequence[str | Path]) -> list[dict]:
    """Every `summary.json` at or under `paths`, sorted by path."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_file():
            found.append(path)
        elif (path / SUMMARY_JSON).is_file():
            found.append(path / SUMMARY_JSON)
        elif path.is_dir():
            found.extend(sorted(path.rglob(SUMMARY_JSON)))
        else:
            raise FileNotFoundError(f"{path}: no such evaluation folder or summary.json.")
    if not found:
        raise FileNotFoundError(f"No {SUMMARY_JSON} under {', '.join(map(str, paths))}; run `make eval` first.")
    return [json.loads(p.read_text()) for p in sorted(set(found))]
