"""Evaluation metrics, gold normalisation, presets, sampling and summaries, against hand-computed values."""

from __future__ import annotations

import json
import math
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from drgrpo import evaluation as ev
from drgrpo.evaluation import backends

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------------------------------------------------
# pass@k
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),  # c / n
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (4, 1, 4, 1.0),  # n = k: any correct sample means pass
        (4, 0, 4, 0.0),  # n = k, none correct
        (8, 0, 1, 0.0),  # c = 0
        (8, 0, 8, 0.0),
        (8, 8, 1, 1.0),  # c = n
        (8, 8, 8, 1.0),
        (8, 7, 2, 1.0),  # n - c < k: every pair holds a correct sample
        (1, 1, 1, 1.0),
        (1, 0, 1, 0.0),
    ],
)
def test_pass_at_k_hand_values(n, c, k, expected):
    assert ev.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_exact_binomials_where_they_are_huge():
    # C(1000, 500) has ~300 digits; the product form must agree with exact rational arithmetic.
    n, c, k = 1000, 10, 500
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert ev.pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)
    assert ev.pass_at_k(1000, 1, 1) == pytest.approx(0.001, rel=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5), (0, 0, 1)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass_at_k needs"):
        ev.pass_at_k(n, c, k)


@pytest.mark.parametrize(
    ("n", "ks"), [(1, [1]), (2, [1, 2]), (4, [1, 2, 4]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8]), (16, [1, 2, 4, 8, 16])]
)
def test_pass_at_k_values(n, ks):
    assert ev.pass_at_k_values(n) == ks


# --------------------------------------------------------------------------------------------------------------------
# maj@k
# --------------------------------------------------------------------------------------------------------------------


def fraction_equivalent(a: str, b: str) -> bool:
    """A stand-in for math-verify on plain numbers: `1/2`, `0.5` and `2/4` are one answer."""
    try:
        return Fraction(a) == Fraction(b)
    except ValueError:
        return a == b


def test_majority_groups_by_equivalence_not_by_string():
    # "1/2", "0.5", "2/4" are three strings but one answer (3 votes) against "3" twice.
    answers = ["3", "1/2", "0.5", "3", "2/4"]
    correct = [False, True, True, False, True]
    assert ev.majority_vote(answers, correct, fraction_equivalent) is True
    # String equality would have elected "3".
    assert ev.majority_vote(answers, correct, lambda a, b: a == b) is False


def test_majority_tie_goes_to_the_answer_seen_first():
    assert ev.majority_vote(["7", "1/2", "0.5", "7"], [False, True, True, False], fraction_equivalent) is False
    assert ev.majority_vote(["0.5", "7", "7", "1/2"], [True, False, False, True], fraction_equivalent) is True


def test_majority_ignores_missing_answers_and_scores_no_answer_wrong():
    assert ev.majority_vote([None, None, "4", None], [False, False, True, False], fraction_equivalent) is True
    assert ev.majority_vote([None, None], [False, False], fraction_equivalent) is False


def test_majority_with_the_reward_library_equivalence():
    # The real verifier: \frac{1}{2} and 0.5 are one vote, so they outvote 3 (2 votes) 3 to 2.
    answers = ["3", "\\frac{1}{2}", "0.5", "3", "1/2"]
    assert ev.majority_vote(answers, [False, True, True, False, True], ev.answers_equivalent) is True


def test_majority_rejects_misaligned_inputs():
    with pytest.raises(ValueError, match="2 answers but 1 verdicts"):
        ev.majority_vote(["1", "2"], [True], fraction_equivalent)


# --------------------------------------------------------------------------------------------------------------------
# Gold answers and presets, on fixture rows shaped like each benchmark's real rows
# --------------------------------------------------------------------------------------------------------------------

