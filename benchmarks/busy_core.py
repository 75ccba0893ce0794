"""How much a busy neighbour slows a command: run it quiet, then beside a busy loop on one core, and print the ratio.

    python benchmarks/busy_core.py [--rounds 1] [--loops 1] -- make demo-tiny
    python benchmarks/busy_core.py -- .venv/bin/python -m pytest -q tests/test_tasks.py
    python benchmarks/busy_core.py --nice 19 -- env DRGRPO_TORCH_THREADS=2 make demo-tiny   # a neighbour that yields

Rounds alternate (quiet, busy, quiet, busy, ...) so that a change in the machine's other load hits both alike; the
ratio uses each side's fastest run (interference only adds time). The goal of the project's CPU commands is a ratio
of at most 1.5 on 2 cores: torch's thread count must follow the free cores (drgrpo/core/threads.py) instead of
running two threads that wait for each other. The load average before each run is printed: on a shared machine the
quiet runs are only as quiet as the machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def busy_loops(count: int, nice: int = 0) -> list[subprocess.Popen]:
    """`count` processes that each keep one core busy (plain Python loops: no threads of their own), at `nice`."""
    return [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"], preexec_fn=(lambda: os.nice(nice)) if nice else None
        )
        for _ in range(count)
    ]


def timed_run(command: list[str], log) -> float:
    """Wall seconds of one run of `command` (its output to `log`); a failing command stops the benchmark."""
    start = time.perf_counter()
    done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed with status {done.returncode}; its output is in {log.name}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1, help="quiet/busy pairs")
    parser.add_argument("--loops", type=int, default=1, help="busy loops beside the command (1: one core of two)")
    parser.add_argument("--nice", type=int, default=0, help="the busy loops' niceness (19: a neighbour that yields)")
    parser.add_argument("--log", default="outputs/busy_core.log", help="the command's output, appended")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = [a for a in args.command if a != "--"] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the command after --, e.g. -- make demo-tiny")
    os.makedirs(os.path.dirname(args.log) or ".", exist_ok=True)
    times: dict[str, list[float]] = {"quiet": [], "busy": []}
    with open(args.log, "a") as log:
        for round_index in range(args.rounds):
            for kind in ("quiet", "busy"):
                loops = busy_loops(args.loops, args.nice) if kind == "busy" else []
                try:
                    time.sleep(1.0 if loops else 0.0)  # the loops are running before the command looks at the load
                    load = os.getloadavg()[0]
                    seconds = timed_run(command, log)
                finally:
                    for loop in loops:
                        loop.kill()
                        loop.wait()
                times[kind].append(seconds)
                print(
                    f"round {round_index + 1}/{args.rounds} {kind:5s}: {seconds:7.1f} s "
                    f"(1-min load before: {load:.2f} on {os.cpu_count()} CPUs)",
                    flush=True,
                )
    quiet, busy = min(times["quiet"]), min(times["busy"])
    print(
        f"busy/quiet ratio: {busy / quiet:.2f} (fastest busy {busy:.1f} s / fastest quiet {quiet:.1f} s; "
        f"{args.loops} busy loop(s) at nice {args.nice}; goal <= 1.5): {' '.join(command)}"
    )


if __name__ == "__main__":
    main()
