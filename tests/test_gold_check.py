"""The start-up gold-answer check runs once: cached by data fingerprint + grader version, main process only."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys

import pytest
from conftest import ROOT

from drgrpo.data.gold_check import fingerprint, grader_version, unparseable_indices_once, unusable_golds

ANSWERS = ["1", "?", "1", "2", "?", "x+"]


class CountingCheck:
    """A gold check that rejects `bad` answers and counts the answers it was asked about."""

    def __init__(self, bad=("?", "x+"), version: str | None = "test-grader-1"):
        self.bad = set(bad)
        self.version = version
        self.graded: list[str] = []

    def __call__(self, golds: list[str]) -> list[bool]:
        self.graded += golds
        return [g not in self.bad for g in golds]


def test_second_check_of_the_same_answers_is_a_cache_hit(tmp_path):
    first = CountingCheck()
    assert unparseable_indices_once(ANSWERS, first, tmp_path) == [1, 4, 5]
    assert first.graded == ["1", "?", "2", "x+"]  # each distinct answer once
    assert len(list(tmp_path.glob("*.json"))) == 1

    restarted = CountingCheck()
    assert unparseable_indices_once(ANSWERS, restarted, tmp_path) == [1, 4, 5]
    assert restarted.graded == []


def test_other_answers_or_another_grader_version_grade_again(tmp_path):
    unparseable_indices_once(ANSWERS, CountingCheck(), tmp_path)
    other_data = CountingCheck()
    assert unparseable_indices_once([*ANSWERS, "3"], other_data, tmp_path) == [1, 4, 5]
    assert other_data.graded == ["1", "?", "2", "x+", "3"]
    new_grader = CountingCheck(bad={"?"}, version="test-grader-2")
    assert unparseable_indices_once(ANSWERS, new_grader, tmp_path) == [1, 4]
    assert len(new_grader.graded) == 4


def test_a_damaged_cache_file_is_graded_again_and_rewritten(tmp_path):
    unparseable_indices_once(ANSWERS, CountingCheck(), tmp_path)
    (cache,) = tmp_path.glob("*.json")
    cache.write_text('{"version": "test-grader-1", "unusa')
    again = CountingCheck()
    assert unparseable_indices_once(ANSWERS, again, tmp_path) == [1, 4, 5]
    assert len(again.graded) == 4
    assert json.loads(cache.read_text())["unusable"] == ["?", "x+"]


def test_a_check_without_version_is_never_cached(tmp_path):
    check = CountingCheck(version=None)
    unusable_golds(["1", "?"], check, tmp_path)
    unusable_golds(["1", "?"], check, tmp_path)
    assert check.graded == ["1", "?", "1", "?"] and not list(tmp_path.iterdir())


def test_fingerprint_depends_on_answers_their_order_and_the_version():
    base = fingerprint(["1", "2"], "v1")
    assert base == fingerprint(["1", "2"], "v1")
    assert len({base, fingerprint(["2", "1"], "v1"), fingerprint(["1", "2"], "v2"), fingerprint(["1"], "v1")}) == 4


def test_grader_version_names_probe_settings_and_packages():
    version = grader_version("\\boxed{?}", {"timeout": 5.0})
    assert '"probe": "\\\\boxed{?}"' in version and '"timeout": 5.0' in version and "math-verify" in version
    assert version != grader_version("\\boxed{?}", {"timeout": 1.0})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


RANK_SCRIPT = """
import json, os, sys
from accelerate import PartialState
from drgrpo.data.gold_check import unparseable_indices_once

graded = []
def check(golds):
    graded.extend(golds)
    return [g != "?" for g in golds]
check.version = "rank-test"
result = unparseable_indices_once(["1", "?", "2", "?"], check, sys.argv[1])  # no process group exists yet
state = PartialState()
out = os.path.join(sys.argv[1], f"rank{state.process_index}.out")
with open(out, "w") as f:
    json.dump({"result": result, "graded": graded, "processes": state.num_processes}, f)
# A training run keeps its process group; this script ends here, so it tears the group down before exiting (a gloo
# group left to interpreter shutdown can abort a rank: "terminate called without an active exception").
state.wait_for_everyone()
state.destroy_process_group()
"""


@pytest.mark.slow
def test_two_processes_grade_on_the_main_process_only(tmp_path):
    script = tmp_path / "rank_check.py"
    script.write_text(RANK_SCRIPT)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
        str(script), str(tmp_path),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{i}.out").read_text()) for i in range(2)]
    assert [r["processes"] for r in ranks] == [2, 2]
    assert ranks[0]["result"] == ranks[1]["result"] == [1, 3]
    assert ranks[0]["graded"] == ["1", "?", "2"] and ranks[1]["graded"] == []


# ----------------------------------------------------------------------------------------------------------------------
# Through the data pipeline, with the accuracy reward's own grader
# ----------------------------------------------------------------------------------------------------------------------
ROWS = [
    {"problem": "What is $1+1$?", "solution": "It is $\\boxed{2}$."},
    {"problem": "Halve $1$.", "solution": "$\\boxed{\\frac{1}{2}}$"},
    {"problem": "Again $1+1$?", "solution": "Still $\\boxed{2}$."},
    {"problem": "Is it odd?", "solution": "no box here"},
]


@pytest.fixture
def counted_grading(monkeypatch, tmp_path):
    """The real grader, with the gold answers it is asked about recorded; the HF datasets cache under tmp_path."""
    import datasets

    import rewards.grading

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    asked: list[str] = []
    real = rewards.grading.grade_batch

    def counting(completions, golds, grader=None):
        asked.extend(golds)
        return real(completions, golds, grader)

    monkeypatch.setattr(rewards.grading, "grade_batch", counting)
    return asked


def test_a_restarted_run_reads_the_gold_check_from_the_cache(counted_grading, tmp_path, caplog):
    from drgrpo.data import DataArguments, load_prompt_dataset

    path = tmp_path / "math.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    data = DataArguments(
        dataset_path=str(path),
        prompt_column="problem",
        answer_column="solution",
        answer_extraction="boxed",
        prompt_template="plain",
        drop_unparseable_answers=True,
    )
    first, _ = load_prompt_dataset(data, seed=1)
    assert sorted(counted_grading) == sorted(["2", "\\frac{1}{2}", ""])  # each distinct answer once
    assert len(list((tmp_path / "hf-datasets" / "drgrpo_gold_check").glob("*.json"))) == 1

    counted_grading.clear()
    with caplog.at_level(logging.INFO, logger="drgrpo.data.gold_check"):
        second, _ = load_prompt_dataset(data, seed=1)
    assert counted_grading == []  # no grading at all
    assert "cached result for these 3 answers" in caplog.text
    assert second.to_dict() == first.to_dict() and sorted(first["answer"]) == ["2", "2", "\\frac{1}{2}"]

    data.reward_timeout = 1.0  # a grader setting that can change a verdict: checked again
    load_prompt_dataset(data, seed=1)
    assert len(counted_grading) == 3
