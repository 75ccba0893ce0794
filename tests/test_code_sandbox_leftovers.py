"""The fifth red team (issue 52): nothing a program leaves in the kernel is charged to the next program.

Files kept in flight by a cycle of Unix sockets outlive their program until the kernel's Unix-socket collector runs,
which it does only when some Unix socket is released: 300 MiB of memfds left so stayed charged to the runner's
memory cgroup, and the correct programs after it (other completions', the next step's, the Python tool's next calls)
were OOM-killed. The pipe buffer pages and in-flight descriptors those files count against their uid carried a bit
to every next program of the runner (all had one uid outside): a receiver read 6 bits of 6.

The programs run in tests/code_sandbox_leftovers_probe.py under the outer bounds of the adversarial tests, in every
mode this machine offers (namespaces and the fallback, each with and without the runners' cgroups, as root, and an
unprivileged trainer). Each check below failed on the sandbox before issue 52 (the commit message has the probe's
output) and passes now: the correct programs after the leak crashed with SIGKILL, the runner still held 301-304 MiB,
the receiver read every bit, and three programs in a row had one uid outside. The last tests check the pieces
without a sandbox: when the runner's memory cgroup counts as back, and the job that runs again on a fresh runner
when not.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from test_code_sandbox_adversarial import run_probe_as_user, run_probe_in_mode

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "code_sandbox_leftovers_probe.py"
HELD_MB, NEEDED_MB = 300, 150  # the probe's: what the leak leaves in flight, what each correct program after it writes
MODES = {
    "namespaces": ["namespaces"],
    "namespaces, no cgroup": ["namespaces", "--no-cgroup"],
    "fallback": ["fallback"],
    "fallback, no cgroup": ["fallback", "--no-cgroup"],
}


def check_report(report: dict) -> None:
    """What every mode must show (see the probe for the programs)."""
    # 1. Memory in flight: the leak is refused (no memory cgroup: no memfd) or left behind, and whatever it left,
    # the correct programs after it get their whole limit, directly and through the tool, and the runner does not
    # keep holding it.
    expected = {"status": "ok", "stdout": str(NEEDED_MB), "exit_code": 0}
    assert report["after_leak"] == [expected] * 3, report["after_leak"]
    assert report["tool_after_leak"] == [str(NEEDED_MB)] * 3, report["tool_after_leak"]
    leak = report["leak"]
    if report["memory_cgroup"] is None:
        assert leak["status"] == "crash" and "left" not in leak["stdout"], leak
    else:
        assert leak == {"status": "ok", "stdout": f"left {HELD_MB}", "exit_code": 0}, leak
        assert all(held < HELD_MB // 2 for held in report["held_mb"]), report["held_mb"]
    # 2. Per-uid counters: whatever the sender did, the receiver reads the same (nothing held against its uid), or,
    # where programs cannot have a uid of their own, has no Unix socket to read them with.
    reads = {trial["read"]["stdout"] for trial in report["uid_counters"]}
    assert reads in ({"0 0"}, {"0 refused"}), report["uid_counters"]
    assert all(trial["read"]["status"] == "ok" for trial in report["uid_counters"]), report["uid_counters"]
    if reads == {"0 refused"}:
        assert report["uid"] != 0, "a root trainer's programs have uids of their own: Unix sockets stay allowed"
    # 3. Each program of a root trainer's runner has a uid outside of its own (the runner's pool), never its
    # predecessor's; inside, with namespaces, it is 65534 whichever it got (that tells it nothing).
    uids = report["uids"]
    assert all(len(seen) == 1 for seen in uids["outside"]), uids
    outside = [seen[0] for seen in uids["outside"]]
    if report["uid"] == 0:
        assert len(set(outside[:3])) == 3 and set(outside) <= set(uids["pool"]), uids
        if report["mode"] == "namespaces":  # the pool came round: the same uids, in the user namespaces kept
            assert outside[3:] == outside[:3], uids
    else:  # unprivileged: the kernel lets it map only its own uid (docs/code-rewards.md)
        assert len(uids["pool"]) == 1 and outside == uids["pool"] * 3, uids
    inside = [f"{uid} {uid}" for uid in outside] if report["mode"] == "fallback" else ["65534 65534"] * len(outside)
    assert uids["inside"] == inside, uids


@pytest.fixture(scope="module", params=list(MODES))
def report(request) -> dict:
    mode = MODES[request.param]
    result = run_probe_in_mode(PROBE, mode)
    if "--no-cgroup" in mode:
        assert result["memory_cgroup"] is None
    return result


def test_nothing_a_program_leaves_in_flight_is_charged_to_the_next(report):
    check_report(report)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become a user")
def test_the_same_holds_for_an_unprivileged_trainer(unprivileged_tree):
    result = run_probe_as_user(unprivileged_tree, PROBE.name, "namespaces")
    assert result["mode"] == "namespaces"
    check_report(result)


# -- the pieces, without a sandbox -------------------------------------------------------------------------------


@pytest.mark.parametrize("usage_file", ["memory.usage_in_bytes", "memory.current"])
def test_a_runner_cgroup_is_back_once_only_page_cache_is_left(tmp_path, monkeypatch, usage_file):
    """What `RunnerMemory.drained` reads (a v1 or v2 memory cgroup's files, written here): page cache of files a
    program read does not count (reclaim takes it back); anything else over LEFTOVER_BYTES is waited for, with the
    collector woken and the runner's own reaping meanwhile, until DRAIN_WAIT_S."""
    from rewards.code import _leftovers

    monkeypatch.setattr(_leftovers, "DRAIN_WAIT_S", 0.05)
    usage, stat = tmp_path / usage_file, tmp_path / "memory.stat"
    usage.write_text(f"{2 << 20}\n")
    memory = _leftovers.RunnerMemory(str(tmp_path))
    calls = []
    assert memory.drained(lambda: calls.append(1)) and not calls  # the usual case: one read
    usage.write_text(f"{300 << 20}\n")
    stat.write_text(f"anon {10 << 20}\ninactive_file {200 << 20}\nactive_file {90 << 20}\n")
    assert memory.drained()  # 300 MiB, of which 290 MiB of page cache
    stat.write_text(f"anon {300 << 20}\ninactive_file 0\nactive_file 0\n")
    assert not memory.drained(lambda: calls.append(1)) and calls  # 300 MiB in flight: not back
    os.close(memory.fd)


@pytest.mark.parametrize("again", ["ok", "not back either"])
def test_a_job_whose_memory_did_not_come_back_runs_again_on_a_fresh_runner(monkeypatch, again):
    """A runner that answers `rerun` (it retired before running the job: an earlier program's memory did not come
    back to its memory cgroup) is replaced and the job runs on the new runner, once; a second such answer stands."""
    from rewards.code import _runner
    from rewards.code.sandbox import Sandbox

    class Runner:
        def __init__(self, answer: dict) -> None:
            self.answer, self.killed, self.info = answer, False, {"mode": "namespaces"}

        def run(self, job: dict) -> dict:
            return dict(self.answer)

        def kill(self) -> None:
            self.killed = True

    ok = {"status": "ok", "exit_code": 0, "stdout": b"1\n", "stderr": b"", "wall_s": 0.1, "cpu_s": 0.1}
    first = Runner(_runner.memory_not_back())
    fresh = Runner(ok if again == "ok" else _runner.memory_not_back())
    with Sandbox(1) as sandbox:
        sandbox.runners.append(first)
        sandbox._idle.put(first)
        monkeypatch.setattr(sandbox, "_start_runner", lambda: sandbox.runners.append(fresh) or fresh)
        result = sandbox.run("print(1)")
        assert first.killed and sandbox.runners == [fresh]
        assert result.status == ("ok" if again == "ok" else "sandbox_error"), result
