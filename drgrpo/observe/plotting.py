"""Training-curve panels from `trainer_state.json` log histories, several runs overlaid (matplotlib, PNG).

The panels are the background note's section 5 watch list: reward and pass rate, length of correct vs incorrect
completions, the share of groups that carry no signal, entropy, KL, clip fraction, truncation, and the learning rate;
with the Python tool (`python_tool: true`), its programs per answer, their failures, how answers ended, and the model's
tokens vs the tool's; with the `code` reward, what the programs do, their first failure, their length and the
sandbox's throughput. Only the panels some run logged are drawn (a run without a KL or without the tool gets no empty
panel for them); `absent_notes` says which were left out and why.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from drgrpo.core.checkpoints import find_resumable_checkpoint
from drgrpo.observe import metric_names as d

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn, so that importing this module stays light
    from matplotlib.figure import Figure

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
    # The setting under which a run logs none of the panel's metrics, said when the panel is left out.
    when_missing: str = ""


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
        "beta = 0 and kl_in_reward_coef = 0: no KL",
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
            (d.TOOL_BOX_IS_OUTPUT, "box = last output"),
        ),  # fmt: skip
        "python_tool: false",
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
        "python_tool: false",
    ),
    Panel(
        "Python tool: model vs tool tokens",
        "tokens per answer",
        ((d.TOOL_MODEL_TOKENS, "model (trained)"), (d.TOOL_OUTPUT_TOKENS, "tool output (masked)")),
        "python_tool: false",
    ),
    Panel(
        "Programs (code reward): what they do",
        "share of answers",
        (
            (d.CODE_BLOCK, "a block to run"),
            (d.CODE_RUNNABLE, "it compiles"),
            (d.CODE_SOME_TESTS, "passes some tests"),
            (d.CODE_ALL_TESTS, "passes all tests"),
        ),  # fmt: skip
        "no code reward",
    ),
    Panel(
        "Programs (code reward): the first failure",
        "share of answers",
        (
            (d.CODE_SYNTAX_ERROR, "syntax error"),
            (d.CODE_RUNTIME_ERROR, "runtime error"),
            (d.CODE_TIMEOUT, "timeout"),
            (d.CODE_WRONG_OUTPUT, "wrong output"),
        ),  # fmt: skip
        "no code reward",
    ),
    Panel(
        "Programs (code reward): length", "non-blank lines", ((d.CODE_PROGRAM_LINES, "mean program"),), "no code reward"
    ),  # fmt: skip
    Panel(
        "Sandbox throughput (code reward)",
        "test runs per second",
        ((d.CODE_PROGRAMS_PER_SECOND, "programs/s"),),
        "no code reward",
    ),  # fmt: skip
)

# One line style per series of a panel (a panel has at most four); one colour per run.
LINE_STYLES = ("-", "--", ":", "-.")
COLUMNS = 4  # panels per row at most: four of 4.6 inches fit a wide screen at the PNG's 110 dpi
PANEL_SIZE = (4.6, 3.3)  # inches per panel
HEADER_HEIGHT = 0.7  # inches for the title and the run legend above the panels


def find_trainer_state(run: str | Path) -> Path:
    """The `trainer_state.json` of a run: the file itself, `RUN/trainer_state.json`, or the newest checkpoint's."""
    run = Path(run)
    if run.is_file():
        return run
    if (run / TRAINER_STATE).is_file():
        return run / TRAINER_STATE
    # The rule resume uses (drgrpo/core/checkpoints.py): the newest complete checkpoint, newer ones skipped in a line.
    newest = find_resumable_checkpoint(run)
    if newest is not None:
        return newest / TRAINER_STATE
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


def _logs(history: Sequence[Mapping], panel: Panel) -> bool:
    """Whether a run logged at least one finite value of one of the panel's metrics."""
    return any(metric_series(history, key)[0] for key, _ in panel.series)


def logged_panels(histories: Mapping[str, Sequence[Mapping]]) -> list[Panel]:
    """The panels of `PANELS` that at least one run logged, in `PANELS` order: the figure draws these and no other."""
    return [panel for panel in PANELS if any(_logs(history, panel) for history in histories.values())]


def absent_notes(histories: Mapping[str, Sequence[Mapping]]) -> list[str]:
    """One line per reason a panel is not drawn, or drawn without some run's curve, for the user to read next to the
    PNG (an absent panel would otherwise look like a bug of the plot)."""
    drawn = logged_panels(histories)
    by_reason: dict[str, list[str]] = {}
    for panel in PANELS:
        if panel not in drawn:
            by_reason.setdefault(panel.when_missing, []).append(panel.title)
    notes = [
        f"not drawn, no run logged {'it' if len(titles) == 1 else 'them'}: {'; '.join(titles)}"
        + (f" ({reason})" if reason else "")
        for reason, titles in by_reason.items()
    ]
    if len(histories) > 1:  # a run missing from a drawn panel: only worth saying when runs are compared
        for label, history in histories.items():
            lacking = [panel.title for panel in drawn if not _logs(history, panel)]
            if lacking:
                notes.append(f"{label}: no curve in {'; '.join(lacking)} (not logged)")
    return notes


