"""What `make bias` writes: the per-run numbers (lengths at the start and end of training), `summary.json` (the
mechanism's tail changes and the runs' lengths and accuracies, nothing else), `summary.md` with the goals the
experiment was designed to test and whether each was met, the machine it ran on, and `curves.png` (seeds faint,
their mean bold)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from drgrpo.observe import metric_names as d
from drgrpo.observe.plotting import metric_series

MECHANISM_KEYS = ("tail_change_negative", "tail_change_negative_se", "tail_change_positive", "tail_change_positive_se")
RUN_KEYS = (
    "seed",
    "algorithm",
    "length_incorrect_start",
    "length_incorrect_end",
    "length_correct_start",
    "length_correct_end",
    "accuracy_before_rl",
    "accuracy_after_rl",
    "seconds",
)
ALGORITHM_LABELS = {"grpo": "GRPO", "dr_grpo": "Dr.GRPO"}
# The goals, fixed before the experiment was run: GRPO's incorrect-length growth ratio exceeds Dr.GRPO's by this much
# on at least 3 of 4 seeds; in the mechanism, grpo moves the tail by >= 3 SE, dr_grpo stays within 2 SE.
EFFECT_THRESHOLD = 0.25
MECHANISM_Z = {"grpo": 3.0, "dr_grpo": 2.0}
# The mechanism goals in words, in the order of `mechanism_verdicts`.
MECHANISM_GOALS = {
    "grpo_negative_lengthens": f"GRPO lengthens the tail after a wrong answer (z >= {MECHANISM_Z['grpo']:g})",
    "grpo_positive_shortens": f"GRPO shortens it after a right answer (z <= -{MECHANISM_Z['grpo']:g})",
    "dr_grpo_negative_flat": f"Dr.GRPO leaves it after a wrong answer (|z| <= {MECHANISM_Z['dr_grpo']:g})",
    "dr_grpo_positive_flat": f"Dr.GRPO leaves it after a right answer (|z| <= {MECHANISM_Z['dr_grpo']:g})",
}


def edge_means(values: Sequence[float], fraction: float = 0.1) -> tuple[float, float]:
    """(mean of the first, mean of the last) `ceil(fraction * n)` values, at least one each; NaN when empty.

    The experiment averages lengths over the first and last 10% of the logged steps."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if not values:
        return math.nan, math.nan
    count = max(1, math.ceil(fraction * len(values)))
    return sum(values[:count]) / count, sum(values[-count:]) / count


def run_record(
    seed: int,
    algorithm: str,
    history: Sequence[Mapping],
    accuracy_before_rl: float,
    accuracy_after_rl: float,
    seconds: float,
    fraction: float = 0.1,
) -> dict:
    """One entry of `runs`: lengths (tokens) of incorrect and correct completions over the first and last
    `fraction` of the logged steps at which the run had such completions, and held-out accuracies."""
    _, incorrect = metric_series(history, d.LENGTH_INCORRECT)
    _, correct = metric_series(history, d.LENGTH_CORRECT)
    incorrect_start, incorrect_end = edge_means(incorrect, fraction)
    correct_start, correct_end = edge_means(correct, fraction)
    return {
        "seed": int(seed),
        "algorithm": algorithm,
        "length_incorrect_start": incorrect_start,
        "length_incorrect_end": incorrect_end,
        "length_correct_start": correct_start,
        "length_correct_end": correct_end,
        "accuracy_before_rl": float(accuracy_before_rl),
        "accuracy_after_rl": float(accuracy_after_rl),
        "seconds": round(float(seconds), 1),
    }


def summary_json(mechanism: Mapping, runs: Sequence[Mapping]) -> dict:
    """`{"mechanism": {grpo: {...}, dr_grpo: {...}}, "runs": [...]}` with exactly `MECHANISM_KEYS` and `RUN_KEYS`
    (extra keys that `mechanism` or a run may carry are dropped)."""
    return {
        "mechanism": {
            name: {key: float(mechanism[name][key]) for key in MECHANISM_KEYS} for name in ("grpo", "dr_grpo")
        },
        "runs": [{key: run[key] for key in RUN_KEYS} for run in runs],
    }


