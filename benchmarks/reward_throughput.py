"""Reward throughput: a plain sequential math-verify loop vs this library's `accuracy`, on the same completions.

    python benchmarks/reward_throughput.py [--problems 250] [--group-size 8] [--workers N]
    python benchmarks/reward_throughput.py --compare-with /path/to/old/checkout [--rounds 3]

Generates realistic completions (chain-of-thought text with inline math, a final `\\boxed{}` answer that is right in
an equivalent form or wrong; integers, fractions, decimals, roots, pi, negatives, expressions), G per problem as in
GRPO. Baseline: `verify(parse(gold), parse(completion))` per row, how most recipe repos call math-verify. Ours: the
`accuracy` reward (answer extraction, gold parsed once per group, verdict cache, plain-number fast path, verifier
processes). Prints completions/s of both, their ratio, and asserts identical verdicts. Target: >= 1.7x on 2 cores.
The verifier processes are started before timing (a once-per-run cost, like the trainer's); caches start empty.

`--compare-with DIR` measures this checkout's reward against another checkout's (e.g. before a change) in one run:
`--rounds` rounds, each timing both in fresh processes, in alternating order (before/after, then after/before, ...),
so that both see the same machine load; prints each round's completions/s and the after/before ratio, and the
median ratio. Timings on a shared machine are noisy: read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from math_verify import parse, verify

from rewards import RewardArguments, get_reward_funcs
from rewards.pool import default_num_workers, get_pool

FILLER = [
    "Let me think about this step by step.",
    "First, we rewrite the equation as $x^2 - {a}x + {b} = 0$.",
    "We know that ${a} + {b} = {c}$, so the sum is {c}.",
    "Multiplying both sides by {a} gives ${a}y = {c}$.",
    "Wait, that is not right; let me recompute: ${b} \\cdot {a} = {d}$.",
    "By the Pythagorean theorem, $c^2 = {a}^2 + {b}^2$.",
    "The probability is the number of favourable outcomes over the total, {a} out of {c}.",
    "Substituting $x = {a}$ into the expression, we get ${d}$.",
    "So far we have used {b} of the {c} items.",
    "Checking the boundary case $n = {a}$ confirms the pattern.",
]


def make_problem(rng: random.Random) -> tuple[str, list[str], list[str]]:
    """A gold answer, answers equal to it (in other forms), and wrong answers."""
    kind = rng.choice(["int", "int", "frac", "decimal", "sqrt", "pi", "neg", "expr"])
    a, b = rng.randint(2, 40), rng.randint(2, 40)
    if kind == "int":
        n = rng.randint(1, 5000)
        return str(n), [str(n), f"{n}.0"], [str(n + rng.randint(1, 9)), str(n * 2)]
    if kind == "frac":
        p, q = rng.randint(1, 30), rng.randint(31, 60)
        import math

        g = math.gcd(p, q)
        p, q = p // g, q // g
        return (
            f"\\frac{{{p}}}{{{q}}}",
            [f"\\frac{{{p}}}{{{q}}}", f"{p}/{q}", f"\\dfrac{{{2 * p}}}{{{2 * q}}}"],
            [
                f"\\frac{{{q}}}{{{p}}}",
                f"\\frac{{{p + 1}}}{{{q}}}",
            ],
        )
    if kind == "decimal":
        q = rng.choice([2, 4, 5, 8, 10, 20, 25])
        p = rng.randint(1, q * 3)
        value = p / q
        return f"\\frac{{{p}}}{{{q}}}", [f"{value:g}", f"\\frac{{{p}}}{{{q}}}"], [f"{value + 0.5:g}"]
    if kind == "sqrt":
        k, m = rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7])
        return f"{k}\\sqrt{{{m}}}", [f"{k}\\sqrt{{{m}}}", f"\\sqrt{{{k * k * m}}}"], [f"{k + 1}\\sqrt{{{m}}}"]
    if kind == "pi":
        k = rng.randint(2, 30)
        return f"{k}\\pi", [f"{k}\\pi", f"\\pi \\cdot {k}"], [f"{k + 2}\\pi", f"{k}"]
    if kind == "neg":
        n = -rng.randint(1, 500)
        return str(n), [str(n)], [str(-n), str(n - 1)]
    return f"{a}x + {b}", [f"{a}x + {b}", f"{b} + {a}x"], [f"{a}x - {b}", f"{b}x + {a}"]


def make_completion(rng: random.Random, answer: str) -> str:
    sentences = []
    for _ in range(rng.randint(3, 25)):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        sentences.append(rng.choice(FILLER).format(a=a, b=b, c=a + b, d=a * b))
    closing = rng.choice(["Therefore, the answer is ${}$.", "So the final answer is ${}$.", "Hence we get ${}$."])
    return " ".join(sentences) + " " + closing.format(f"\\boxed{{{answer}}}")


def make_dataset(problems: int, group_size: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    completions, golds = [], []
    for _ in range(problems):
        gold, right, wrong = make_problem(rng)
        solution = f"Working through the problem carefully gives $\\boxed{{{gold}}}$."  # a MATH-style solution
        for _ in range(group_size):
            answer = rng.choice(right) if rng.random() < 0.5 else rng.choice(wrong)
            completions.append(make_completion(rng, answer))
            golds.append(solution)
    return completions, golds


def baseline(completions: list[str], golds: list[str]) -> list[bool]:
    """The loop most recipe repos run: parse both, verify, one completion at a time."""
    return [bool(verify(parse(gold), parse(completion))) for completion, gold in zip(completions, golds, strict=True)]


def measure_in(checkout: Path, args: argparse.Namespace, workers: int) -> dict:
    """One timing of the accuracy reward of `checkout` (first on the path), in a fresh process."""
    command = [sys.executable, __file__, "--json", "--problems", str(args.problems), "--group-size"]
    command += [str(args.group_size), "--workers", str(workers)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(args: argparse.Namespace, workers: int) -> None:
    """Before (`--compare-with`) and after (this checkout), interleaved, `--rounds` times."""
    before, after = Path(args.compare_with).resolve(), Path(__file__).resolve().parents[1]
    ratios, cpu_ratios = [], []
    for round_index in range(args.rounds):
        order = [("before", before), ("after", after)]
        if round_index % 2:
            order.reverse()
        timings = {name: measure_in(path, args, workers) for name, path in order}
        speed = {name: t["completions"] / t["ours_s"] for name, t in timings.items()}
        ratios.append(speed["after"] / speed["before"])
        cpu_ratios.append(timings["before"]["ours_cpu_s"] / timings["after"]["ours_cpu_s"])
        print(
            f"round {round_index + 1} ({order[0][0]} first): before {speed['before']:7.1f}/s  after "
            f"{speed['after']:7.1f}/s  after/before {ratios[-1]:.3f}  (math-verify loop: "
            f"{timings['before']['completions'] / timings['before']['baseline_s']:.1f}/s, "
            f"{timings['after']['completions'] / timings['after']['baseline_s']:.1f}/s; verdicts as math-verify's: "
            f"{timings['before']['same']}, {timings['after']['same']})"
        )
    print(f"median after/before throughput: {statistics.median(ratios):.3f} over {len(ratios)} rounds")
    if workers == 0:  # everything ran in the timed process: its CPU time is the grading's whole cost
        print(f"median after/before throughput in CPU time: {statistics.median(cpu_ratios):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=250)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=None, help="verifier processes (default: per CPU core)")
    parser.add_argument("--compare-with", default=None, help="another checkout to time against, interleaved")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --compare-with")
    parser.add_argument("--json", action="store_true", help="print one JSON line of timings (used by --compare-with)")
    args = parser.parse_args()
    workers = default_num_workers() if args.workers is None else args.workers
    if args.compare_with:
        compare(args, workers)
        return

    completions, golds = make_dataset(args.problems, args.group_size)
    if args.json:
        if workers > 0:
            get_pool(workers, 2048).map("ping", [(i,) for i in range(workers * 2)], timeout=60)
        (reward,) = get_reward_funcs(["accuracy"], RewardArguments(reward_num_workers=workers))
        if workers == 0:  # math-verify's import and first parse, which the pool's workers pay before timing too
            from rewards.equivalence import verify_answer

            verify_answer("\\frac{1}{2}", "0.5")
        start, cpu = time.perf_counter(), time.process_time()
        ours = reward(completions=completions, answer=golds)
        ours_s, ours_cpu_s = time.perf_counter() - start, time.process_time() - cpu
        start = time.perf_counter()
        reference = baseline(completions, golds)
        baseline_s = time.perf_counter() - start
        same = [float(r) for r in reference] == ours
        timings = {"completions": len(completions), "ours_s": ours_s, "ours_cpu_s": ours_cpu_s}
        print(json.dumps({**timings, "baseline_s": baseline_s, "same": same}))
        return
    print(
        f"{len(completions)} completions ({args.problems} problems x {args.group_size}), "
        f"{sum(map(len, completions)) / len(completions):.0f} characters on average; "
        f"{os.cpu_count()} CPUs, {workers} verifier processes"
    )

    if workers > 0:
        get_pool(workers, 2048).map("ping", [(i,) for i in range(workers * 2)], timeout=60)  # start-up, not timed
    (reward,) = get_reward_funcs(["accuracy"], RewardArguments(reward_num_workers=workers))
    start = time.perf_counter()
    ours = reward(completions=completions, answer=golds)
    ours_s = time.perf_counter() - start

    start = time.perf_counter()
    reference = baseline(completions, golds)
    baseline_s = time.perf_counter() - start

    same = [float(r) for r in reference] == ours
    print(
        f"baseline (sequential parse + verify): {len(completions) / baseline_s:8.1f} completions/s ({baseline_s:.2f} s)"
    )
    print(f"ours (accuracy reward):               {len(completions) / ours_s:8.1f} completions/s ({ours_s:.2f} s)")
    print(
        f"ratio: {baseline_s / ours_s:.2f}x   identical verdicts: {same}   correct: {sum(reference)}/{len(reference)}"
    )
    if not same:
        diffs = [i for i, (r, o) in enumerate(zip(reference, ours, strict=True)) if float(r) != o]
        for i in diffs[:10]:
            print(
                f"  differs at {i}: gold={golds[i]!r} baseline={reference[i]} ours={ours[i]} {completions[i][-60:]!r}"
            )
    assert same, f"{len(diffs)} verdicts differ"


if __name__ == "__main__":
    main()
