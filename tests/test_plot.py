"""Curves from trainer_state.json files (series extraction, run discovery, the PNG) and the comparison summary."""

from __future__ import annotations

import json
import math
import subprocess

import pytest
from conftest import PYTHON, ROOT

from drgrpo.experiments.comparison import comparison_markdown, difference_notes, final_mean, run_summary
from drgrpo.observe import metric_names as d
from drgrpo.observe.plotting import (
    PANELS,
    auto_window,
    find_trainer_state,
    load_log_history,
    metric_series,
    moving_average,
    run_labels,
)


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
    target = folder / f"checkpoint-{in_checkpoint}" if in_checkpoint else folder
    target.mkdir(parents=True)
    (target / "trainer_state.json").write_text(json.dumps({"global_step": len(history), "log_history": history}))
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
    with pytest.raises(FileNotFoundError, match="No trainer_state.json in .*empty"):
        find_trainer_state(tmp_path / "empty")


def test_run_labels_disambiguate_same_names(tmp_path):
    a, b, c = tmp_path / "grpo" / "model", tmp_path / "drgrpo" / "model", tmp_path / "other"
    assert run_labels([a, b, c]) == ["grpo/model", "drgrpo/model", "other"]


def test_plot_script_writes_a_png_with_every_panel(tmp_path):
    grpo = write_run(tmp_path / "grpo", fake_history(12, 0.03, 3.0))
    drgrpo = write_run(tmp_path / "drgrpo", fake_history(12, 0.04, 2.0))
    output = tmp_path / "plots" / "curves.png"
    result = subprocess.run(
        [PYTHON, "scripts/plot.py", str(grpo), str(drgrpo), "--labels", "GRPO", "Dr.GRPO", "--output", str(output)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    width, height = Image.open(output).size
    assert width > 1500 and height > 600  # 2 rows x 4 panels at a readable size
    assert {panel.title for panel in PANELS} >= {"Entropy", "Learning rate", "Clip fraction", "KL to the reference"}

    assert "GRPO: the KL panel shows none logged (beta = 0 and kl_in_reward_coef = 0: no KL)" in result.stdout

    missing = subprocess.run(
        [PYTHON, "scripts/plot.py", str(tmp_path / "nothing"), "--output", str(output)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert missing.returncode == 2 and "No trainer_state.json" in missing.stderr


def test_plot_shows_and_names_the_kl_the_run_used(tmp_path):
    """A KL-in-reward run (beta = 0) logs kl_in_reward/sequence_kl_mean, not TRL's `kl`: the panel draws it and
    `make plot` says which KL it is (it used to say "KL not logged: beta = 0")."""
    in_reward = [entry | {d.KL_IN_REWARD: 0.01 * entry["step"]} for entry in fake_history(6, 0.05, 3.0)[:-1]]
    in_loss = [entry | {"kl": 0.002 * entry["step"]} for entry in fake_history(6, 0.05, 3.0)[:-1]]
    runs = [write_run(tmp_path / "kl_in_reward", in_reward), write_run(tmp_path / "beta", in_loss)]
    result = subprocess.run(
        [PYTHON, "scripts/plot.py", *map(str, runs), "--output", str(tmp_path / "curves.png")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (
        "kl_in_reward: the KL panel shows KL in the reward (per completion, summed) (kl_in_reward/sequence_kl_mean)"
        in result.stdout
    )
    assert "beta: the KL panel shows beta's KL in the loss (k3, per token) (kl)" in result.stdout
    panel = next(panel for panel in PANELS if panel.title == "KL to the reference")
    assert [key for key, _ in panel.series] == ["kl", d.KL_IN_REWARD]


def test_every_tool_metric_the_rollout_logs_has_a_curve(tmp_path):
    """`make plot` on a python_tool run: each diag/tool/ metric of drgrpo/algorithm/rollout/tool_metrics.py is in a
    panel, and the figure draws a run that logs them (a run without them shows the panels' 'no tool' note)."""
    import torch

    from drgrpo.algorithm.rollout.tool_metrics import COLUMNS, tool_metrics

    logged = set(tool_metrics(torch.ones(2, len(COLUMNS))))
    drawn = {key for panel in PANELS for key, _ in panel.series}
    assert logged and logged <= drawn, logged - drawn
    tool_run = [entry | {key: 0.1 * entry["step"] for key in logged} for entry in fake_history(6, 0.05, 3.0)[:-1]]
    runs = [write_run(tmp_path / "tool", tool_run), write_run(tmp_path / "plain", fake_history(6, 0.05, 3.0))]
    for key in logged:
        assert metric_series(tool_run, key)[0] == [1, 2, 3, 4, 5, 6]
    result = subprocess.run(
        [PYTHON, "scripts/plot.py", *map(str, runs), "--output", str(tmp_path / "curves.png")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
