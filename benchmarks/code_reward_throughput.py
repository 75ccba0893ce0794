"""Code reward throughput: a plain `subprocess.run` loop vs this library's sandbox, on the shipped task set.

    python benchmarks/code_reward_throughput.py [--rounds 2] [--workers N] [--timeout 5]

The programs are the task set's reference and wrong solutions, each run on each of its problem's test cases
(32 problems x 6 tests x 2 solutions = 384 runs per round). Baseline: what recipe repos without a sandbox service
do (verl's local `prime_code`, open-r1's local fallback): one `subprocess.run` per test, in a fresh temporary folder,
with the same rlimits (CPU, address space, processes, open files, file size) applied in `preexec_fn`, a cleaned
environment and the same interpreter and flags; no namespaces, no uid drop. Ours: `Sandbox.run_many` with
`--workers` runners (namespaces, uid 65534, the same limits). Both verdicts go through the same comparison, and
the script asserts they agree. Prints programs/s of both and their ratio; the runners start before timing (a
once-per-run cost, like the trainer's).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="Passes over the task set (both measured, interleaved).")
    parser.add_argument("--workers", type=int, default=default_num_workers(), help="Sandbox runners.")
    parser.add_argument("--timeout", type=float, default=5.0, help="Seconds per test (code_timeout).")
    args = parser.parse_args()
    jobs = jobs_of_task_set()
    limits = SandboxLimits(timeout=args.timeout)
    python, _ = default_program_python()
    with Sandbox(args.workers, limits) as sandbox:
        sandbox.start()
        plain_s = ours_s = 0.0
        for _ in range(args.rounds):
            start = time.perf_counter()
            plain = plain_loop(jobs, limits, python)
            plain_s += time.perf_counter() - start
            start = time.perf_counter()
            results = sandbox.run_many([(program, stdin) for program, stdin, _, _ in jobs])
            ours_s += time.perf_counter() - start
            ours = [verdict(job[2], r.status, r.text, job[3]) for job, r in zip(jobs, results, strict=True)]
            mismatched = [i for i, (a, b) in enumerate(zip(plain, ours, strict=True)) if a != b]
            assert not mismatched, f"verdicts differ on {len(mismatched)} runs, e.g. job {mismatched[0]}"
    runs = len(jobs) * args.rounds
    print(f"{len(jobs)} runs per round ({sum(plain)} pass), {args.rounds} rounds, sandbox workers: {args.workers}")
    print(f"plain subprocess.run loop: {runs / plain_s:7.1f} programs/s")
    print(f"sandbox (run_many):        {runs / ours_s:7.1f} programs/s")
    print(f"ratio: {plain_s / ours_s:.2f}x (identical verdicts)")


if __name__ == "__main__":
    main()
