"""Training-curve panels from `trainer_state.json` log histories, several runs overlaid (matplotlib, PNG).

The panels are the background note's section 5 watch list: reward and pass rate, length of correct vs incorrect
completions, the share of groups that carry no signal, entropy, KL, clip fraction, truncation, and the learning rate;
with the Python tool (`python_tool: true`), its programs per answer, their failures, how answers ended, and the model's
tokens vs the tool's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from drgrpo.core.checkpoints import checkpoint_step
from drgrpo.observe import metric_names as d

TRAINER_STATE = "trainer_state.json"
# The two KLs a run may use: TRL's in the loss (beta > 0), ours folded into the reward (kl_in_reward_coef > 0).
KL_LABELS = {
    d.TRL_KL: "beta's KL in the loss (k3, per token)",
    d.KL_IN_REWARD: "KL in the reward (per completion, summed)",
}


@dataclass(frozen=True)
class Panel:
    """One subplot: a title, a y-axis label and the (metric key, legend label) series drawn in it."""

    title: str
    ylabel: str
    series: tuple[tuple[str, str], ...]
    when_missing: str = "not logged"


PANELS: tuple[Panel, ...] = (
    Panel(
        "Reward and pass rate",
        "per completion / per group",
        ((d.TRL_REWARD, "reward"), (d.PASS_RATE, "pass rate"), (d.PASS_AT_GROUP, "pass@G")),
    ),
    Panel(
        "Completion length: correct vs incorrect",
        "tokens",
        ((d.LENGTH_CORRECT, "correct"), (d.LENGTH_INCORRECT, "incorrect"), (d.TRL_MEAN_LENGTH, "all")),
    ),
    Panel(
        "Groups with no signal (all-equal rewards)",
        "share of groups",
        ((d.GROUPS_ALL_CORRECT, "all correct"), (d.GROUPS_ALL_WRONG, "all wrong"), (d.TRL_ZERO_STD_SHARE, "total")),
    ),
    Panel("Entropy", "nats per token", ((d.TRL_ENTROPY, "entropy"),)),
    Panel(
        "KL to the reference",
        "KL estimate (which: see the legend)",
        ((d.TRL_KL, KL_LABELS[d.TRL_KL]), (d.KL_IN_REWARD, KL_LABELS[d.KL_IN_REWARD])),
        "not logged: no KL (beta = 0 and kl_in_reward_coef = 0)",
    ),
    Panel("Clip fraction", "share of tokens", ((d.TRL_CLIP_FRACTION, "clipped"),)),
    Panel("Truncated completions", "share of completions", ((d.TRUNCATION_RATE, "truncated"),)),
    Panel("Learning rate", "lr", ((d.LEARNING_RATE, "lr"),)),
    Panel(
        "Python tool: programs and failures",
        "per answer / per program",
        (
            (d.TOOL_CALLS_PER_ANSWER, "programs per answer"),
            (d.TOOL_ERROR_RATE, "errors"),
            (d.TOOL_TIMEOUT_RATE, "timeouts"),
        ),  # fmt: skip
        "not logged: no tool (python_tool: false)",
    ),
    Panel(
        "Python tool: how answers ended",
        "share of answers",
        (
            (d.TOOL_VOID_ANSWERS, "void (no program, no answer)"),
            (d.TOOL_CALL_BUDGET_EXHAUSTED, "call budget"),
            (d.TOOL_TOKEN_BUDGET_EXHAUSTED, "token budget"),
            (d.TOOL_CUT_IN_CODE, "token budget, inside a program"),
        ),  # fmt: skip
        "not logged: no tool (python_tool: false)",
    ),
    Panel(
        "Python tool: model vs tool tokens",
        "tokens per answer",
        ((d.TOOL_MODEL_TOKENS, "model (trained)"), (d.TOOL_OUTPUT_TOKENS, "tool output (masked)")),
        "not logged: no tool (python_tool: false)",
    ),
)


def find_trainer_state(run: str | Path) -> Path:
    """The `trainer_state.json` of a run: the file itself, `RUN/trainer_state.json`, or the newest checkpoint's."""
    run = Path(run)
    if run.is_file():
        return run
    if (run / TRAINER_STATE).is_file():
        return run / TRAINER_STATE
    checkpoints = sorted(
        (p for p in run.glob("checkpoint-*") if checkpoint_step(p) is not None and (p / TRAINER_STATE).is_file()),
        key=checkpoint_step,
    )
    if checkpoints:
        return checkpoints[-1] / TRAINER_STATE
    raise FileNotFoundError(
        f"No {TRAINER_STATE} in {str(run)!r} nor in a checkpoint-N folder under it. Pass a training output_dir (or the "
        f"{TRAINER_STATE} file itself) of a run that logged at least one step."
    )