def growth_ratio(run: Mapping) -> float:
    """`length_incorrect_end / length_incorrect_start` (NaN when either is missing or the start is 0)."""
    start, end = run["length_incorrect_start"], run["length_incorrect_end"]
    if not (math.isfinite(start) and math.isfinite(end)) or start == 0:
        return math.nan
    return end / start


def seed_effects(runs: Sequence[Mapping]) -> dict[int, float]:
    """Per seed, GRPO's incorrect-length growth ratio minus Dr.GRPO's (seeds with both runs only)."""
    ratios: dict[int, dict[str, float]] = {}
    for run in runs:
        ratios.setdefault(run["seed"], {})[run["algorithm"]] = growth_ratio(run)
    return {seed: r["grpo"] - r["dr_grpo"] for seed, r in sorted(ratios.items()) if {"grpo", "dr_grpo"} <= set(r)}


def mechanism_verdicts(mechanism: Mapping) -> dict[str, bool]:
    """The mechanism goals (`MECHANISM_GOALS`): grpo lengthens tails after negative advantages and shortens them
    after positive ones, each >= 3 SE from 0; dr_grpo moves neither beyond 2 SE."""
    grpo, dr = mechanism["grpo"], mechanism["dr_grpo"]

    def z(stats: Mapping, side: str) -> float:
        se = stats[f"tail_change_{side}_se"]
        return stats[f"tail_change_{side}"] / se if se and math.isfinite(se) else math.nan

    return {
        "grpo_negative_lengthens": z(grpo, "negative") >= MECHANISM_Z["grpo"],
        "grpo_positive_shortens": z(grpo, "positive") <= -MECHANISM_Z["grpo"],
        "dr_grpo_negative_flat": abs(z(dr, "negative")) <= MECHANISM_Z["dr_grpo"],
        "dr_grpo_positive_flat": abs(z(dr, "positive")) <= MECHANISM_Z["dr_grpo"],
    }


def _fmt(value: float, spec: str = ".2f") -> str:
    return "–" if value is None or not math.isfinite(value) else format(value, spec)