FIXTURE_ROWS = {
    "gsm8k": [
        {
            "question": "Janet has 16 eggs and eats 3. How many are left?",
            "answer": "She has 16 - 3 = <<16-3=13>>13 eggs left.\n#### 13",
        },
        {"question": "A farm sells 1,250 eggs twice. How many?", "answer": "2 * 1,250 = 2,500\n#### 2,500"},
    ],
    "math500": [
        {
            "problem": "Convert the point $(0,3)$ to polar coordinates.",
            "solution": "We have $r = 3$ ... so $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$",
            "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
            "subject": "Precalculus",
            "level": 2,
            "unique_id": "test/precalculus/807.json",
        }
    ],
    "aime24": [
        {
            "id": 60,
            "problem": "Every morning Aya goes for a $9$-kilometer-long walk...",
            "solution": "$\\frac{9}{s} + t = 4$ ...",
            "answer": "204",
            "url": "https://artofproblemsolving.com/wiki/index.php/2024_AIME_I_Problems/Problem_1",
        }
    ],
    "amc": [
        {"id": 0, "problem": "What is $m+n$?", "answer": 142.0, "url": "https://artofproblemsolving.com/..."},
        {"id": 1, "problem": "What is the ratio?", "answer": 0.5, "url": "https://artofproblemsolving.com/..."},
    ],
    "amc23": [
        {
            "id": 0,
            "problem": "Cities $A$ and $B$ are $45$ miles apart...",
            "question": "Cities $A$ and $B$ are $45$ miles apart...",
            "answer": 27.0,
            "url": "https://artofproblemsolving.com/wiki/index.php/2023_AMC_12A_Problems/Problem_1",
        }
    ],
    "minerva": [
        {
            "problem": "Find the diameter of the image of a planet (in $\\mathrm{cm}$).",
            "solution": "Start with $s = \\alpha f$:\n\\[\ns=\\frac{45}{3600} \\frac{\\pi}{180} 7200"
            "=\\boxed{1.6} \\mathrm{~cm}\n\\]",
            "type": "Introduction to Astronomy (8.282J Spring 2006)",
            "idx": 0,
        },
        {
            "problem": "Give the answer as a fraction.",
            "solution": "A first guess $\\boxed{2}$ is wrong; the answer is $\\boxed{\\frac{1}{\\sqrt{2}}}$.",
            "type": "Physics",
            "idx": 1,
        },
    ],
    "olympiadbench": [
        {
            "id": 1606,
            "subfield": "Combinatorics",
            "context": None,
            "question": "How many moves does Sergey need?",
            "solution": ["Sergey can determine Xenia's number in 2 but not fewer moves..."],
            "final_answer": ["2"],
            "is_multiple_answer": False,
            "unit": None,
            "answer_type": "Numerical",
            "error": None,
        },
        {
            "id": 2,
            "subfield": "Number Theory",
            "context": None,
            "question": "Find all n.",
            "solution": ["..."],
            "final_answer": ["$69$,$84$"],
            "is_multiple_answer": True,
            "unit": None,
            "answer_type": "Numerical",
            "error": None,
        },
        {
            "id": 3,
            "subfield": "Algebra",
            "context": None,
            "question": "Find all pairs.",
            "solution": ["..."],
            "final_answer": ["$(6,3),(9,3)$"],
            "is_multiple_answer": True,
            "unit": None,
            "answer_type": "Tuple",
            "error": None,
        },
    ],
}

EXPECTED_GOLDS = {
    "gsm8k": ["13", "2500"],
    "math500": ["\\left( 3, \\frac{\\pi}{2} \\right)"],
    "aime24": ["204"],
    "amc": ["142", "0.5"],
    "amc23": ["27"],
    "minerva": ["1.6", "\\frac{1}{\\sqrt{2}}"],
    "olympiadbench": ["2", "69, 84", "(6,3),(9,3)"],
}


@pytest.mark.parametrize("name", sorted(FIXTURE_ROWS))
def test_preset_reads_question_and_gold_from_benchmark_shaped_rows(name):
    preset = ev.PRESETS[name]
    rows = FIXTURE_ROWS[name]
    problems = ev.problems_from_rows(rows, preset.question_column, preset.answer_column, preset.answer_format)
    assert [p.gold for p in problems] == EXPECTED_GOLDS[name]
    assert [p.question for p in problems] == [row[preset.question_column] for row in rows]
    assert [p.index for p in problems] == list(range(len(rows)))