def load_log_history(run: str | Path) -> list[dict]:
    """The `log_history` list of a run's `trainer_state.json` (see `find_trainer_state`)."""
    path = find_trainer_state(run)
    history = json.loads(path.read_text()).get("log_history")
    if not isinstance(history, list):
        raise ValueError(f"{path} has no log_history list; is it a transformers trainer_state.json?")
    return history


def metric_series(history: Sequence[Mapping], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric; entries without it, or with a None/NaN value (nothing to average), are left out.

    If a step appears twice (a run resumed from a checkpoint older than its last log), the later value wins.
    """
    by_step: dict[int, float] = {}
    for entry in history:
        value = entry.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            by_step[int(entry["step"])] = float(value)
    steps = sorted(by_step)
    return steps, [by_step[step] for step in steps]


def kl_shown(history: Sequence[Mapping]) -> str:
    """Which KL a run logged, as the KL panel shows it: beta's KL in the loss, the KL in the reward, both or none."""
    logged = [f"{KL_LABELS[key]} ({key})" for key in KL_LABELS if metric_series(history, key)[0]]
    return " and ".join(logged) if logged else "none logged (beta = 0 and kl_in_reward_coef = 0: no KL)"


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over up to `window` values (fewer at the start), so a curve is not shifted ahead of its data."""
    if window < 1:
        raise ValueError(f"smoothing window must be >= 1, got {window}.")
    averaged, total = [], 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        averaged.append(total / min(index + 1, window))
    return averaged


def auto_window(num_points: int) -> int:
    """Smoothing window for a curve of `num_points` logs: none below 30 points, else about 1/20 of the run."""
    return 1 if num_points < 30 else max(2, round(num_points / 20))


def run_labels(runs: Sequence[str | Path]) -> list[str]:
    """Legend labels: each run folder's name, with its parent prepended where names collide."""
    paths = [Path(run).resolve() for run in runs]
    paths = [p.parent if p.is_file() else p for p in paths]
    names = [p.name for p in paths]
    return [f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name for p in paths]


def plot_runs(
    histories: Mapping[str, Sequence[Mapping]], output: str | Path, title: str | None = None, smooth: int | None = None
) -> Path:
    """Draw every panel of `PANELS` for the labelled runs (one colour per run, one line style per series) to a PNG.

    Per-step GRPO metrics are noisy (a batch holds few groups), so each curve is drawn faint as logged and solid as a
    trailing moving average over `smooth` logs (None: `auto_window`; 1: no smoothing).
    """
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    columns = 4
    rows = math.ceil(len(PANELS) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.8 * rows), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ("-", "--", ":")
    for ax, panel in zip(axes.flat, PANELS, strict=False):
        drawn = 0
        for run_index, (label, history) in enumerate(histories.items()):
            colour = colours[run_index % len(colours)]
            for series_index, (key, series_label) in enumerate(panel.series):
                steps, values = metric_series(history, key)
                if not steps:
                    continue
                name = label if len(panel.series) == 1 else f"{label}: {series_label}"
                style = styles[series_index % len(styles)]
                window = smooth if smooth is not None else auto_window(len(steps))
                if window > 1:
                    ax.plot(steps, values, style, color=colour, alpha=0.2, linewidth=0.8)
                    name += f" ({window}-log mean)"
                ax.plot(steps, moving_average(values, window), style, color=colour, label=name,
                        marker="." if len(steps) < 30 else None)  # fmt: skip
                drawn += 1
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel(panel.ylabel)
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=7)
        else:
            keys = ", ".join(key for key, _ in panel.series)
            message = f"{panel.when_missing}\n({keys})"
            ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="gray")
    for ax in list(axes.flat)[len(PANELS) :]:
        ax.axis("off")
    fig.suptitle(title or " vs ".join(histories), fontsize=12)
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output
