"""The bias experiment's pure parts: the task's completions, the expected tail length, the summary and its keys."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from drgrpo.experiments.bias.mechanism import (
    TailProbe,
    completion_mask,
    expected_tail_length,
    mean_and_standard_error,
)
from drgrpo.experiments.bias.report import (
    MECHANISM_KEYS,
    RUN_KEYS,
    edge_means,
    growth_ratio,
    mechanism_verdicts,
    run_record,
    seed_effects,
    summary_json,
    summary_markdown,
)
from drgrpo.experiments.bias.task import guess_checks_out, guessed_answer, split_completion, tail_demonstrations
from rewards.grading import grade_batch


def test_guessed_answer_and_its_check():
    # 47+38: ones 7+8=15 need a carry; 42+35: ones 2+5=7 do not. The answer follows the guess, right or wrong.
    assert guessed_answer(47, 38, True) == "c1 7+8=15, 85;" and guessed_answer(47, 38, False) == "c0 7+8=15, 75;"
    assert guessed_answer(42, 35, False) == "c0 2+5=7, 77;" and guessed_answer(42, 35, True) == "c1 2+5=7, 87;"
    assert guess_checks_out("c1 7+8=15, 85;..") is True and guess_checks_out("c0 7+8=15, 75;::") is False
    assert guess_checks_out("c0 2+5=7, 77;") is True and guess_checks_out("c1 2+5=7, 87;") is False
    # Read from what was written, not from the problem: a wrong ones sum that agrees with the flag checks out.
    assert guess_checks_out("c1 2+5=17, 97;") is True
    assert guess_checks_out("85;..") is None and guess_checks_out("c1 85;") is None
    assert guess_checks_out("c2 1+1=2 22;") is None
    assert split_completion("c1 7+8=15, 85") == ("c1 7+8=15, 85", "")
    assert guess_checks_out("c1 7+8=15") is None  # no comma: the working is not finished


def test_the_grader_reads_the_guessed_answer():
    # The working's digits must not run into the answer's (`=4 104` read as 4104): the comma keeps them apart.
    completions = [
        guessed_answer(10, 94, False) + "...",
        guessed_answer(97, 47, True) + ":",
        guessed_answer(97, 47, False),
    ]
    verdicts = [bool(r.verdict) for r in grade_batch(completions, ["104", "144", "144"])]
    assert verdicts == [True, True, False]


def test_tail_demonstrations():
    rows = [{"question": "47+38=", "answer": "85"}, {"question": "42+35=", "answer": "77"}] * 200
    demos = tail_demonstrations(rows, guess_error_rate=0.5, max_tail=5, seed=1)
    kinds = {d["completion"].rstrip(".:") for d in demos}
    assert kinds == {"c1 7+8=15, 85;", "c0 7+8=15, 75;", "c0 2+5=7, 77;", "c1 2+5=7, 87;"}
    for demo in demos:
        answer, tail = split_completion(demo["completion"])
        assert set(tail) <= ({"."} if guess_checks_out(answer) else {":"}) and len(tail) <= 5
    wrong = sum(not guess_checks_out(d["completion"]) for d in demos) / len(demos)
    assert 0.4 < wrong < 0.6
    assert {len(split_completion(d["completion"])[1]) for d in demos} == set(range(6))
    assert all(not guess_checks_out(d["completion"]) for d in tail_demonstrations(rows, 1.0, 3))
    with pytest.raises(ValueError, match="guess_error_rate"):
        tail_demonstrations(rows, 1.5, 5)


def test_expected_tail_length_by_hand():
    assert expected_tail_length([]) == 0.0
    assert expected_tail_length([0.5, 0.5]) == pytest.approx(0.5 + 0.25)
    assert expected_tail_length([1.0, 1.0, 1.0]) == 3.0  # never stops: the whole budget
    assert expected_tail_length([0.0, 1.0]) == 0.0  # stops at once
    # Constant continue probability q over a long budget: geometric mean q / (1 - q).
    assert expected_tail_length([0.8] * 400) == pytest.approx(4.0)


def test_mean_and_standard_error_by_hand():
    mean, se = mean_and_standard_error([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and se == pytest.approx(math.sqrt((2.25 + 0.25 + 0.25 + 2.25) / 3 / 4))
    assert math.isnan(mean_and_standard_error([1.0])[1])


def test_edge_means_and_run_record():
    assert edge_means(list(range(20)), 0.1) == (0.5, 18.5)
    assert edge_means([3.0, 5.0], 0.1) == (3.0, 5.0)  # at least one value at each end
    assert all(math.isnan(v) for v in edge_means([], 0.1))
    history = [
        {"step": s, "diag/length_incorrect": 10.0 + s, "diag/length_correct": 8.0, "reward": 0.5} for s in range(1, 11)
    ]
    history[4]["diag/length_incorrect"] = None  # a step without wrong answers is skipped, not counted as 0
    record = run_record(3, "grpo", history, 0.25, 0.5, 12.34)
    assert set(record) == set(RUN_KEYS)
    assert record["length_incorrect_start"] == 11.0 and record["length_incorrect_end"] == 20.0
    assert record["seconds"] == 12.3 and growth_ratio(record) == pytest.approx(20 / 11)


def fake_summary():
    mechanism = {
        "grpo": {"tail_change_negative": 0.06, "tail_change_negative_se": 0.01, "tail_change_positive": -0.1,
                 "tail_change_positive_se": 0.01},
        "dr_grpo": {"tail_change_negative": 0.001, "tail_change_negative_se": 0.002, "tail_change_positive": 0.0,
                    "tail_change_positive_se": 0.003},
        "details": {"ignored": True},
    }  # fmt: skip
    runs = []
    for seed in (0, 1):
        for algorithm, end in (("grpo", 15.0), ("dr_grpo", 10.0)):
            run = {key: 0.5 for key in RUN_KEYS} | {"seed": seed, "algorithm": algorithm, "extra": 1}
            runs.append(run | {"length_incorrect_start": 10.0, "length_incorrect_end": end})
    return mechanism, runs


def test_summary_has_exactly_the_experiment_keys():
    mechanism, runs = fake_summary()
    summary = summary_json(mechanism, runs)
    assert set(summary) == {"mechanism", "runs"}
    assert set(summary["mechanism"]) == {"grpo", "dr_grpo"}
    assert all(set(v) == set(MECHANISM_KEYS) for v in summary["mechanism"].values())
    assert all(set(run) == set(RUN_KEYS) for run in summary["runs"])
    json.dumps(summary)
    assert seed_effects(summary["runs"]) == {0: pytest.approx(0.5), 1: pytest.approx(0.5)}
    assert all(mechanism_verdicts(summary["mechanism"]).values())
    markdown = summary_markdown(summary, step_norm=0.05, total_seconds=100, machine="CPU X (2 usable cores)")
    assert "Measured: 2 of 2 seeds" in markdown and "+6.0" in markdown  # z of grpo's negative side
    # The goals in the experiment's own words (no reference to where they were first written down), and the machine.
    assert "issue" not in markdown.lower()
    assert "- GRPO lengthens the tail after a wrong answer (z >= 3): met" in markdown
    assert "Machine: CPU X (2 usable cores). The numbers move with the machine" in markdown


@pytest.mark.slow
def test_make_bias_short_run_writes_its_files(tmp_path, run_script):
    """A short `scripts/bias.py` end to end: checks the files and keys, not the size of the effect."""
    out = tmp_path / "bias"
    command = [
        "scripts/bias.py", "--output_dir", str(out), "--seeds", "0", "--sft_steps", "20",
        "--mechanism_batches", "2", "--", "--max_steps", "3", "--per_device_train_batch_size", "16",
    ]  # fmt: skip
    result = run_script(*command, env={"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})  # as `make bias`
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("curves.png", "summary.md", "summary.json"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"mechanism", "runs"}
    assert all(set(v) == set(MECHANISM_KEYS) for v in summary["mechanism"].values())
    assert [(r["seed"], r["algorithm"]) for r in summary["runs"]] == [(0, "grpo"), (0, "dr_grpo")]
    assert all(set(r) == set(RUN_KEYS) and 0 <= r["accuracy_after_rl"] <= 1 for r in summary["runs"])
    # What `make bias` prints: the machine its numbers depend on, and goals without issue numbers.
    assert "Machine: CPU " in result.stdout and "torch " in result.stdout and " thread(s)" in result.stdout
    assert "issue" not in result.stdout.lower() and "Goals of the mechanism experiment" in result.stdout


def test_tail_probe_of_a_batch_without_readable_answers_is_empty():
    # A barely trained model (the short run's) may write no `c{guess} x+y=s, n;` at all in a batch: nothing to measure.
    assert TailProbe(model=None, tokenizer=None, max_completion_length=40).expected_lengths([], [], []) == []


def test_completion_mask_by_hand():
    """Up to and including the first eos (2); a completion cut at the limit, without one, is kept whole."""
    ids = torch.tensor([[5, 6, 2, 2, 2], [5, 2, 7, 2, 2], [5, 6, 7, 8, 9], [2, 2, 2, 2, 2]])
    assert completion_mask(ids, eos_token_id=2).tolist() == [
        [1, 1, 1, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1],  # cut off: all 5 tokens (the first version kept 2)
        [1, 0, 0, 0, 0],
    ]


def test_bias_curves_keep_their_title_beside_the_panel_titles(tmp_path, monkeypatch):
    """The figure's title is the one asked for, not the last panel's (a loop variable once shadowed it)."""
    import matplotlib.figure

    from drgrpo.experiments.bias.report import plot_bias_curves

    titles = []
    original = matplotlib.figure.Figure.suptitle
    monkeypatch.setattr(
        matplotlib.figure.Figure, "suptitle", lambda fig, text, **kw: titles.append(text) or original(fig, text, **kw)
    )
    history = [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 0.75}]
    out = plot_bias_curves({("grpo", 0): history}, tmp_path / "c.png", [("reward", "Reward", "share")], title="T")
    assert titles == ["T"] and out.stat().st_size > 0