@pytest.mark.parametrize("name", sorted(FIXTURE_ROWS))
def test_auto_format_reads_every_benchmark_shape(name):
    preset = ev.PRESETS[name]
    problems = ev.problems_from_rows(FIXTURE_ROWS[name], preset.question_column, preset.answer_column, "auto")
    assert [p.gold for p in problems] == EXPECTED_GOLDS[name]


@pytest.mark.parametrize("name", sorted(FIXTURE_ROWS))
def test_normalised_golds_grade_a_boxed_correct_answer_correct(name):
    golds = EXPECTED_GOLDS[name]
    verdicts = ev.grade_completions([f"So the answer is $\\boxed{{{g}}}$." for g in golds], golds)
    assert [v for v, _ in verdicts] == [ev.CORRECT] * len(golds)


def test_gold_normalisers_edge_cases():
    assert ev.gsm8k_final_answer("no marker") is None
    assert ev.gsm8k_final_answer("x\n#### -1,234,567") == "-1234567"
    assert ev.last_boxed("\\boxed{\\frac{a}{b}} then \\boxed{x^{2}}") == "x^{2}"
    assert ev.last_boxed("unclosed \\boxed{1") is None
    assert ev.number_answer(27.0) == "27"
    assert ev.number_answer(-3.25) == "-3.25"
    assert ev.number_answer(float("nan")) is None
    assert ev.number_answer("12.0") == "12"
    assert ev.list_answer([]) is None
    assert ev.list_answer(["$x=1$", " $2$ "]) == "x=1, 2"
    assert ev.plain_answer("  $\\frac{1}{2}$ ") == "\\frac{1}{2}"
    assert ev.plain_answer(None) is None
    assert ev.normalize_gold("\\boxed{1} and \\boxed{2}", "boxed") == "1, 2"  # training's name, the same reader
    with pytest.raises(ValueError, match="answer_format='latex' is unknown"):
        ev.normalize_gold("1", "latex")


def test_missing_column_names_the_column_and_the_fix():
    with pytest.raises(ValueError, match=r"Column 'problem' not in gsm8k.jsonl.*--question_column"):
        ev.problems_from_rows(FIXTURE_ROWS["gsm8k"], "problem", "answer", "gsm8k", source="gsm8k.jsonl")


def test_preset_aliases_and_unknown_names():
    assert ev.resolve_preset("MATH-500").name == "math500"
    assert ev.resolve_preset("AIME").name == "aime24"
    assert ev.resolve_preset("olympiad_bench").dataset_config == "OE_TO_maths_en_COMP"
    with pytest.raises(ValueError, match="Unknown benchmark 'mmlu'. Presets: aime24"):
        ev.resolve_preset("mmlu")


# --------------------------------------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------------------------------------


def test_sample_seed_is_stable_and_distinct():
    assert ev.sample_seed(0, 3, 1) == ev.sample_seed(0, 3, 1)
    seeds = {ev.sample_seed(s, p, i) for s in range(3) for p in range(20) for i in range(8)}
    assert len(seeds) == 3 * 20 * 8
    assert all(0 <= s < 2**63 for s in seeds)


# The evaluator samples with the CPU engine's sampler (drgrpo/algorithm/rollout/sampler.py; its own tests are in
# tests/test_generation_engine.py): here, what evaluation relies on, one generator per sample seeded by sample_seed.


def _draws(seeds, logits, steps, **params):
    from drgrpo.algorithm.rollout.sampler import SamplingParams, sample_next

    generators = [torch.Generator().manual_seed(seed) for seed in seeds]
    return [sample_next(logits, SamplingParams(**params), generators)[0].tolist() for _ in range(steps)]


def test_sampling_draws_from_softmax_over_temperature():
    probs = torch.tensor([0.6, 0.3, 0.1])
    logits = torch.log(probs) * 2.0  # at temperature 2 the sampling distribution is `probs` again
    draws = 6000
    (picks,) = _draws(range(draws), logits.expand(draws, 3), 1, temperature=2.0)
    freq = torch.bincount(torch.tensor(picks), minlength=3).float() / draws
    assert torch.allclose(freq, probs, atol=0.025), freq


