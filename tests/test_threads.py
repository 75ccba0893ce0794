"""Torch's thread count from the CPU that other processes use: the rule, the user's override, the measurement."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import namedtuple

import pytest
import torch
from conftest import skip_unless_required

from drgrpo.core import threads


@pytest.mark.parametrize(
    "others, cores, expected",
    [
        (0.0, 2, 2),
        (0.25, 2, 2),
        (0.5, 2, 1),
        (1.0, 2, 1),
        (1.9, 2, 1),
        (3.0, 2, 1),
        (1.2, 8, 7),
        (1.4, 8, 6),
        (0.0, 1, 1),
    ],
)
def test_threads_leave_other_processes_their_cores(others, cores, expected):
    assert threads.threads_for(others, cores) == expected


def test_the_users_count_wins():
    assert threads.fixed_thread_count({"OMP_NUM_THREADS": "1"}) == 1
    assert threads.fixed_thread_count({threads.THREADS_ENV: "3", "OMP_NUM_THREADS": "1"}) == 3
    assert threads.fixed_thread_count({threads.THREADS_ENV: "auto", "OMP_NUM_THREADS": "1"}) is None
    assert threads.fixed_thread_count({}) is None
    with pytest.raises(ValueError, match="DRGRPO_TORCH_THREADS='many'"):
        threads.fixed_thread_count({threads.THREADS_ENV: "many"})


def test_others_busy_cores_subtracts_our_own_time():
    # 2 s of wall time; the machine was busy 3 CPU-seconds, 1 of them ours -> others kept one core busy.
    assert threads.others_busy_cores((0.0, 10.0, 5.0), (2.0, 13.0, 6.0)) == pytest.approx(1.0)
    assert threads.others_busy_cores((0.0, 10.0, 5.0), (2.0, 12.0, 7.0)) == 0.0  # never negative


def test_cpu_sample_counts_our_own_time():
    """psutil's figures: our own CPU time follows our work, and the machine's busy time includes it."""
    start = threads._cpu_sample()
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    end = threads._cpu_sample()
    assert end[2] - start[2] >= 0.2
    assert end[1] - start[1] >= end[2] - start[2] - 0.05  # clock ticks of 10 ms on both sides


def test_governor_sees_a_busy_neighbour(monkeypatch):
    """A real busy loop in another process takes one of our cores away; alone, we get all of them."""
    if threads._cpu_sample() is None:
        skip_unless_required("proc_stat", "no /proc/stat (not Linux): the thread governor keeps torch's default")
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(threads.THREADS_ENV, raising=False)
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        start = threads._cpu_sample()
        time.sleep(1.0)
        others = threads.others_busy_cores(start, threads._cpu_sample())
        assert others >= 0.7  # the loop's core (plus whatever else runs on this machine)
        governor = threads.ThreadGovernor(cores=2, environ={})
        assert governor.update() == 1 and torch.get_num_threads() == 1
    finally:
        loop.kill()
        loop.wait()
        torch.set_num_threads(before)


def test_fixed_count_is_applied(monkeypatch):
    before = torch.get_num_threads()
    try:
        assert threads.ThreadGovernor(cores=2, environ={"OMP_NUM_THREADS": "1"}).update() == 1
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_the_counts_chosen_are_recorded():
    before = torch.get_num_threads()
    try:
        governor = threads.ThreadGovernor(cores=2, environ={"OMP_NUM_THREADS": "1"})
        governor.update()
        governor.update()
        assert governor.used == {1: 2}
    finally:
        torch.set_num_threads(before)


def test_a_niced_neighbour_takes_no_core_from_a_process_that_is_not_niced():
    """Issue 53: a nice-19 neighbour yields to nice 0 (2 threads beside it beat 1 by ~1.5x on a Zen 3), so its time
    is left out of what contends; when we are niced ourselves, our time and theirs are both `nice`: all counts."""
    times = namedtuple("scputimes", "user nice system idle iowait irq softirq steal guest guest_nice")
    machine = times(user=3.0, nice=2.0, system=1.0, idle=10.0, iowait=1.0, irq=0.0, softirq=0.0, steal=0.0,
                    guest=0.0, guest_nice=0.0)  # fmt: skip
    assert threads.contending_seconds(machine, niced=False) == pytest.approx(4.0)
    assert threads.contending_seconds(machine, niced=True) == pytest.approx(6.0)
    # 2 s of wall time on 2 cores in which a niced loop kept one busy and the other idled: for a process at nice 0 it
    # takes no core (2 threads); for a niced one it takes one (1 thread).
    later = machine._replace(nice=machine.nice + 2.0, idle=machine.idle + 2.0)
    for niced, expected in ((False, 2), (True, 1)):
        before = (0.0, threads.contending_seconds(machine, niced), 5.0)
        after = (2.0, threads.contending_seconds(later, niced), 5.0)
        assert threads.threads_for(threads.others_busy_cores(before, after), 2) == expected
