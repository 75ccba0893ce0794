"""Curves from trainer_state.json files (series extraction, run discovery, the PNG) and the comparison summary."""

from __future__ import annotations

import json
import math

import pytest
from conftest import ROOT, write_complete_checkpoint

from drgrpo.experiments.comparison import comparison_markdown, difference_notes, final_mean, run_summary
from drgrpo.observe import metric_names as d
from drgrpo.observe.plotting import (
    LINE_STYLES,
    PANELS,
    absent_notes,
    auto_window,
    find_trainer_state,
    load_log_history,
    metric_series,
    moving_average,
    plot_runs,
    run_labels,
)

TOOL_PANELS = [
    "Python tool: programs and failures",
    "Python tool: how answers ended",
    "Python tool: model vs tool tokens",
]
CODE_PANELS = [
    "Programs (code reward): what they do",
    "Programs (code reward): the first failure",
    "Programs (code reward): length",
    "Sandbox throughput (code reward)",
]
# What a run without a KL and without the tool logs (fake_history): every panel but those four.
PLAIN_PANELS = [
    "Reward and pass rate",
    "Completion length: correct vs incorrect",
    "Groups with no signal (all-equal rewards)",
    "Entropy",
    "Clip fraction",
    "Truncated completions",
    "Learning rate",
]


def fake_history(steps: int, pass_rate_slope: float, incorrect_length: float) -> list[dict]:
    """A log history like a DrGRPOTrainer run's, with a final summary entry that has no metrics."""
    history = []
    for step in range(1, steps + 1):
        history.append(
            {
                "step": step,
                "loss": 0.0,
                "learning_rate": 1e-3,
                "reward": pass_rate_slope * step,
                d.PASS_RATE: pass_rate_slope * step,
                d.PASS_AT_GROUP: min(1.0, 2 * pass_rate_slope * step),
                d.LENGTH_CORRECT: 3.0,
                d.LENGTH_INCORRECT: incorrect_length + 0.1 * step,
                d.GROUPS_ALL_CORRECT: 0.1,
                d.GROUPS_ALL_WRONG: 0.5 - 0.01 * step,
                "frac_reward_zero_std": 0.6 - 0.01 * step,
                d.TRUNCATION_RATE: 0.05,
                "entropy": 1.0 - 0.02 * step,
                "clip_ratio/region_mean": 0.0,
                "completions/mean_length": 3.5,
            }
        )
    history.append({"step": steps, "train_runtime": 12.0, "train_loss": 0.0})
    return history


def write_run(folder, history, *, in_checkpoint: int | None = None):
    """A run's trainer_state.json at its top, or (`in_checkpoint`) in a complete checkpoint-N of that step."""
    state = json.dumps({"global_step": in_checkpoint or len(history), "log_history": history})
    if in_checkpoint:
        write_complete_checkpoint(folder, in_checkpoint, state=state)
    else:
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(state)
    return folder


def test_metric_series_skips_missing_and_none_and_keeps_the_later_duplicate():
    history = [
        {"step": 1, "kl": 0.1},
        {"step": 2, d.LENGTH_CORRECT: None},  # no correct completion in the batch: TRL logs None
        {"step": 2, "kl": float("nan")},
        {"step": 3, "kl": 0.3},
        {"step": 3, "kl": 0.35},  # the same step logged again after a resume: the later value wins
    ]
    assert metric_series(history, "kl") == ([1, 3], [0.1, 0.35])
    assert metric_series(history, d.LENGTH_CORRECT) == ([], [])


def test_moving_average_is_trailing_and_auto_window_grows_with_the_run():
    # window 3: [1], [1, 2], [1, 2, 3], [2, 3, 10], [3, 10, 4]
    assert moving_average([1.0, 2.0, 3.0, 10.0, 4.0], 3) == pytest.approx([1.0, 1.5, 2.0, 5.0, 17 / 3])
    assert moving_average([1.0, 5.0], 1) == [1.0, 5.0]
    with pytest.raises(ValueError, match="window"):
        moving_average([1.0], 0)
    assert (auto_window(12), auto_window(60), auto_window(1000)) == (1, 3, 50)


