"""The code sandbox's hostile programs through the Python tool's path (tests/tool_sandbox_probe.py): each scores 0, no
observation carries an attack's marker or the trainer's secret, the observation is masked, the sandbox keeps working
after each, and nothing outside was touched. Bounded from outside as the code reward's hostile set is."""

from __future__ import annotations

import os
import sys

import pytest
from conftest import ROOT
from test_code_sandbox_adversarial import SCENARIOS, TIMEOUT, run_probe

PROBE = ROOT / "tests" / "tool_sandbox_probe.py"
# Programs whose marker is ordinary output printed before they fail: it may be in the observation (it is what the
# program printed), never in the answer, whose last line is the failure.
PRINTS_BEFORE_FAILING = {"crash_after_right_output", "fake_sandbox_error", "huge_output"}
FAILS = {"crash_segfault", "crash_after_right_output", "hang_cpu", "hang_sleep", "memory", "huge_output"}


@pytest.fixture(scope="module")
def report() -> dict:
    return run_probe([sys.executable, str(PROBE)], {**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_hostile_program_through_the_tool_scores_zero_and_leaks_nothing(report, scenario):
    entry = report[scenario]
    assert report["mode"] == "namespaces"
    assert entry["score"] == 0.0, entry
    assert not entry["secret_in_observation"], entry
    if scenario not in PRINTS_BEFORE_FAILING:
        assert not entry["marker_in_observation"], entry
    if scenario in FAILS:
        assert entry["status"] in ("error", "timeout"), entry
    assert entry["status"] != "sandbox_error", entry  # a forged sandbox error reads as the program's failure
    assert entry["masked"], entry
    assert entry["elapsed"] < 2 * TIMEOUT + 10.0, entry
    assert entry["tool_works_after"], entry


def test_the_hang_scenarios_read_as_timeouts(report):
    assert report["hang_cpu"]["status"] == report["hang_sleep"]["status"] == "timeout"
    assert "time limit" in report["hang_sleep"]["observation"]


def test_nothing_outside_was_touched(report):
    assert report["listener_accepted"] is False
    assert report["unix_accepted"] is False
    assert report["planted_intact"] is True