def test_sampling_does_not_depend_on_the_batch():
    torch.manual_seed(0)
    logits = torch.randn(5, 50)
    seeds = [ev.sample_seed(1, p, 0) for p in range(5)]
    together = _draws(seeds, logits, 4, temperature=1.0)  # four decoding steps: each row keeps its own stream
    for row in range(5):
        alone = _draws([seeds[row]], logits[row : row + 1], 4, temperature=1.0)
        assert [step[0] for step in alone] == [step[row] for step in together]
    reversed_batch = _draws(seeds[::-1], logits.flip(0), 1, temperature=1.0)
    assert reversed_batch[0][::-1] == together[0]


def test_sampling_with_a_small_top_p_is_greedy():
    logits = torch.tensor([[0.1, 3.0, 0.2, -1.0]]).expand(200, 4)
    (picks,) = _draws(range(200), logits, 1, temperature=1.0, top_p=0.01)
    assert set(picks) == {1}


def test_sampling_rejects_bad_settings():
    from drgrpo.algorithm.rollout.sampler import SamplingParams

    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(temperature=1.0, top_p=0.0)


def test_backend_choice_without_vllm_or_gpu(monkeypatch):
    # Pin what the machine has, so that both branches are checked wherever the suite runs.
    monkeypatch.setattr(backends, "vllm_usable", lambda: False)
    assert ev.choose_backend("auto") == "transformers"
    with pytest.raises(ValueError, match="backend 'vllm' needs vLLM installed"):
        ev.choose_backend("vllm")
    monkeypatch.setattr(backends, "vllm_usable", lambda: True)
    assert ev.choose_backend("auto") == "vllm"
    assert ev.choose_backend("transformers") == "transformers"


# --------------------------------------------------------------------------------------------------------------------
# Summaries and tables
# --------------------------------------------------------------------------------------------------------------------


def _row(p, s, correct, extracted, tokens, truncated=False, verdict=None):
    verdict = verdict or (ev.CORRECT if correct else (ev.INCORRECT if extracted is not None else ev.NO_ANSWER))
    return {
        "problem_index": p,
        "sample_index": s,
        "correct": correct,
        "extracted": extracted,
        "num_tokens": tokens,
        "truncated": truncated,
        "verdict": verdict,
    }


HAND_ROWS = [
    # problem 0: one of two right; tie "5" (first, correct) vs "4" -> maj right
    _row(0, 0, True, "5", 10),
    _row(0, 1, False, "4", 20),
    # problem 1: both wrong; one without an answer and truncated
    _row(1, 0, False, "7", 30),
    _row(1, 1, False, None, 40, truncated=True),
    # problem 2: gold unparsable: scored wrong, counted
    _row(2, 0, False, "1", 50, verdict=ev.GOLD_UNPARSABLE),
    _row(2, 1, False, "1", 60, verdict=ev.GOLD_UNPARSABLE),
]


def test_summarize_hand_computed():
    summary = ev.summarize(HAND_ROWS[::-1], n=2, equivalent=fraction_equivalent)  # row order must not matter
    assert summary["num_problems"] == 3
    assert summary["num_samples"] == 6
    assert summary["pass@1"] == pytest.approx(1 / 6)
    assert summary["pass@2"] == pytest.approx((1 + 0 + 0) / 3)
    assert summary["maj@2"] == pytest.approx(1 / 3)
    assert summary["mean_length_correct"] == pytest.approx(10)
    assert summary["mean_length_incorrect"] == pytest.approx((20 + 30 + 40 + 50 + 60) / 5)
    assert summary["truncation_rate"] == pytest.approx(1 / 6)
    assert summary["no_answer_rate"] == pytest.approx(1 / 6)
    assert summary["unparsable_golds"] == 1
    assert summary["grading_failures"] == 0


TRUNCATED_ROWS = [
    # problem 0: both right, the second cut off by the token budget
    _row(0, 0, True, "5", 10),
    _row(0, 1, True, "5", 99, truncated=True),
    # problem 1: a wrong finished answer, and a cut-off text in which the grader found the right number
    _row(1, 0, False, "7", 20),
    _row(1, 1, True, "3", 99, truncated=True),
]


