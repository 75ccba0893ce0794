"""Hostile programs in the code sandbox: each scores 0 within its time limit, leaves no process and no file behind,
cannot read a secret planted in the trainer's environment, cannot reach a listener on 127.0.0.1, cannot delete a
world-writable file outside its folder nor signal its way out; and the sandbox keeps working after each.

The programs run in a separate process (tests/code_sandbox_probe.py) under outer bounds: `prlimit` caps processes
and address space, the run has a timeout and its whole process group is killed afterwards. The programs bound
themselves too (300 forks, 2 GB, 8 MB of output, loops that end within 30 s), so even a broken sandbox could not
exhaust this machine nor leave a spinning process (the `setsid` ones escape the outer process-group kill).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import skip_unless_required

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "code_sandbox_probe.py"
TIMEOUT = 2.0  # the probe's code_timeout
OUTER_LIMITS = ["timeout", "-s", "KILL", "300", "prlimit", "--nproc=4096", f"--as={16 << 30}", "--cpu=120", "--"]
SCENARIOS = [
    "crash_segfault",
    "crash_after_right_output",
    "hang_cpu",
    "hang_sleep",
    "orphan",
    "fork_flood",
    "memory",
    "huge_output",
    "delete_outside",
    "signal_parent",
    "network",
    "secret_env",
    "fake_sandbox_error",
    "deep_tree",
    "sysv_shm",
    "cripple_runner",
    "unix_socket",
    "read_repository",
]
EXPECTED_COUNTER = {
    "crash_segfault": "crashes",
    "crash_after_right_output": "crashes",
    "hang_cpu": "timeouts",
    "hang_sleep": "timeouts",
    "memory": "crashes",
    "huge_output": "crashes",
    "fake_sandbox_error": "crashes",
}


def run_probe(command: list[str], env: dict | None = None) -> dict:
    """Run the probe under the outer bounds; its JSON report. Skips only where the kernel refuses namespaces (the
    probe reports NamespacesUnavailable as "unavailable"; any other failure of the sandbox fails the test)."""
    if shutil.which("prlimit") is None:
        skip_unless_required("prlimit", "util-linux prlimit is needed to bound the hostile programs from outside")
    process = subprocess.Popen(
        OUTER_LIMITS + command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=env
    )
    try:
        stdout, stderr = process.communicate(timeout=240)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:  # the probe's group already ended: nothing left to bound
            pass
        process.wait()
    assert process.returncode == 0, stderr.decode()[-3000:]
    report = json.loads(stdout.decode().strip().splitlines()[-1])
    if "unavailable" in report:
        skip_unless_required("namespaces", f"no user/network namespaces on this kernel: {report['unavailable']}")
    return report


def run_probe_in_mode(probe: Path, mode: list[str]) -> dict:
    """`probe` run by this process in `mode` (`namespaces` or `fallback`, then maybe `--no-cgroup`); the fallback's
    needs (a root trainer, a system Python any uid can run) skipped where missing, or failed where required."""
    if mode[0] == "fallback":
        if os.geteuid() != 0:
            skip_unless_required("root", "the fallback is for root trainers only")
        if not os.access("/usr/bin/python3", os.X_OK):
            skip_unless_required("system_python", "the fallback needs a system Python that any uid can run")
    result = run_probe([sys.executable, str(probe), *mode], {**os.environ, "PYTHONPATH": str(ROOT)})
    assert result["mode"] == mode[0]
    return result


def run_probe_as_user(tree: Path, probe_name: str, *args: str) -> dict:
    """A probe of `tree` (the `unprivileged_tree` fixture) run by uid 1000 with the system Python: a trainer that is
    not root. The caller skips where setpriv or root is missing."""
    python = "/usr/bin/python3"
    if not os.path.exists(python) or subprocess.run([python, "-c", "import dataclasses"]).returncode:
        skip_unless_required("system_python", "no system Python that an unprivileged user can run")
    user = ["setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", "--inh-caps=-all"]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": str(tree)}
    return run_probe([*user, python, str(tree / "tests" / probe_name), *args], env)


@pytest.fixture(scope="module")
def report() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return run_probe([sys.executable, str(PROBE)], env)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_hostile_program_scores_zero_in_bounded_time_and_leaves_nothing(report, scenario):
    entry = report[scenario]
    assert report["mode"] == "namespaces"
    assert entry["score"] == 0.0, entry
    assert entry["elapsed"] < TIMEOUT + 10.0  # killed at its limit (+ start-up and clean-up), not left running
    if scenario in EXPECTED_COUNTER:
        assert entry["counters"][EXPECTED_COUNTER[scenario]] == 1, entry
    assert entry["counters"]["sandbox_errors"] == 0
    if entry["processes"] != "unchecked":  # root: the probe can look into the runner's namespaces
        assert entry["processes"] == [], entry
        assert entry["files"] == [], entry
    assert entry["sandbox_works_after"]


def test_nothing_outside_was_touched_and_nothing_outlives_the_sandbox(report):
    assert report["listener_accepted"] is False  # no program reached 127.0.0.1 of the host
    assert report["planted_intact"] is True  # the world-writable file outside survived
    assert report["dropped_outside"] is False
    assert report["runners_left"] == []
    assert report["namespace_members_left"] == []
    assert report["shm_segments_left"] == []  # the SysV segment died with its program's IPC namespace
    # The trainer listened on Unix sockets (mode 0777) in the host's /var/tmp, /dev/shm, /tmp, /run/lock: those
    # folders are not in the programs' root, so no program could name, hence connect to, any of them.
    assert report["unix_listeners"] >= 2
    assert report["unix_accepted"] is False


def test_a_deep_tree_is_deleted_without_recursion_in_the_fallback_too():
    """Without namespaces (root trainer, fallback allowed) the work folder is deleted by `remove_tree`, not by
    shutil.rmtree (RecursionError on 1500 nested folders); the sandbox keeps working and leaves no folder."""
    if os.geteuid() != 0:
        skip_unless_required("root", "the fallback is for root trainers")
    if not os.access("/usr/bin/python3", os.X_OK):
        skip_unless_required("system_python", "the fallback needs a system Python that any uid can run")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = run_probe([sys.executable, str(PROBE), "--fallback", "deep_tree"], env)
    assert result["mode"] == "fallback"
    entry = result["deep_tree"]
    assert entry["score"] == 0.0 and entry["counters"]["sandbox_errors"] == 0, entry
    assert entry["sandbox_works_after"]
    assert result["fallback_dir_left"] is False


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become a user")
def test_the_same_holds_for_an_unprivileged_trainer(unprivileged_tree):
    """The other set-up path: a trainer that is not root maps itself to uid 65534 in its own user namespace."""
    result = run_probe_as_user(unprivileged_tree, "code_sandbox_probe.py")
    assert result["mode"] == "namespaces"
    for scenario in SCENARIOS:
        assert result[scenario]["score"] == 0.0, (scenario, result[scenario])
        assert result[scenario]["sandbox_works_after"], scenario
    assert result["listener_accepted"] is False
    assert result["unix_accepted"] is False
    assert result["planted_intact"] is True
    assert result["runners_left"] == []
    assert result["shm_segments_left"] == []
