"""Side-by-side training (`drgrpo/experiments/side_by_side.py`): each run in its own process trains exactly what the
same run trains in this process with the same thread count, its output goes to its own log, and a failing run is
raised only after the other has finished and kept its result."""

from __future__ import annotations

import json

import pytest

from drgrpo.core.errors import RecipeFileNotFoundError
from drgrpo.experiments.comparison import RUN_ROW, CompareSettings, StartingPoint, compare_one
from drgrpo.experiments.side_by_side import LOG_NAME, threads_per_run, train_side_by_side

RECIPES = ("recipes/tiny_grpo.yaml", "recipes/tiny_drgrpo.yaml")
OVERRIDES = ("--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4")


def test_threads_per_run_by_hand():
    assert threads_per_run(2, 2) == 1
    assert threads_per_run(16, 2) == 8
    assert threads_per_run(3, 2) == 1
    assert threads_per_run(1, 2) == 1  # never 0
    with pytest.raises(ValueError, match="cores and runs"):
        threads_per_run(0, 2)


def _settings(folder, recipes=RECIPES) -> CompareSettings:
    return CompareSettings(task="tiny", output_dir=str(folder), recipes=recipes, overrides=OVERRIDES, resume=True)


def test_side_by_side_trains_what_one_at_a_time_trains(tiny_model_path, addition_data, tmp_path, monkeypatch):
    """Both recipes at once (one spawned process each, 1 thread on 2 cores) give the same losses, rewards and
    held-out results as the same two runs trained here one after the other on 1 thread."""
    begin = StartingPoint(str(tiny_model_path), addition_data["train"], addition_data["test"], "plain")
    monkeypatch.setattr("drgrpo.experiments.side_by_side.available_cores", lambda: 2)
    together = train_side_by_side(_settings(tmp_path / "together"), begin, compare_one)
    monkeypatch.setenv("DRGRPO_TORCH_THREADS", "1")
    for recipe in RECIPES:
        row, history = compare_one(recipe, _settings(tmp_path / "alone"), begin)
        side_row, side_history = together[recipe]
        keys = ("loss", "reward", "grad_norm")
        assert [{k: h.get(k) for k in keys} for h in side_history] == [{k: h.get(k) for k in keys} for h in history]
        assert side_row["train_pass_rate"] == row["train_pass_rate"]
        assert side_row["eval_pass_at_1"] == row["eval_pass_at_1"] and side_row["eval_problems"] == 50
    for name in ("tiny_grpo", "tiny_drgrpo"):
        log = (tmp_path / "together" / name / LOG_NAME).read_text()
        assert "2/2" in log  # the run's own progress bar, not the parent's terminal
        assert (tmp_path / "together" / name / RUN_ROW).is_file()
    assert json.loads((tmp_path / "together" / "tiny_grpo" / RUN_ROW).read_text())["row"]["run"] == "GRPO"


def test_a_failing_run_is_raised_after_the_other_finishes(tiny_model_path, addition_data, tmp_path):
    """One recipe does not exist: its error (a clear `RecipeFileNotFoundError`, through the process boundary) comes
    out only once the other run has trained and written its `row.json`."""
    begin = StartingPoint(str(tiny_model_path), addition_data["train"], addition_data["test"], "plain")
    settings = _settings(tmp_path, recipes=("recipes/tiny_grpo.yaml", "recipes/no_such_recipe.yaml"))
    with pytest.raises(RecipeFileNotFoundError, match="no_such_recipe"):
        train_side_by_side(settings, begin, compare_one)
    assert (tmp_path / "tiny_grpo" / RUN_ROW).is_file()


def test_a_comparison_side_by_side_of_two_grpo_recipes(tiny_model_path, addition_data, tmp_path):
    """`run_comparison` with `side_by_side` (an ablation's shape: both recipes GRPO): both runs trained in their own
    processes, then the start evaluated here; the table and the plot name each run by its recipe."""
    from drgrpo.experiments.comparison import run_comparison

    demo = tmp_path / "demo"
    (demo / "data").mkdir(parents=True)
    (demo / "sft").symlink_to(tiny_model_path)
    for split in ("train", "test"):
        (demo / "data" / f"{split}.jsonl").symlink_to(addition_data[split])
    twin = tmp_path / "tiny_grpo_twin.yaml"
    twin.write_text(open(RECIPES[0]).read())
    settings = CompareSettings(task="tiny", output_dir=str(tmp_path / "out"), demo_dir=str(demo),
                               recipes=(RECIPES[0], str(twin)), overrides=OVERRIDES, side_by_side=True)  # fmt: skip
    summary = run_comparison(settings)
    assert [r["run"] for r in summary["runs"]] == ["GRPO (tiny_grpo)", "GRPO (tiny_grpo_twin)"]
    assert summary["runs"][0]["train_pass_rate"] == summary["runs"][1]["train_pass_rate"]  # same seed, same recipe
    assert "GRPO (tiny_grpo_twin)" in (tmp_path / "out" / "summary.md").read_text()
    assert (tmp_path / "out" / "curves.png").stat().st_size > 0
    assert (tmp_path / "out" / "tiny_grpo_twin" / LOG_NAME).is_file()


def test_finished_runs_are_not_spawned_again(tmp_path, monkeypatch):
    """One run finished: nothing is spawned (the caller reads the finished one and trains the other on every core);
    the same with both finished; with none finished the pool starts."""

    def no_pool(*args, **kwargs):
        raise AssertionError("a process pool was started")

    monkeypatch.setattr("drgrpo.experiments.side_by_side.ProcessPoolExecutor", no_pool)
    begin = StartingPoint("no-such-model", tmp_path / "train.jsonl", tmp_path / "test.jsonl", "plain")
    settings = _settings(tmp_path)
    assert train_side_by_side(settings, begin, compare_one, finished=lambda r: r == RECIPES[0]) == {}
    assert train_side_by_side(settings, begin, compare_one, finished=lambda r: True) == {}
    with pytest.raises(AssertionError, match="process pool"):
        train_side_by_side(settings, begin, compare_one)