def test_truncated_samples_are_reported_apart_and_can_be_counted_wrong():
    graded = ev.summarize(TRUNCATED_ROWS, n=2, equivalent=fraction_equivalent)
    assert (graded["truncated_samples"], graded["truncated_graded_correct"], graded["truncated_as_wrong"]) == (
        2,
        2,
        False,
    )
    assert graded["pass@1"] == pytest.approx(3 / 4)
    assert graded["maj@2"] == pytest.approx(1 / 2)  # problem 1: a tie, won by the first answer (7, wrong)
    paper = ev.summarize(TRUNCATED_ROWS, n=2, equivalent=fraction_equivalent, truncated_as_wrong=True)
    assert (paper["truncated_samples"], paper["truncated_graded_correct"], paper["truncated_as_wrong"]) == (2, 2, True)
    assert paper["pass@1"] == pytest.approx(1 / 4)
    assert paper["pass@2"] == pytest.approx((1 + 0) / 2)
    assert paper["maj@2"] == pytest.approx(1 / 2)  # a cut-off sample does not vote: problem 0 is still 5
    assert paper["mean_length_correct"] == pytest.approx(10)
    assert paper["mean_length_incorrect"] == pytest.approx((99 + 20 + 99) / 3)
    markdown = ev.summary_markdown(
        {
            **paper,
            **{k: "x" for k in ("benchmark", "model", "prompt_template")},
            "n": 2,
            "temperature": 0,
            "top_p": 1,
            "max_new_tokens": 99,
            "seed": 0,
            "backend": "b",
        }
    )
    assert "| truncated samples graded correct (counted wrong) | 2 of 2 |" in markdown


def test_make_eval_counts_truncated_samples_wrong_for_the_paper_suite():
    def dry_run(bench: str) -> str:
        command = ["make", "-n", "-o", "install", "eval", f"BENCH={bench}", "MODEL=m", "PY=python"]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout

    assert "--truncated_as_wrong true" in dry_run("paper")
    assert "--truncated_as_wrong" not in dry_run("math500")
    assert ev.EvalArguments(model_name_or_path="m").truncated_as_wrong is False


def test_summarize_refuses_an_incomplete_run():
    with pytest.raises(ValueError, match=r"Problems \[1\] do not have exactly n=2 samples"):
        ev.summarize(HAND_ROWS[:3], n=2, equivalent=fraction_equivalent)


def _summary(model, benchmark, value, n=4):
    return {"model": model, "benchmark": benchmark, "n": n, "pass@1": value, f"maj@{n}": value / 2}


def test_comparison_table_models_by_benchmarks_in_paper_order():
    table = ev.comparison_table(
        [
            _summary("base", "math500", 0.5),
            _summary("base", "aime24", 0.1),
            _summary("drgrpo", "math500", 0.75),
            _summary("drgrpo", "aime24", 0.2),
        ]
    )
    lines = table.strip().splitlines()
    assert lines[0] == "| model | metric (%) | AIME 2024 | MATH-500 | Avg. |"
    assert lines[2] == "| base | pass@1 | 10.0 | 50.0 | 30.0 |"
    assert lines[3] == "| drgrpo | pass@1 | 20.0 | 75.0 | 47.5 |"
    assert len(lines) == 4  # no empty cell, no note