def grid_shape(panels: int) -> tuple[int, int]:
    """(rows, columns) for `panels` panels: at most `COLUMNS` per row, rows filled evenly (7 panels: 2 x 4, 5: 2 x 3)
    so that the last row is not left mostly blank."""
    rows = max(1, math.ceil(panels / COLUMNS))
    return rows, max(1, math.ceil(panels / rows))


def smoothing_window(history: Sequence[Mapping], smooth: int | None) -> int:
    """The run's moving-average window: `smooth`, or `auto_window` of its longest curve; one per run, so that the run
    legend can state it once."""
    if smooth is not None:
        return smooth
    return auto_window(max((len(metric_series(history, key)[0]) for p in PANELS for key, _ in p.series), default=0))


def draw_runs(
    histories: Mapping[str, Sequence[Mapping]], title: str | None = None, smooth: int | None = None
) -> Figure:
    """The figure of `plot_runs` (see there), one axes per panel drawn: `fig.axes`, in `logged_panels` order."""
    from matplotlib import rcParams
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    panels = logged_panels(histories)
    if not panels:
        raise ValueError(
            f"Nothing to plot: no run ({', '.join(histories)}) logged {d.TRL_REWARD}, {d.PASS_RATE} or another metric "
            "of the panels. Pass the output_dir of a training run that logged at least one step (logging_steps <= the "
            "steps it ran)."
        )
    windows = {label: smoothing_window(history, smooth) for label, history in histories.items()}
    rows, columns = grid_shape(len(panels))
    # A Figure of its own, not pyplot's: no global backend or figure state, nothing to close; savefig picks Agg.
    # Constrained layout sizes the gaps to the labels it must fit, so they neither overlap nor leave wide margins.
    fig = Figure(figsize=(PANEL_SIZE[0] * columns, PANEL_SIZE[1] * rows + HEADER_HEIGHT), layout="constrained", dpi=110)
    colours = rcParams["axes.prop_cycle"].by_key()["color"]
    for index, panel in enumerate(panels):
        ax = fig.add_subplot(rows, columns, index + 1)
        drawn_series = []
        for series_index, (key, series_label) in enumerate(panel.series):
            style = LINE_STYLES[series_index]
            for run_index, (label, history) in enumerate(histories.items()):
                steps, values = metric_series(history, key)
                if not steps:
                    continue
                colour, window = colours[run_index % len(colours)], windows[label]
                if window > 1:  # per-step GRPO metrics are noisy: faint as logged, solid as the trailing mean
                    ax.plot(steps, values, style, color=colour, alpha=0.2, linewidth=0.8)
                ax.plot(steps, moving_average(values, window), style, color=colour,
                        marker="." if len(steps) < 30 else None)  # fmt: skip
                if series_label not in drawn_series:
                    drawn_series.append(series_label)
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel("step", fontsize=9)
        ax.set_ylabel(panel.ylabel, fontsize=9)
        ax.tick_params(labelsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps: no 1.25 on a 3-step run
        ax.grid(alpha=0.3)
        if len(panel.series) > 1:  # line styles name the series; the colours (runs) are in the figure's legend
            styles = dict(zip((label for _, label in panel.series), LINE_STYLES, strict=False))
            handles = [Line2D([], [], linestyle=styles[name], color="0.3", label=name) for name in drawn_series]
            ax.legend(handles=handles, fontsize=7)
    run_handles = [
        Line2D([], [], color=colours[index % len(colours)],
               label=label + (f" ({windows[label]}-log mean)" if windows[label] > 1 else ""))
        for index, label in enumerate(histories)
    ]  # fmt: skip
    if any(window > 1 for window in windows.values()):
        run_handles.append(Line2D([], [], color="0.3", alpha=0.25, linewidth=0.8, label="faint: as logged"))
    # The title heads the run legend instead of being a suptitle: constrained layout made room for both an "outside"
    # legend and a suptitle but drew them on top of each other; one artist cannot overlap itself.
    fig.legend(handles=run_handles, loc="outside upper center", ncols=min(len(run_handles), columns + 1), fontsize=9,
               frameon=False, title=title or " vs ".join(histories), title_fontsize=12)  # fmt: skip
    return fig


def plot_runs(
    histories: Mapping[str, Sequence[Mapping]], output: str | Path, title: str | None = None, smooth: int | None = None
) -> Path:
    """Draw the panels the labelled runs logged (`logged_panels`: one colour per run, one line style per series) to
    a PNG; a panel no run logged is left out, not drawn empty. Raises ValueError when no run logged any.

    Per-step GRPO metrics are noisy (a batch holds few groups), so each curve is drawn faint as logged and solid as a
    trailing moving average over `smooth` logs (None: `auto_window` of the run's length; 1: no smoothing).
    """
    fig = draw_runs(histories, title=title, smooth=smooth)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output)
    return output