def summary_markdown(
    summary: Mapping,
    *,
    step_norm: float,
    total_seconds: float,
    notes: Sequence[str] = (),
    machine: str | None = None,
) -> str:
    """The human summary: the machine it ran on, mechanism table with z-scores, run table, per-seed effect, and the
    goals with whether each was met, as measured."""
    lines = ["# What Dr.GRPO fixes, measured (tiny model, tail task)", ""]
    if machine:
        lines += [f"Machine: {machine}. The numbers move with the machine (CPU, thread count, load): the README "
                  "gives the range seen.", ""]  # fmt: skip
    lines += ["## Mechanism: one update from the same "
             f"weights on fixed batches (step of norm {step_norm:g}); change of the expected tail length, tokens", "",
             "| loss | after A < 0 (wrong) | z | after A > 0 (right) | z |", "|---|---|---|---|---|"]  # fmt: skip
    for name in ("grpo", "dr_grpo"):
        stats = summary["mechanism"][name]
        cells = []
        for side in ("negative", "positive"):
            mean, se = stats[f"tail_change_{side}"], stats[f"tail_change_{side}_se"]
            cells += [f"{_fmt(mean, '+.4f')} ± {_fmt(se, '.4f')}", _fmt(mean / se if se else math.nan, "+.1f")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    verdicts = mechanism_verdicts(summary["mechanism"])
    lines += ["", "Goals of the mechanism experiment (set before it was run):"]
    lines += [f"- {MECHANISM_GOALS[key]}: {'met' if met else 'NOT met'}" for key, met in verdicts.items()]
    lines += ["", "## End to end: GRPO vs Dr.GRPO from the same warm start", "",
              "| seed | algorithm | incorrect length start → end (ratio) | correct length start → end "
              "| held-out accuracy before → after RL | seconds |", "|---|---|---|---|---|---|"]  # fmt: skip
    for run in summary["runs"]:
        lines.append(
            f"| {run['seed']} | {ALGORITHM_LABELS.get(run['algorithm'], run['algorithm'])} "
            f"| {_fmt(run['length_incorrect_start'])} → {_fmt(run['length_incorrect_end'])} "
            f"({_fmt(growth_ratio(run))}) "
            f"| {_fmt(run['length_correct_start'])} → {_fmt(run['length_correct_end'])} "
            f"| {_fmt(100 * run['accuracy_before_rl'], '.1f')}% → {_fmt(100 * run['accuracy_after_rl'], '.1f')}% "
            f"| {run['seconds']:.0f} |"
        )
    effects = seed_effects(summary["runs"])
    met = sum(1 for e in effects.values() if math.isfinite(e) and e >= EFFECT_THRESHOLD)
    lines += [
        "",
        "GRPO's incorrect-length growth ratio minus Dr.GRPO's, per seed: "
        + ", ".join(f"seed {s}: {_fmt(e, '+.2f')}" for s, e in effects.items()),
        f"Goal (set before the runs): >= {EFFECT_THRESHOLD} on at least 3 of 4 seeds. Measured: {met} of "
        f"{len(effects)} seeds.",
        "",
        f"Total time {total_seconds:.0f} s. Curves: `curves.png` (same folder).",
    ]
    if notes:
        lines += ["", *[f"- {note}" for note in notes]]
    return "\n".join(lines) + "\n"


def _mean_curve(series: Sequence[tuple[list[int], list[float]]]) -> tuple[list[int], list[float]]:
    """Per-step mean over the runs that logged that step."""
    by_step: dict[int, list[float]] = {}
    for steps, values in series:
        for step, value in zip(steps, values, strict=True):
            by_step.setdefault(step, []).append(value)
    steps = sorted(by_step)
    return steps, [sum(by_step[s]) / len(by_step[s]) for s in steps]


PANELS = (
    (d.LENGTH_INCORRECT, "Incorrect completions: length", "tokens"),
    (d.LENGTH_CORRECT, "Correct completions: length", "tokens"),
    (d.TRL_REWARD, "Reward (pass rate)", "mean reward"),
)


def plot_bias_curves(
    histories: Mapping[tuple[str, int], Sequence[Mapping]],
    output: str | Path,
    panels: Sequence[tuple[str, str, str]] = PANELS,
    title: str = "GRPO vs Dr.GRPO from the same warm start: length of wrong and right answers (seeds faint, mean bold)",
) -> Path:
    """One panel per (metric, title, unit) of `panels` (default: incorrect length, correct length, reward) per step;
    each algorithm one colour, every seed a faint line, the mean over seeds bold. `histories` maps (algorithm, seed)
    to a trainer log history."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"grpo": "tab:red", "dr_grpo": "tab:blue"}
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2), squeeze=False)
    axes = axes[0]  # one row, also for a single panel
    for ax, (key, panel_title, ylabel) in zip(axes, panels, strict=True):
        for algorithm, colour in colours.items():
            series = [metric_series(h, key) for (a, _), h in sorted(histories.items()) if a == algorithm]
            series = [s for s in series if s[0]]
            for steps, values in series:
                ax.plot(steps, values, color=colour, alpha=0.2, linewidth=0.8)
            if series:
                steps, values = _mean_curve(series)
                label = f"{ALGORITHM_LABELS[algorithm]} (mean of {len(series)} seeds)"
                ax.plot(steps, values, color=colour, linewidth=2.2, label=label)
        ax.set_title(panel_title)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=90)
    plt.close(fig)
    return output