def test_comparison_table_missing_cells_metric_and_paper_rows():
    """`make eval-compare ARGS="--metric maj@4 --paper"`: each row is labelled with its own metric (the paper's are
    greedy pass@1, not maj@4), and every empty cell is explained under the table."""
    table = ev.comparison_table(
        [_summary("a", "gsm8k", 0.5), _summary("a", "math500", 0.25), _summary("b", "math500", 1.0, n=16)],
        metric="maj@4",
        references={"Oat-Zero-7B (paper)": {"math500": 80.0}},
    )
    lines = table.strip().splitlines()
    assert lines[0] == "| model | metric (%) | MATH-500 | GSM8K | Avg. |"
    assert lines[2] == "| a | maj@4 | 12.5 | 25.0 | 18.8 |"
    assert lines[3] == "| b | maj@4 | – | – | – |"
    assert lines[4] == "| Oat-Zero-7B (paper) | greedy pass@1 | 80.0 | – | – |"
    notes = lines[6:]
    assert notes[0] == (
        "- – b on math500: no maj@4: its summary has pass@1, maj@16 (n=16 samples: maj@k is reported at k = n; "
        "rerun with N=4, or pick one of those with --metric)."
    )
    assert "- – b on gsm8k: not evaluated on it." in notes
    assert "- – Oat-Zero-7B (paper) on gsm8k: not in the published table." in notes
    assert any("published rows are greedy pass@1 whatever --metric" in note for note in notes)


def test_comparison_table_says_how_many_problems_each_run_had():
    """`make eval-compare`: the problem count is in the column title when every run had the same number, else in each
    cell (a run cut with --max_problems is not the benchmark)."""
    same = [{**_summary(m, "math500", 0.5), "num_problems": 500} for m in ("a", "b")]
    assert ev.comparison_table(same).splitlines()[0] == "| model | metric (%) | MATH-500 (500 problems) | Avg. |"
    cut = [{**_summary("a", "gsm8k", 0.5), "num_problems": 1319}, {**_summary("b", "gsm8k", 0.25), "num_problems": 100}]
    lines = ev.comparison_table(cut).splitlines()
    assert lines[0] == "| model | metric (%) | GSM8K | Avg. |"
    assert lines[2] == "| a | pass@1 | 50.0 (1319 problems) | 50.0 |"
    assert lines[3] == "| b | pass@1 | 25.0 (100 problems) | 25.0 |"


def test_comparison_table_rejects_two_runs_of_one_cell():
    with pytest.raises(ValueError, match="Two evaluations of a on math500"):
        ev.comparison_table([_summary("a", "math500", 0.5), _summary("a", "math500", 0.6)])


def test_summary_markdown_lists_every_metric():
    summary = {
        **ev.summarize(HAND_ROWS, n=2, equivalent=fraction_equivalent),
        "benchmark": "toy",
        "model": "m",
        "n": 2,
        "prompt_template": "plain",
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": 64,
        "seed": 0,
        "backend": "transformers",
    }
    text = ev.summary_markdown(summary)
    assert "| pass@1 (%) | 16.7 |" in text
    assert "| pass@2 (%) | 33.3 |" in text
    assert "| maj@2 (%) | 33.3 |" in text
    assert "| mean length, correct (tokens) | 10.0 |" in text
    assert "| unparsable golds (problems, scored wrong) | 1 |" in text


# --------------------------------------------------------------------------------------------------------------------
# Resume bookkeeping
# --------------------------------------------------------------------------------------------------------------------


