"""`make bias-real`'s parts: the importance-weighted length change by hand, the mechanism on the tiny model (weights
restored, numbers finite, resumed to the same numbers), the paired difference, the report's per-seed records and
goals, the expected time, the load sampler, and the time budget (a run stopped by its deadline resumes; wall time
adds up over commands)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict

import pytest

from drgrpo.core.errors import RecipeError
from drgrpo.experiments.bias.chat_mechanism import (
    COUNTS,
    ChatMechanismSettings,
    importance_weighted_mean,
    length_change,
    pooled_change,
    read_batches,
    run_chat_mechanism,
    summarise,
)
from drgrpo.experiments.bias.real_experiment import RealBiasSettings, expected_seconds, mechanism_prompts
from drgrpo.experiments.bias.real_report import accuracy_by_length, accuracy_gaps, markdown, seed_records
from drgrpo.experiments.budget import Deadline, DeadlineCallback, OutOfTime
from drgrpo.experiments.comparison import tokens_per_correct
from drgrpo.experiments.load import LoadSampler, add_segment, segments_total


def test_importance_weighted_mean_by_hand():
    # Ratios 1 and e: the second value counts e times as much.
    assert importance_weighted_mean([10.0, 20.0], [0.0, 1.0]) == pytest.approx((10 + 20 * math.e) / (1 + math.e))
    assert importance_weighted_mean([10.0, 20.0], [500.0, 500.0]) == pytest.approx(15.0)  # no overflow
    with pytest.raises(ValueError, match="one log-ratio per value"):
        importance_weighted_mean([1.0], [0.0, 0.0])


def test_length_change_and_pooling_by_hand():
    # Wrong answers of 10 and 30 tokens; the update doubles the long one's probability: mean 20 -> (10 + 60) / 3.
    change, n = length_change([10, 30, 5], [0.0, math.log(2.0), 3.0], [True, True, False])
    assert n == 2 and change == pytest.approx(70 / 3 - 20)
    assert math.isnan(length_change([10], [0.0], [False])[0])
    assert pooled_change([(1.0, 3), (float("nan"), 0), (-1.0, 1)]) == pytest.approx(0.5)
    assert pooled_change([(float("nan"), 0)]) is None


def test_tokens_per_correct():
    assert tokens_per_correct({"pass@1": 0.25, "mean_length": 30.0}) == 120.0
    assert tokens_per_correct({"pass@1": 0.0, "mean_length": 30.0}) is None


def test_expected_time_grows_with_the_work():
    base = RealBiasSettings()
    more = RealBiasSettings(seeds=(0, 1, 2, 3, 4, 5))
    assert expected_seconds(more, 60, 2) > expected_seconds(base, 60, 2) > expected_seconds(base, 30, 2) > 0


def test_expected_time_of_runs_side_by_side_by_hand():
    """Two runs at a time take the training time of one: 3 seeds x 60 steps x 17 s, against twice that one after the
    other; the mechanism (24 x 60 s) and the 7 evaluations (7 x 100 x 0.3 s) are the same either way."""
    side = expected_seconds(RealBiasSettings(side_by_side=True), 60, 2)
    alone = expected_seconds(RealBiasSettings(side_by_side=False), 60, 2)
    assert side == pytest.approx(24 * 60 + 3 * 60 * 17 + 7 * 100 * 0.3)
    assert alone - side == pytest.approx(3 * 60 * 17)


def test_load_sampler_reports_a_mean():
    with LoadSampler(interval=0.05) as load:
        time.sleep(0.2)
    assert load.mean is not None and load.mean >= 0 and len(load.samples) >= 2


def fake_comparison(grpo_end: float, dr_end: float, grpo_accuracy: float, dr_accuracy: float) -> dict:
    def row(run, end, accuracy):
        steps = range(1, 11)
        return {
            "run": run, "eval_pass_at_1": accuracy, "eval_tokens_per_correct": 40.0, "train_seconds": 100.0,
            "train_load": 3.5,
            "per_step": {"pass_rate": dict.fromkeys(steps, 0.5), "truncation_rate": dict.fromkeys(steps, 0.1),
                         "length_correct": dict.fromkeys(steps, 12.0),
                         "length_incorrect": {s: (20.0 if s == 1 else end) for s in steps}},
        }  # fmt: skip

    return {"runs": [row("GRPO", grpo_end, grpo_accuracy), row("Dr.GRPO", dr_end, dr_accuracy)],
            "start_pass_at_1": 0.2, "start_tokens_per_correct": 200.0}  # fmt: skip


def test_report_records_gap_and_goals():
    comparisons = {0: fake_comparison(30.0, 20.0, 0.50, 0.49), 1: fake_comparison(22.0, 20.0, 0.50, 0.40)}
    runs = [r for seed, c in comparisons.items() for r in seed_records(seed, c, 0.1)]
    assert [r["algorithm"] for r in runs] == ["grpo", "dr_grpo", "grpo", "dr_grpo"]
    assert runs[0]["length_incorrect_start"] == 20.0 and runs[0]["length_incorrect_end"] == 30.0
    assert runs[0]["truncation_end"] == pytest.approx(0.1) and runs[0]["load"] == 3.5
    assert accuracy_gaps(runs) == {0: pytest.approx(-1.0), 1: pytest.approx(-10.0)}
    ablation = fake_comparison(30.0, 20.0, 0.5, 0.5)
    ablation["runs"][1]["run"] = "GRPO (smollm2_135m_long_grpo_no_std)"
    assert [r["algorithm"] for r in seed_records(0, ablation, 0.1)] == ["grpo", "GRPO (smollm2_135m_long_grpo_no_std)"]
    mechanism = {
        name: {"tail_change_negative": 0.5, "tail_change_negative_se": 0.1, "tail_change_positive": -0.5,
               "tail_change_positive_se": 0.1} for name in ("grpo", "dr_grpo")
    } | {"details": {"batches": {"negative": 3}, "mean_abs_log_ratio": {"grpo": 0.1, "dr_grpo": 0.1},
                     "completions": {"probe_wrong": 5, "probe_right": 3, "truncated": 1, "groups_flat": 0},
                     "probe_length_wrong": 30.0, "probe_length_right": 12.0, "seconds": 9.0, "load": 2.0}}  # fmt: skip
    by_length = accuracy_by_length([{"num_tokens": 12, "correct": True}, {"num_tokens": 90, "correct": False}])
    text = markdown(mechanism, runs, RealBiasSettings(), "CPU X", 10.0, by_length)
    assert "| <= 20 | 1 | 1 | 100% |" in text and "| > 80 | 1 | 0 | 0% |" in text
    assert "by length" not in markdown(mechanism, runs, RealBiasSettings(), "CPU X", 10.0)
    assert "seed 0: +0.50" in text and "seed 1: +0.10" in text  # 30/20 - 20/20 and 22/20 - 20/20
    assert "- gap >= +0.25 on every seed: 1 of 2 seeds" in text
    assert "- Dr.GRPO at most 3 points below GRPO held-out: 1 of 2 seeds" in text
    assert "Dr.GRPO leaves it after a wrong answer (|z| <= 2): NOT met" in text  # z +5.0 for dr_grpo here
    assert "| 0 | GRPO | 20.00 → 30.00 (1.50) |" in text and "| 200.0 → 40.0 |" in text


def test_mechanism_prompts_have_one_token_length(tmp_path, tiny_model_path):
    from transformers import AutoTokenizer

    from drgrpo.experiments.arithmetic_task import write_chat_addition_task

    data = write_chat_addition_task(tmp_path, num_test=20, seed=0, max_operand=30)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    assert tokenizer.chat_template, "the tiny model ships a chat template (drgrpo/experiments/tiny.py)"
    prompts, golds = mechanism_prompts(data["train"], tokenizer)
    assert prompts and len(prompts) == len(golds)
    assert len({len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts}) == 1


def test_length_sorted_micro_batches_score_as_one_padded_batch(tiny_model_path):
    """Scoring shortest-first micro-batches cut to their own width gives each completion the log-probability the
    whole padded batch gives it, in the completions' order."""
    import torch
    from transformers import AutoModelForCausalLM

    from drgrpo.experiments.bias.chat_mechanism import _summed_logps, micro_batches, sequence_logps

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    torch.manual_seed(0)
    prompt_ids = torch.randint(3, 20, (5, 4))
    completion_ids = torch.randint(3, 20, (5, 7))
    mask = (torch.arange(7).unsqueeze(0) < torch.tensor([[7], [2], [5], [1], [3]])).long()
    assert [(r.tolist(), w) for r, w in micro_batches(mask, 2)] == [([3, 1], 2), ([4, 2], 5), ([0], 7)]
    with torch.no_grad():
        whole = _summed_logps(model, prompt_ids, completion_ids, mask, 0.7)
    assert torch.allclose(sequence_logps(model, prompt_ids, completion_ids, mask, 0.7, 2), whole, atol=1e-5)