def test_trainer_state_is_found_in_run_dir_file_or_newest_checkpoint(tmp_path):
    finished = write_run(tmp_path / "finished", [{"step": 1, "loss": 0.0}])
    assert find_trainer_state(finished) == finished / "trainer_state.json"
    assert find_trainer_state(finished / "trainer_state.json") == finished / "trainer_state.json"
    running = tmp_path / "running"
    write_run(running, [{"step": 2}], in_checkpoint=2)
    write_run(running, [{"step": 10}], in_checkpoint=10)
    assert load_log_history(running) == [{"step": 10}]  # checkpoint-10, not the lexically larger checkpoint-2
    data = (running / "checkpoint-10" / "optimizer.pt").read_bytes()
    (running / "checkpoint-10" / "optimizer.pt").write_bytes(data[: len(data) // 2])
    assert load_log_history(running) == [{"step": 2}]  # the rule resume uses: the newest *complete* checkpoint
    with pytest.raises(FileNotFoundError, match="No trainer_state.json in .*empty"):
        find_trainer_state(tmp_path / "empty")


def test_run_labels_disambiguate_same_names(tmp_path):
    a, b, c = tmp_path / "grpo" / "model", tmp_path / "drgrpo" / "model", tmp_path / "other"
    assert run_labels([a, b, c]) == ["grpo/model", "drgrpo/model", "other"]


def test_plot_script_draws_only_the_panels_the_runs_logged(tmp_path, run_script):
    """`make plot` on two runs without a KL and without the tool: the seven panels they logged, and one line per kind
    of panel left out, saying why (it drew eleven, four of them empty with overlapping "not logged" notes)."""
    grpo = write_run(tmp_path / "grpo", fake_history(12, 0.03, 3.0))
    drgrpo = write_run(tmp_path / "drgrpo", fake_history(12, 0.04, 2.0))
    output = tmp_path / "plots" / "curves.png"
    result = run_script(
        "scripts/plot.py", str(grpo), str(drgrpo), "--labels", "GRPO", "Dr.GRPO", "--output", str(output)
    )
    assert result.returncode == 0, result.stderr
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    width, height = Image.open(output).size
    assert width > 1500 and height > 600  # 2 rows x 4 panels at a readable size
    assert result.stdout.splitlines() == [
        f"wrote {output}: 7 panels",
        "not drawn, no run logged it: KL to the reference (beta = 0 and kl_in_reward_coef = 0: no KL)",
        f"not drawn, no run logged them: {'; '.join(TOOL_PANELS)} (python_tool: false)",
        f"not drawn, no run logged them: {'; '.join(CODE_PANELS)} (no code reward)",
    ]

    missing = run_script("scripts/plot.py", str(tmp_path / "nothing"), "--output", str(output))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    error = [line for line in missing.stderr.splitlines() if line.strip()]
    assert len(error) == 1 and error[0].startswith("error: No trainer_state.json in "), error  # no usage lines


@pytest.fixture
def saved_figures(monkeypatch) -> list:
    """The matplotlib figures `plot_runs` saves, kept for the test to inspect (whatever way the module builds them)
    and not rendered: laying out and rasterising eleven panels takes about a second, which the PNG tests above pay."""
    from matplotlib.figure import Figure

    figures = []
    monkeypatch.setattr(Figure, "savefig", lambda figure, *args, **kwargs: figures.append(figure))
    return figures


def panels_of(figure) -> dict[str, int]:
    """Each visible panel's title and how many curves (lines with data) it draws."""
    return {
        ax.get_title(): sum(len(line.get_xdata()) > 0 for line in ax.get_lines()) for ax in figure.axes if ax.axison
    }


def tool_history(steps: int) -> list[dict]:
    """A python_tool run's log: fake_history plus every diag/tool/ metric, with beta's KL."""
    tool_keys = [key for panel in PANELS if panel.title in TOOL_PANELS for key, _ in panel.series]
    return [entry | dict.fromkeys(tool_keys, 0.5) | {"kl": 0.01} for entry in fake_history(steps, 0.05, 3.0)[:-1]]


def test_a_run_without_the_tool_gets_no_empty_panel_and_a_tool_run_gets_the_tool_panels(tmp_path, saved_figures):
    """From the user's side: a run folder as the trainer leaves it, read back and plotted; the saved figure's panels
    are those the run logged, each with a curve."""
    plain = load_log_history(write_run(tmp_path / "plain", fake_history(8, 0.05, 3.0)))
    plot_runs({"plain": plain}, tmp_path / "plain.png")
    drawn = panels_of(saved_figures[-1])
    assert list(drawn) == PLAIN_PANELS and drawn["Reward and pass rate"] == 3 and min(drawn.values()) == 1

    tool = load_log_history(write_run(tmp_path / "tool", tool_history(8)))
    plot_runs({"tool": tool}, tmp_path / "tool.png")
    drawn = panels_of(saved_figures[-1])
    assert list(drawn) == PLAIN_PANELS[:4] + ["KL to the reference"] + PLAIN_PANELS[4:] + TOOL_PANELS
    assert drawn["Python tool: how answers ended"] == 4 and min(drawn.values()) >= 1

    # Compared, the tool panels are drawn (with the tool run's curves only) and the notes say who lacks them.
    plot_runs({"tool": tool, "plain": plain}, tmp_path / "both.png")
    compared = panels_of(saved_figures[-1])
    assert (
        list(compared) == list(drawn) and compared["Entropy"] == 2 and compared["Python tool: how answers ended"] == 4
    )
    assert absent_notes({"tool": tool, "plain": plain}) == [
        f"not drawn, no run logged them: {'; '.join(CODE_PANELS)} (no code reward)",
        f"plain: no curve in KL to the reference; {'; '.join(TOOL_PANELS)} (not logged)",
    ]
    # A run rewarded by `code` gets the four code panels, each with its curves.
    code_keys = [key for panel in PANELS if panel.title in CODE_PANELS for key, _ in panel.series]
    code = [entry | dict.fromkeys(code_keys, 0.25) for entry in fake_history(8, 0.05, 3.0)[:-1]]
    plot_runs({"code": code}, tmp_path / "code.png")
    drawn = panels_of(saved_figures[-1])
    assert list(drawn) == PLAIN_PANELS + CODE_PANELS and drawn["Programs (code reward): the first failure"] == 4
    with pytest.raises(ValueError, match=r"Nothing to plot: no run \(empty\) logged reward, diag/pass_rate or another"):
        plot_runs({"empty": [{"step": 1, "train_runtime": 1.0}]}, tmp_path / "empty.png")


def test_plot_script_on_a_run_that_logged_no_step_says_so_in_two_lines(tmp_path, monkeypatch, capsys):
    """`make plot` on a run that stopped before its first log: an error naming the run, no figure, no traceback."""
    import runpy

    run = write_run(tmp_path / "early", [{"step": 1, "train_runtime": 1.0, "train_loss": 0.0}])
    monkeypatch.setattr("sys.argv", ["plot.py", str(run), "--output", str(tmp_path / "curves.png")])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / "scripts" / "plot.py"), run_name="__main__")
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and error.startswith("error: Nothing to plot: no run (early) logged reward")
    assert len(error.splitlines()) <= 2 and not (tmp_path / "curves.png").exists()


