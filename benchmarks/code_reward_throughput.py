"""Code reward throughput: a plain `subprocess.run` loop vs this library's sandbox, on the shipped task set.

    python benchmarks/code_reward_throughput.py [--rounds 2] [--workers N] [--timeout 5] [--against DIR]

The programs are the task set's reference and wrong solutions, each run on each of its problem's test cases
(32 problems x 6 tests x 2 solutions = 384 runs per round). Baseline: what recipe repos without a sandbox service
do (verl's local `prime_code`, open-r1's local fallback): one `subprocess.run` per test, in a fresh temporary folder,
with the same rlimits (CPU, address space, processes, open files, file size) applied in `preexec_fn`, a cleaned
environment and the same interpreter and flags; no namespaces, no uid drop. Ours: `Sandbox.run_many` with
`--workers` runners (namespaces, uid 65534, the same limits). Both verdicts go through the same comparison, and
the script asserts they agree. Prints programs/s of both and their ratio; the runners start before timing (a
once-per-run cost, like the trainer's).

`--against DIR` also times another version of the sandbox, side by side in the same rounds (order alternating):
DIR holds its `rewards` and `drgrpo` packages, e.g. `mkdir /tmp/main && git archive main rewards drgrpo | tar -x
-C /tmp/main`. Each round runs it in a subprocess (its runners start before its timing too); verdicts must agree.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from rewards.code.compare import call_matches, outputs_match
from rewards.code.sandbox import Sandbox, SandboxLimits, default_program_python
from rewards.code.taskset import load_task_set
from rewards.code.testcases import call_harness, call_result, parse_tests
from rewards.pool import default_num_workers


def jobs_of_task_set() -> list[tuple[str, str, object, str | None]]:
    """(program, stdin, test, marker) for every solution x test of the shipped set."""
    jobs = []
    for row in load_task_set():
        for solution in (row["reference"], row["wrong"]):
            for test in parse_tests(row["verification_info"]):
                if test.fn_name:
                    program, stdin, marker = call_harness(solution, test)
                else:
                    program, stdin, marker = solution, test.input, None
                jobs.append((program, stdin, test, marker))
    return jobs


def verdict(test, status: str, stdout: str, marker: str | None) -> bool:
    if status != "ok":
        return False
    if test.fn_name:
        found, value = call_result(stdout, marker)
        return found and call_matches(value, test.output)
    return outputs_match(stdout, test.output)


def plain_loop(jobs: list, limits: SandboxLimits, python: str) -> list[bool]:
    """The baseline: one `subprocess.run` per job under the same rlimits."""
    runner_limits = limits.for_runner()
    memory = limits.memory_mb << 20

    def set_limits() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (runner_limits["cpu_seconds"],) * 2)
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_processes,) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.max_open_files,) * 2)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_bytes,) * 2)

    verdicts = []
    for program, stdin, test, marker in jobs:
        with tempfile.TemporaryDirectory() as folder:
            with open(f"{folder}/main.py", "w") as f:
                f.write(program)
            env = {"PATH": "/usr/bin:/bin", "HOME": folder, "LANG": "C.UTF-8"}
            try:
                done = subprocess.run(
                    [python, "-I", "-S", "main.py"],
                    input=stdin.encode(),
                    capture_output=True,
                    cwd=folder,
                    env=env,
                    timeout=limits.timeout,
                    preexec_fn=set_limits,
                    start_new_session=True,
                )
                status = "ok" if done.returncode == 0 else "crash"
                stdout = done.stdout[: limits.max_output_bytes].decode(errors="replace")
            except subprocess.TimeoutExpired:
                status, stdout = "timeout", ""
        verdicts.append(verdict(test, status, stdout, marker))
    return verdicts


def sandbox_pass(sandbox: Sandbox, jobs: list) -> tuple[float, list[bool]]:
    """Seconds for one `run_many` over every job, and its verdicts."""
    start = time.perf_counter()
    results = sandbox.run_many([(program, stdin) for program, stdin, _, _ in jobs])
    seconds = time.perf_counter() - start
    return seconds, [verdict(job[2], r.status, r.text, job[3]) for job, r in zip(jobs, results, strict=True)]


def other_version_pass(folder: str, workers: int, timeout: float) -> tuple[float, list[bool]]:
    """`sandbox_pass` with the sandbox of the `rewards` package in `folder`, in a subprocess."""
    command = [sys.executable, __file__, "--one-pass", "--workers", str(workers), "--timeout", str(timeout)]
    env = {**os.environ, "PYTHONPATH": os.path.abspath(folder)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=folder, check=True)
    seconds, verdicts = json.loads(done.stdout.strip().splitlines()[-1])
    return seconds, verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="Passes over the task set (both measured, interleaved).")
    parser.add_argument("--workers", type=int, default=default_num_workers(), help="Sandbox runners.")
    parser.add_argument("--timeout", type=float, default=5.0, help="Seconds per test (code_timeout).")
    parser.add_argument("--against", default=None, help="Folder with another version's rewards/ to time too.")
    parser.add_argument("--one-pass", action="store_true", help=argparse.SUPPRESS)  # --against's subprocess
    args = parser.parse_args()
    jobs = jobs_of_task_set()
    limits = SandboxLimits(timeout=args.timeout)
    python, _ = default_program_python()
    with Sandbox(args.workers, limits) as sandbox:
        sandbox.start()
        if args.one_pass:
            print(json.dumps(sandbox_pass(sandbox, jobs)))
            return
        plain_s = ours_s = other_s = 0.0
        for round_index in range(args.rounds):
            start = time.perf_counter()
            plain = plain_loop(jobs, limits, python)
            plain_s += time.perf_counter() - start
            passes = ["ours", "other"] if args.against else ["ours"]
            for name in passes if round_index % 2 == 0 else passes[::-1]:
                if name == "ours":
                    seconds, ours = sandbox_pass(sandbox, jobs)
                    ours_s += seconds
                else:
                    seconds, other = other_version_pass(args.against, args.workers, args.timeout)
                    other_s += seconds
                    assert other == plain, "the other version's verdicts differ from the plain loop's"
            mismatched = [i for i, (a, b) in enumerate(zip(plain, ours, strict=True)) if a != b]
            assert not mismatched, f"verdicts differ on {len(mismatched)} runs, e.g. job {mismatched[0]}"
    runs = len(jobs) * args.rounds
    print(f"{len(jobs)} runs per round ({sum(plain)} pass), {args.rounds} rounds, sandbox workers: {args.workers}")
    print(f"plain subprocess.run loop: {runs / plain_s:7.1f} programs/s")
    print(f"sandbox (run_many):        {runs / ours_s:7.1f} programs/s")
    print(f"ratio: {plain_s / ours_s:.2f}x (identical verdicts)")
    if args.against:
        print(f"sandbox of {args.against}: {runs / other_s:7.1f} programs/s (identical verdicts)")
        print(f"this sandbox / that one: {other_s / ours_s:.3f} of its programs/s")


if __name__ == "__main__":
    main()
