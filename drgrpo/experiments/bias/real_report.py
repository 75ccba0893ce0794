"""What `make bias-real` writes: `summary.json` (the mechanism and one record per run), `summary.md` (the mechanism
with z-scores and its goals, the per-seed table with the length-gap ratio, held-out accuracy, tokens per correct
held-out answer, wall time and load, and the end-to-end goals, met or not) and `curves.png` (per-step lengths of
wrong and right answers, pass rate and truncation; seeds faint, mean bold)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from drgrpo.experiments.bias.report import (
    ALGORITHM_LABELS,
    EFFECT_THRESHOLD,
    MECHANISM_GOALS,
    _fmt,
    growth_ratio,
    mechanism_verdicts,
    run_record,
    seed_effects,
)
from drgrpo.observe import metric_names as d

# The end-to-end goal, besides the gap of EFFECT_THRESHOLD on every seed: Dr.GRPO's held-out accuracy no
# more than this many points below GRPO's.
ACCURACY_MARGIN_POINTS = 3.0
PANELS = (
    (d.LENGTH_INCORRECT, "Incorrect completions: length", "tokens"),
    (d.LENGTH_CORRECT, "Correct completions: length", "tokens"),
    (d.PASS_RATE, "Pass rate (training samples)", "share right"),
    (d.TRUNCATION_RATE, "Truncated at the length limit", "share"),
)
ALGORITHMS = {"GRPO": "grpo", "Dr.GRPO": "dr_grpo"}
# Answer-length bins (tokens, upper edges) for the starting model's held-out accuracy by length.
LENGTH_EDGES = (20, 40, 80)


def seed_records(seed: int, comparison: Mapping, fraction: float) -> list[dict]:
    """One record per run of a seed's comparison: `run_record`'s lengths and accuracies, plus tokens per correct
    held-out answer before and after, the truncation rate over the last `fraction` of steps, wall time and load."""
    records = []
    for row in comparison["runs"]:
        history = [
            {"step": step, d.LENGTH_INCORRECT: row["per_step"]["length_incorrect"].get(step),
             d.LENGTH_CORRECT: row["per_step"]["length_correct"].get(step)}
            for step in sorted(row["per_step"]["pass_rate"])
        ]  # fmt: skip
        history = [{k: v for k, v in h.items() if v is not None} for h in history]
        record = run_record(
            seed,
            ALGORITHMS.get(row["run"], row["run"]),  # an ablation keeps its own name
            history,
            comparison["start_pass_at_1"],
            row["eval_pass_at_1"],
            row["train_seconds"],
            fraction,
        )
        truncation = [row["per_step"]["truncation_rate"][s] for s in sorted(row["per_step"]["truncation_rate"])]
        tail = truncation[-max(1, math.ceil(fraction * len(truncation))) :] if truncation else []
        record.update(
            tokens_per_correct_before=comparison.get("start_tokens_per_correct"),
            tokens_per_correct_after=row.get("eval_tokens_per_correct"),
            truncation_end=sum(tail) / len(tail) if tail else math.nan,
            load=row.get("train_load"),
            steps=len(row["per_step"]["pass_rate"]),
        )
        records.append(record)
    return records


def accuracy_by_length(samples: list[Mapping], edges: tuple[int, ...] = LENGTH_EDGES) -> list[dict]:
    """Held-out answers binned by their length in tokens (`<= edges[0]`, then each next edge, then the rest): per bin
    its label, answers, right ones and share right. Where short answers are right more often, the reward itself pulls
    lengths down under either loss, beside the `1/|o_i|` term (docs/bias.md).

    Lengths 12, 25, 90 with 12 right: `<= 20` 1 of 1, `21-40` 0 of 1, `41-80` 0 of 0, `> 80` 0 of 1."""
    bounds = [0, *edges, math.inf]
    rows = []
    for low, high in zip(bounds, bounds[1:], strict=False):
        inside = [s for s in samples if low < s["num_tokens"] <= high]
        label = f"<= {high}" if low == 0 else (f"> {low}" if high == math.inf else f"{low + 1}-{high}")
        right = sum(1 for s in inside if s["correct"])
        rows.append({"length": label, "answers": len(inside), "right": right,
                     "share_right": right / len(inside) if inside else math.nan})  # fmt: skip
    return rows


def accuracy_gaps(runs: list[Mapping]) -> dict[int, float]:
    """Per seed, Dr.GRPO's held-out accuracy minus GRPO's, in points."""
    by_seed: dict[int, dict[str, float]] = {}
    for run in runs:
        by_seed.setdefault(run["seed"], {})[run["algorithm"]] = 100 * run["accuracy_after_rl"]
    return {s: a["dr_grpo"] - a["grpo"] for s, a in sorted(by_seed.items()) if {"grpo", "dr_grpo"} <= set(a)}


def markdown(
    mechanism: Mapping, runs: list[Mapping], settings, machine: str, seconds: float, by_length: list[Mapping] = ()
) -> str:
    """The human summary (see the module docstring); `by_length`: the start's `accuracy_by_length`, if measured."""
    m = settings.mechanism
    details = mechanism["details"]
    lines = [
        "# What Dr.GRPO fixes, on a real model (SmolLM2-135M-Instruct, chat additions)",
        "",
        f"Machine: {machine}. Wall times were measured on a machine shared with other jobs: the load average is "
        "given beside each.",
        "",
        f"## Mechanism: one update from the same weights on {details['batches']['negative']} fixed batches of "
        f"{m.prompts_per_batch} prompts x ({m.group_size} update + {m.group_size} probe) answers, step norm "
        f"{m.step_norm:g}; change of the mean length of fresh wrong / right answers, tokens",
        "",
        "| loss | wrong answers (A < 0) | z | right answers (A > 0) | z | mean abs log-ratio of a probe answer |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("grpo", "dr_grpo"):
        stats, cells = mechanism[name], []
        for side in ("negative", "positive"):
            mean, se = stats[f"tail_change_{side}"], stats[f"tail_change_{side}_se"]
            cells += [f"{_fmt(mean, '+.3f')} ± {_fmt(se, '.3f')}", _fmt(mean / se if se else math.nan, "+.1f")]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {details['mean_abs_log_ratio'][name]:.3f} |")
    counts = details["completions"]
    paired = details.get("grpo_minus_dr_grpo")
    if paired:
        cells = []
        for side in ("negative", "positive"):
            mean, se = paired[f"tail_change_{side}"], paired[f"tail_change_{side}_se"]
            cells += [f"{_fmt(mean, '+.3f')} ± {_fmt(se, '.3f')}", _fmt(mean / se if se else math.nan, "+.1f")]
        lines.append("| grpo − dr_grpo (same batches, paired) | " + " | ".join(cells) + " | |")
    lines += [
        "",
        f"Probe answers: {counts['probe_wrong']} wrong (mean {details['probe_length_wrong']:.1f} tokens), "
        f"{counts['probe_right']} right (mean {details['probe_length_right']:.1f}); {counts['truncated']} answers "
        f"truncated at {m.max_completion_length} tokens (counted wrong); {counts['groups_flat']} update groups all "
        f"right or all wrong. {details['seconds']:.0f} s at mean load {_fmt(details.get('load'), '.1f')}.",
        "",
        "Goals (set before the experiment was run):",
        *[f"- {MECHANISM_GOALS[k]}: {'met' if ok else 'NOT met'}" for k, ok in mechanism_verdicts(mechanism).items()],
        "",
        "## End to end: GRPO vs Dr.GRPO from SmolLM2 as prepared, same data and seed",
        "",
        "| seed | algorithm | incorrect length start → end (ratio) | correct length start → end | held-out accuracy "
        "before → after | tokens per correct held-out answer before → after | truncated (last 10%) | training "
        "seconds | mean load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        lines.append(
            f"| {run['seed']} | {ALGORITHM_LABELS[run['algorithm']]} "
            f"| {_fmt(run['length_incorrect_start'])} → {_fmt(run['length_incorrect_end'])} "
            f"({_fmt(growth_ratio(run))}) "
            f"| {_fmt(run['length_correct_start'])} → {_fmt(run['length_correct_end'])} "
            f"| {100 * run['accuracy_before_rl']:.1f}% → {100 * run['accuracy_after_rl']:.1f}% "
            f"| {_fmt(run['tokens_per_correct_before'], '.1f')} → {_fmt(run['tokens_per_correct_after'], '.1f')} "
            f"| {_fmt(100 * run['truncation_end'], '.1f')}% | {run['seconds']:.0f} | {_fmt(run['load'], '.1f')} |"
        )
    effects, gaps = seed_effects(runs), accuracy_gaps(runs)
    lines += [
        "",
        "GRPO's incorrect-length ratio (end / start) minus Dr.GRPO's: "
        + ", ".join(f"seed {s}: {_fmt(e, '+.2f')}" for s, e in effects.items()),
        "Dr.GRPO's held-out accuracy minus GRPO's: " + ", ".join(f"seed {s}: {g:+.1f} points" for s, g in gaps.items()),
        "",
        "Goals (set before the experiment was run):",
        f"- gap >= +{EFFECT_THRESHOLD} on every seed: "
        f"{sum(1 for e in effects.values() if math.isfinite(e) and e >= EFFECT_THRESHOLD)} of {len(effects)} seeds",
        f"- Dr.GRPO at most {ACCURACY_MARGIN_POINTS:g} points below GRPO held-out: "
        f"{sum(1 for g in gaps.values() if g >= -ACCURACY_MARGIN_POINTS)} of {len(gaps)} seeds",
        "",
        f"Lengths: mean tokens of the training samples (end-of-sequence included) over the first and last "
        f"{settings.edge_fraction:.0%} of the steps that had such answers. Held-out: greedy, {settings.num_test} "
        f"problems never trained on. Total time of this invocation {seconds:.0f} s. Curves: `curves.png`.",
    ]
    if by_length:
        lines += [
            "",
            "## The reward's own length signal: the starting model's held-out answers by length (greedy)",
            "",
            "| answer length, tokens | answers | right | share right |",
            "|---|---|---|---|",
            *[f"| {b['length']} | {b['answers']} | {b['right']} | {_fmt(100 * b['share_right'], '.0f')}% |"
              for b in by_length],
        ]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_report(out: Path, mechanism: Mapping, comparisons: Mapping[int, Mapping], settings, machine, seconds):
    """`summary.json`, `summary.md` and `curves.png` for the seeds so far; returns the summary."""
    from drgrpo.experiments.bias.report import plot_bias_curves

    runs = [r for seed, c in comparisons.items() for r in seed_records(seed, c, settings.edge_fraction)]
    start_samples = out / "eval" / "start" / "samples.jsonl"
    by_length = []
    if start_samples.is_file():
        by_length = accuracy_by_length([json.loads(line) for line in start_samples.read_text().splitlines()])
    summary = {"mechanism": {k: v for k, v in mechanism.items() if k != "details"}, "runs": runs,
               "effects": seed_effects(runs), "accuracy_gaps": accuracy_gaps(runs), "machine": machine,
               "start_accuracy_by_length": by_length}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(markdown(mechanism, runs, settings, machine, seconds, by_length))
    histories = {}
    for seed, comparison in comparisons.items():
        for row in comparison["runs"]:
            steps = sorted(row["per_step"]["pass_rate"])
            histories[(ALGORITHMS[row["run"]], seed)] = [
                {
                    "step": s,
                    **{key: row["per_step"][name][s] for key, name in _PER_STEP_KEYS if s in row["per_step"][name]},
                }
                for s in steps
            ]
    plot_bias_curves(
        histories, out / "curves.png", PANELS, "GRPO vs Dr.GRPO on SmolLM2-135M-Instruct (seeds faint, mean bold)"
    )
    return summary


_PER_STEP_KEYS = (
    (d.LENGTH_INCORRECT, "length_incorrect"),
    (d.LENGTH_CORRECT, "length_correct"),
    (d.PASS_RATE, "pass_rate"),
    (d.TRUNCATION_RATE, "truncation_rate"),
)