@pytest.mark.parametrize("tool", [False, True], ids=["plain run", "tool run"])
def test_panels_do_not_overlap_and_fill_the_figure(tmp_path, saved_figures, tool):
    """No text of one panel (title, labels, ticks, legend) runs into another panel or the title, and the gaps between
    panels are a few pixels of margin, not the width of a note that used to sit in an empty panel."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    history = tool_history(8) if tool else fake_history(8, 0.05, 3.0)
    plot_runs({"a run with a long name": load_log_history(write_run(tmp_path / "run", history))}, tmp_path / "c.png")
    figure = saved_figures[-1]
    figure.draw_without_rendering()  # the layout, as savefig computes it
    renderer = FigureCanvasAgg(figure).get_renderer()
    width, height = figure.bbox.width, figure.bbox.height
    axes = [ax for ax in figure.axes if ax.axison]
    boxes = [ax.get_tightbbox(renderer) for ax in axes]
    # The figure's title and legends (a suptitle is one of `figure.texts`).
    header = [artist.get_window_extent(renderer) for artist in [*figure.legends, *figure.texts]]
    everything = boxes + header
    for box in everything:  # inside the PNG (a pixel of rounding allowed)
        assert box.x0 >= -1 and box.y0 >= -1 and box.x1 <= width + 1 and box.y1 <= height + 1, box
    for i, first in enumerate(everything):
        for second in everything[i + 1 :]:
            overlap_x = min(first.x1, second.x1) - max(first.x0, second.x0)
            overlap_y = min(first.y1, second.y1) - max(first.y0, second.y0)
            assert overlap_x <= 1 or overlap_y <= 1, (first, second)
    rows: dict[int, list] = {}
    for ax, box in zip(axes, boxes, strict=True):
        rows.setdefault(ax.get_subplotspec().rowspan.start, []).append(box)
    for row in rows.values():  # side by side: at most 3% of the width between neighbours
        row.sort(key=lambda box: box.x0)
        assert all(right.x0 - left.x1 < 0.03 * width for left, right in zip(row, row[1:], strict=False)), row
    tops = sorted((min(box.y0 for box in row), max(box.y1 for box in row)) for row in rows.values())
    assert all(upper[0] - lower[1] < 0.03 * height for lower, upper in zip(tops, tops[1:], strict=False)), tops


def test_every_panel_has_a_line_style_per_series():
    assert max(len(panel.series) for panel in PANELS) <= len(LINE_STYLES)
    assert len(set(LINE_STYLES)) == len(LINE_STYLES)


def test_plot_shows_and_names_the_kl_the_run_used(tmp_path, run_script):
    """A KL-in-reward run (beta = 0) logs kl_in_reward/sequence_kl_mean, not TRL's `kl`: the panel draws it and
    `make plot` says which KL it is (it used to say "KL not logged: beta = 0")."""
    in_reward = [entry | {d.KL_IN_REWARD: 0.01 * entry["step"]} for entry in fake_history(6, 0.05, 3.0)[:-1]]
    in_loss = [entry | {"kl": 0.002 * entry["step"]} for entry in fake_history(6, 0.05, 3.0)[:-1]]
    runs = [write_run(tmp_path / "kl_in_reward", in_reward), write_run(tmp_path / "beta", in_loss)]
    result = run_script("scripts/plot.py", *map(str, runs), "--output", str(tmp_path / "curves.png"))
    assert result.returncode == 0, result.stderr
    assert (
        "kl_in_reward: the KL panel shows KL in the reward (per completion, summed) (kl_in_reward/sequence_kl_mean)"
        in result.stdout
    )
    assert "beta: the KL panel shows beta's KL in the loss (k3, per token) (kl)" in result.stdout
    panel = next(panel for panel in PANELS if panel.title == "KL to the reference")
    assert [key for key, _ in panel.series] == ["kl", d.KL_IN_REWARD]


def test_every_tool_metric_the_rollout_logs_has_a_curve(tmp_path, run_script):
    """`make plot` on a python_tool run: each diag/tool/ metric of drgrpo/algorithm/rollout/tool_metrics.py is in a
    panel, and the figure draws a run that logs them (a run without them compared to it is said to have no curve)."""
    import torch

    from drgrpo.algorithm.rollout.tool_metrics import COLUMNS, tool_metrics

    logged = set(tool_metrics(torch.ones(2, len(COLUMNS))))
    drawn = {key for panel in PANELS for key, _ in panel.series}
    assert logged and logged <= drawn, logged - drawn
    tool_run = [entry | {key: 0.1 * entry["step"] for key in logged} for entry in fake_history(6, 0.05, 3.0)[:-1]]
    runs = [write_run(tmp_path / "tool", tool_run), write_run(tmp_path / "plain", fake_history(6, 0.05, 3.0))]
    for key in logged:
        assert metric_series(tool_run, key)[0] == [1, 2, 3, 4, 5, 6]
    result = run_script("scripts/plot.py", *map(str, runs), "--output", str(tmp_path / "curves.png"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert ": 10 panels" in result.stdout  # the three tool panels; no KL panel (neither run logged one)
    assert f"plain: no curve in {'; '.join(TOOL_PANELS)} (not logged)" in result.stdout


# --- comparison summary --------------------------------------------------------------------------------------------
def test_final_mean_is_the_mean_of_the_last_logged_values():
    history = fake_history(12, 0.05, 3.0)
    # pass rate 0.05 * step; last 4 steps 9..12 -> 0.05 * 42 / 4 = 0.525
    assert final_mean(history, d.PASS_RATE, 4) == pytest.approx(0.525)
    assert final_mean(history, "kl", 4) is None


def test_comparison_rows_notes_and_markdown():
    evaluation_grpo = {"pass@1": 0.40, "mean_length_correct": 3.0, "mean_length_incorrect": 4.0, "num_problems": 200}
    evaluation_dr = {"pass@1": 0.45, "mean_length_correct": 3.0, "mean_length_incorrect": None, "num_problems": 200}
    grpo = run_summary("GRPO", "algorithm: GRPO (...)", fake_history(10, 0.05, 3.0), evaluation_grpo, window=2)
    dr = run_summary("Dr.GRPO", "algorithm: Dr.GRPO (...)", fake_history(10, 0.05, 2.0), evaluation_dr, window=2)
    # Over steps 9, 10: incorrect length 3.0 + 0.1 * step -> 3.95 (GRPO), 2.95 (Dr.GRPO); pass rate 0.05 * step
    # -> 47.5%; zero-std share 0.6 - 0.01 * step -> 50.5% = all correct 10% + all wrong (0.5 - 0.01 * step) 40.5%.
    assert grpo["train_length_incorrect"] == pytest.approx(3.95)
    assert dr["train_length_incorrect"] == pytest.approx(2.95)
    notes = difference_notes(grpo, dr)
    assert notes[0] == "held-out pass@1: Dr.GRPO +5.00 points vs GRPO."
    assert notes[1] == "mean length of incorrect training completions: Dr.GRPO -1.00 tokens vs GRPO."
    assert notes[2] == "zero-variance group share: Dr.GRPO +0.00 points vs GRPO."
    text = comparison_markdown([grpo, dr], {"pass@1": 0.1}, notes, window=2)
    table = [line for line in text.splitlines() if line.startswith("| GRPO") or line.startswith("| Dr.GRPO")]
    assert table[0].startswith("| GRPO | 40.0% | 47.5% | 3.00 / 3.95 | 3.00 / 4.00 | 50.5% (10.0% + 40.5%) | 5.0% |")
    assert "3.00 / –" in table[1]  # no incorrect held-out answer: shown as missing, not as 0
    assert "held-out pass@1 10.0%" in text
    assert math.isclose(grpo["zero_std_share"], 0.505)


def test_per_step_curves_and_their_table():
    from drgrpo.experiments.comparison import per_step, per_step_markdown, per_step_section

    history = [
        {"step": 1, d.PASS_RATE: 0.5, d.LENGTH_CORRECT: 10.0, d.LENGTH_INCORRECT: 20.0, d.TRUNCATION_RATE: 0.1},
        {"step": 2, d.PASS_RATE: 0.0, d.LENGTH_INCORRECT: 30.0, d.TRUNCATION_RATE: 0.2},  # nothing correct: no length
    ]
    curves = per_step(history)
    assert curves["length_correct"] == {1: 10.0} and curves["length_incorrect"] == {1: 20.0, 2: 30.0}
    table = per_step_markdown({"GRPO": curves, "Dr.GRPO": curves})
    assert table[2] == "| 1 | 50.0% | 10.00 / 20.00 | 50.0% | 10.00 / 20.00 |"
    assert table[3] == "| 2 | 0.0% | – / 30.00 | 0.0% | – / 30.00 |"
    assert per_step_section([{"run": "GRPO", "per_step": curves}])[3].startswith("| step | GRPO pass rate")