def test_read_samples_cuts_a_torn_last_line(tmp_path):
    path = tmp_path / "samples.jsonl"
    rows = [{"problem_index": 0, "sample_index": 0}, {"problem_index": 1, "sample_index": 0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"problem_index": 2, "sam')
    assert ev.read_samples(path) == rows
    assert path.read_text().endswith("}\n")  # the torn tail is gone, so appends start on a clean line


def test_read_samples_names_a_corrupt_line(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text('{"a": 1}\nnot json\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        ev.read_samples(path)


def test_resume_refuses_other_settings(tmp_path, monkeypatch):
    ev._check_config(tmp_path, {"model": "m", "n": 4, "seed": 0}, overwrite=False)
    ev._check_config(tmp_path, {"model": "m", "n": 4, "seed": 0}, overwrite=False)  # same settings: fine
    with pytest.raises(ValueError, match=r"other settings \(n: 4 -> 8\).*--overwrite true"):
        ev._check_config(tmp_path, {"model": "m", "n": 8, "seed": 0}, overwrite=False)
    (tmp_path / "samples.jsonl").write_text("{}\n")
    ev._check_config(tmp_path, {"model": "m", "n": 8, "seed": 0}, overwrite=True)
    # Run by `make eval` (make sets MAKELEVEL), the fix is what make needs: ARGS="--overwrite true".
    monkeypatch.setenv("MAKELEVEL", "1")
    with pytest.raises(ValueError, match=r'ARGS="--output_dir DIR"\), or ARGS="--overwrite true" to start again'):
        ev._check_config(tmp_path, {"model": "m", "n": 4, "seed": 0}, overwrite=False)
    assert not (tmp_path / "samples.jsonl").exists()


def test_eval_arguments_validate():
    with pytest.raises(ValueError, match=r"evaluation: top_p: 1.5 is not allowed: .* it takes a number in \(0, 1\]"):
        ev.EvalArguments(model_name_or_path="m", top_p=1.5)
    with pytest.raises(ValueError, match="answer_format 'x'"):
        ev.EvalArguments(model_name_or_path="m", answer_format="x")


def test_recipe_prompt_settings(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "prompt_template: chat\nsystem_prompt: Be brief.\nchat_template_kwargs: {enable_thinking: false}\n"
        "extra_eos_tokens: ['<|im_end|>']\n"
    )
    assert ev.recipe_prompt_settings(recipe) == {
        "prompt_template": "chat",
        "system_prompt": "Be brief.",
        "chat_template_kwargs": {"enable_thinking": False},
        "extra_eos_tokens": ["<|im_end|>"],
    }
    args = ev.EvalArguments(
        model_name_or_path="m", recipe=str(recipe), chat_template_kwargs='{"enable_thinking": true}'
    )
    assert ev._prompt_settings(args) == ("chat", "Be brief.", {"enable_thinking": True})
    with pytest.raises(FileNotFoundError, match="recipe 'nope.yaml' not found"):
        ev.recipe_prompt_settings("nope.yaml")


def test_evaluation_reads_answers_with_the_recipes_extraction_mode(tmp_path):
    from drgrpo.evaluation.runner import extraction_mode

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("answer_extraction_mode: boxed_only\n")
    assert extraction_mode(ev.EvalArguments(model_name_or_path="m")) == "math_verify"
    assert extraction_mode(ev.EvalArguments(model_name_or_path="m", recipe=str(recipe))) == "boxed_only"
    args = ev.EvalArguments(model_name_or_path="m", recipe=str(recipe), answer_extraction_mode="lenient")
    assert extraction_mode(args) == "lenient"
    with pytest.raises(ValueError, match="answer_extraction_mode='boxed'"):
        ev.EvalArguments(model_name_or_path="m", answer_extraction_mode="boxed")
    completions, golds = ["The answer is 4.", "So \\boxed{4}."], ["4", "4"]
    assert [v for v, _ in ev.grade_completions(completions, golds, "boxed_only")] == [ev.NO_ANSWER, ev.CORRECT]
    assert [v for v, _ in ev.grade_completions(completions, golds, "math_verify")] == [ev.CORRECT, ev.CORRECT]


def test_a_gold_with_several_boxes_keeps_them_all():
    assert ev.last_boxed("so $\\boxed{1}$ and $\\boxed{2}$.") == "1, 2"
    assert ev.last_boxed("first \\boxed{1}, then after checking \\boxed{2}") == "2"


def test_eval_compare_with_paper_rows_names_each_rows_metric(tmp_path, capsys):
    """`make eval-compare ARGS="--metric maj@8 --paper"` on a run with n=16: the paper's rows say greedy pass@1, and
    the empty maj@8 cell says why (the run has maj@16)."""
    from scripts.compare_evals import main as compare

    folder = tmp_path / "eval" / "m" / "math500"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(_summary("m", "math500", 0.5, n=16)))
    table = compare([str(tmp_path / "eval"), "--metric", "maj@8", "--paper"])
    assert "| m | maj@8 | – |" in table
    assert "| Oat-Zero-7B (paper) | greedy pass@1 | 43.3 | 62.7 | 80.0 | 30.1 | 41.0 | 51.4 |" in table
    assert "- – m on math500: no maj@8: its summary has pass@1, maj@16 (n=16 samples" in table
    assert capsys.readouterr().out == table