class ScriptedDeadline(Deadline):
    """A deadline whose `remaining()` answers from a script (the last answer repeats): a stop at a chosen point."""

    def __init__(self, *answers: float) -> None:
        super().__init__(seconds=1.0)
        self.answers = list(answers)

    def remaining(self) -> float:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


TINY_PROMPTS = [f"{a}+{b}=" for a in range(10, 20) for b in range(10, 20)]
TINY_GOLDS = [str(int(p[:2]) + int(p[3:5])) for p in TINY_PROMPTS]
TINY_MECHANISM = ChatMechanismSettings(num_batches=2, prompts_per_batch=2, group_size=4, max_completion_length=8,
                                       temperature=1.0, micro_batch=4)  # fmt: skip


@pytest.mark.slow
def test_chat_mechanism_on_the_tiny_model_resumes_to_the_same_numbers(tiny_model_path, tmp_path):
    """Two batches on the tiny model (plain prompts `ab+cd=`): the counts add up and the keys are the report's; a run
    stopped by its deadline after one batch keeps it, and the rerun finishes with the same numbers as one
    uninterrupted run (each batch has its own seed; each update starts from the restored weights)."""
    whole = run_chat_mechanism(str(tiny_model_path), TINY_PROMPTS, TINY_GOLDS, TINY_MECHANISM)
    counts = whole["details"]["completions"]
    assert counts["probe_wrong"] + counts["probe_right"] == 2 * 2 * 4
    assert counts["update_wrong"] + counts["update_right"] == 2 * 2 * 4
    assert set(whole) == {"grpo", "dr_grpo", "details"} and whole["details"]["batches_measured"] == 2
    for name in ("grpo", "dr_grpo"):
        assert set(whole[name]) == {"tail_change_negative", "tail_change_negative_se", "tail_change_positive",
                                    "tail_change_positive_se"}  # fmt: skip
        assert whole["details"]["mean_abs_log_ratio"][name] >= 0
    json.dumps(whole)

    batches = tmp_path / "batches.jsonl"
    with pytest.raises(OutOfTime, match="1 of 2 batches kept"):  # time for the first batch, none for the second
        run_chat_mechanism(str(tiny_model_path), TINY_PROMPTS, TINY_GOLDS, TINY_MECHANISM, batches,
                           ScriptedDeadline(math.inf, -1.0))  # fmt: skip
    assert len(batches.read_text().splitlines()) == 1
    resumed = run_chat_mechanism(str(tiny_model_path), TINY_PROMPTS, TINY_GOLDS, TINY_MECHANISM, batches)
    assert resumed["details"]["per_batch"] == whole["details"]["per_batch"]
    assert resumed["details"]["completions"] == whole["details"]["completions"]
    assert len(batches.read_text().splitlines()) == 2


def test_kept_mechanism_batches_must_share_the_settings(tmp_path):
    """A batch file measured with another step size is refused in one line naming the file; a line cut by a kill is
    measured again; more batches than were kept is allowed (the number is not part of the check)."""
    settings = ChatMechanismSettings(num_batches=3)
    record = {"batch": 0, "settings": {k: v for k, v in asdict(settings).items() if k != "num_batches"}}
    path = tmp_path / "batches.jsonl"
    path.write_text(json.dumps(record) + "\n" + '{"batch": 1, "sett')
    assert list(read_batches(path, ChatMechanismSettings(num_batches=24))) == [0]
    with pytest.raises(RecipeError, match=r"batches\.jsonl holds mechanism batches measured with other settings"):
        read_batches(path, ChatMechanismSettings(step_norm=0.5))
    assert read_batches(tmp_path / "missing.jsonl", settings) == {}


def test_paired_difference_and_totals_over_batch_records():
    """`summarise` by hand: two batches, GRPO and Dr.GRPO changes per side; the paired difference is taken batch by
    batch, a side without answers (None) is left out, the load is weighted by each batch's seconds."""

    def record(grpo, dr, seconds, load):
        changes = {"grpo": {"negative": grpo, "positive": None}, "dr_grpo": {"negative": dr, "positive": None}}
        return {"changes": changes,
                "counts": dict.fromkeys(COUNTS, 1), "probe_lengths": {"negative": [10, 20], "positive": []},
                "mean_abs_log_ratio": {"grpo": 0.1, "dr_grpo": 0.3}, "seconds": seconds, "load": load}  # fmt: skip

    result = summarise([record(1.0, 0.0, 10.0, 2.0), record(3.0, 0.5, 30.0, 4.0)], ChatMechanismSettings())
    assert result["grpo"]["tail_change_negative"] == pytest.approx(2.0)
    assert result["grpo"]["tail_change_negative_se"] == pytest.approx(1.0)  # std sqrt(2) / sqrt(2)
    paired = result["details"]["grpo_minus_dr_grpo"]
    assert paired["tail_change_negative"] == pytest.approx((1.0 + 2.5) / 2)
    assert paired["tail_change_negative_se"] == pytest.approx(0.75)  # differences 1.0, 2.5: std 1.06 / sqrt(2)
    assert math.isnan(paired["tail_change_positive"]) and result["details"]["batches"]["positive"] == 0
    assert result["details"]["load"] == pytest.approx(3.5) and result["details"]["seconds"] == 40.0
    assert result["details"]["probe_length_wrong"] == 15.0 and result["details"]["completions"]["truncated"] == 2


def test_deadline_callback_stops_only_when_the_next_step_would_not_fit():
    """The trainer is stopped, with a checkpoint, after a step when less time is left than that step took; not when
    enough is left, and not after the last step (the run is done)."""
    from transformers import TrainerControl, TrainerState

    state, args = TrainerState(global_step=3, max_steps=10), None
    roomy = DeadlineCallback(ScriptedDeadline(math.inf))
    roomy.on_train_begin(args, state, TrainerControl())
    assert not roomy.on_step_end(args, state, TrainerControl()).should_training_stop
    tight = DeadlineCallback(ScriptedDeadline(-1.0))
    tight.on_train_begin(args, state, TrainerControl())
    control = tight.on_step_end(args, state, TrainerControl())
    assert control.should_training_stop and control.should_save
    last = tight.on_step_end(args, TrainerState(global_step=10, max_steps=10), TrainerControl())
    assert not last.should_training_stop and not last.should_save
    with pytest.raises(OutOfTime, match="spent before the next thing"):
        Deadline(0.0).check("the next thing")
    Deadline(None).check("anything")  # no limit


def test_wall_time_adds_up_over_commands(tmp_path):
    path = tmp_path / "wall_time.json"
    assert segments_total(path) == (0, None)
    add_segment(path, 100.0, 2.0)
    add_segment(path, 300.0, 6.0)
    add_segment(path, 5.0, None)
    assert segments_total(path) == (405.0, 5.0)  # (100 x 2 + 300 x 6) / 400


@pytest.mark.slow
def test_a_run_stopped_by_its_deadline_resumes_and_counts_both_commands(tiny_model_path, addition_data, tmp_path):
    """A comparison run stopped by its deadline after step 1 of 2 raises `OutOfTime` with a checkpoint saved and no
    evaluation; the same call without a deadline resumes it at step 2, evaluates it, and its training time is the
    sum of both commands'."""
    from drgrpo.core.checkpoints import find_resumable_checkpoint
    from drgrpo.experiments.comparison import RUN_ROW, RUN_WALL_TIME, CompareSettings, StartingPoint, compare_one

    overrides = ("--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4",
                 "--save_strategy", "steps", "--save_steps", "100")  # fmt: skip
    begin = StartingPoint(str(tiny_model_path), addition_data["train"], addition_data["test"], "plain")
    run = tmp_path / "tiny_grpo"

    def settings(deadline):
        return CompareSettings(task="tiny", output_dir=str(tmp_path), overrides=overrides, resume=True,
                               deadline=deadline)  # fmt: skip

    with pytest.raises(OutOfTime, match="stopped at step 1 of 2"):
        compare_one("recipes/tiny_grpo.yaml", settings(ScriptedDeadline(math.inf, -1.0)), begin)
    assert find_resumable_checkpoint(run).name == "checkpoint-1"  # saved although save_steps is 100
    assert not (run / RUN_ROW).exists() and not (tmp_path / "eval").exists()
    row, history = compare_one("recipes/tiny_grpo.yaml", settings(None), begin)
    assert [h["step"] for h in history if "loss" in h] == [1, 2]
    segments = json.loads((run / RUN_WALL_TIME).read_text())
    assert len(segments) == 2 and row["train_seconds"] == pytest.approx(sum(s["seconds"] for s in segments))
    assert row["eval_problems"] == 50 and (run / RUN_ROW).is_file()


def test_a_finished_run_is_kept_when_resuming(tmp_path):
    """`make bias-real` rerun after an interruption: a run with its `row.json` is read back, not trained again, and its
    per-step curves come back with integer steps."""
    from drgrpo.experiments.comparison import RUN_ROW, CompareSettings, StartingPoint, compare_one

    settings = CompareSettings(task="smollm2-long", output_dir=str(tmp_path))
    assert settings.resume and settings.truncated_as_wrong  # the long task's defaults
    recipe = settings.recipes[0]
    saved = tmp_path / "smollm2_135m_long_grpo" / RUN_ROW
    saved.parent.mkdir(parents=True)
    row = {"run": "GRPO", "per_step": {"pass_rate": {1: 0.5, 2: 0.75}}}
    saved.write_text(json.dumps({"row": row, "history": [{"step": 1}]}))
    begin = StartingPoint("no-such-model", tmp_path / "train.jsonl", tmp_path / "test.jsonl", "chat")
    kept, history = compare_one(recipe, settings, begin)
    assert kept["per_step"]["pass_rate"] == {1: 0.5, 2: 0.75} and history == [{"step": 1}]
    assert not CompareSettings(task="smollm2").resume  # the quick comparison retrains both runs each time


def test_the_ablation_recipes_each_keep_one_half_of_grpo():
    """`make compare ARGS="--task smollm2-long-ablation"`: between the long GRPO and Dr.GRPO recipes, one ablation
    drops only GRPO's std scaling and the other only its 1/|o_i| loss (Dr.GRPO's constant instead); every other
    resolved training argument equals the GRPO recipe's."""
    from drgrpo.experiments.comparison import RECIPES
    from drgrpo.recipe.cli import parse_recipe

    def resolved(recipe):
        _, args, _ = parse_recipe([recipe])
        fields = vars(args).copy()
        for key in ("output_dir", "run_name", "logging_dir"):
            fields.pop(key, None)
        return {k: v for k, v in fields.items() if not k.startswith("_") and k != "distributed_state"}

    grpo, drgrpo = (resolved(r) for r in RECIPES["smollm2-long"])
    no_std, constant_loss = (resolved(r) for r in RECIPES["smollm2-long-ablation"])
    knobs = ("scale_rewards", "loss_type")
    assert [grpo[k] for k in knobs] == ["group", "grpo"] and [drgrpo[k] for k in knobs] == ["none", "dr_grpo"]
    assert [no_std[k] for k in knobs] == ["none", "grpo"]
    assert [constant_loss[k] for k in knobs] == ["group", "dr_grpo"]

    def others(fields):
        return {k: v for k, v in fields.items() if k not in knobs}

    assert others(no_std) == others(grpo) and others(constant_loss) == others(grpo)


def test_two_runs_of_one_algorithm_are_told_apart_by_their_recipe():
    from drgrpo.experiments.comparison import distinct_run_names

    rows = [{"run": "GRPO"}, {"run": "GRPO"}]
    distinct_run_names(rows, ["recipes/a_no_std.yaml", "recipes/a_constant_loss.yaml"])
    assert [r["run"] for r in rows] == ["GRPO (a_no_std)", "GRPO (a_constant_loss)"]
    rows = [{"run": "GRPO"}, {"run": "Dr.GRPO"}]
    distinct_run_names(rows, ["recipes/a.yaml", "recipes/b.yaml"])
    assert [r["run"] for r in rows] == ["GRPO", "Dr.GRPO"]


def test_accuracy_by_length_by_hand():
    samples = [{"num_tokens": n, "correct": c} for n, c in ((12, True), (20, False), (21, True), (25, False),
                                                            (40, False), (90, False), (128, False))]  # fmt: skip
    rows = accuracy_by_length(samples)
    assert [(r["length"], r["answers"], r["right"]) for r in rows] == [
        ("<= 20", 2, 1), ("21-40", 3, 1), ("41-80", 0, 0), ("> 80", 2, 0)
    ]  # fmt: skip
    assert rows[0]["share_right"] == 0.5 and rows[1]["share_right"] == pytest.approx(1 / 3)
    assert math.isnan(rows[2]["share_right"])
