"""The Python tool's costs, as ratios measured side by side in one run (docs/tools.md):

1. sandbox throughput: trivial programs per second through `PythonTool.run_many` with every program of a turn in one
   batch, against the same programs one call at a time (TRL's own tool loop runs tools one sample at a time); the
   passes are interleaved, the best of each kind kept. Goal: batched >= 1.8x.
2. the loop's own overhead in a SmolLM2-135M-Instruct tool turn: `run_tool_loop` on the evaluator's transformers
   backend with the real sandbox (the demo's one-shot prompt, a batch of products, call budget 1), its wall time
   split into the model's generation, the sandbox's runs and the rest: the loop's own work (the fence stop's scan
   inside generation, cutting, observation tokens, bookkeeping). Goal: at most 2% of the turn.
3. what the network namespace each program gets (issue 34) costs: a child process that unshares an IPC namespace,
   against one that unshares IPC and network namespaces (as the sandbox's program process does), interleaved, inside
   a user namespace; the difference per program, and what it comes to in the SmolLM2 turn above (its programs, run
   `--workers` at a time, as a share of the turn). It is part of the sandbox's time, not of the loop's own.

    python benchmarks/tool_overhead.py [--programs 64] [--rounds 3] [--workers 2] [--rows 16] [--skip_model]
                                       [--against DIR]

`--against DIR` also measures (1) with another version's sandbox, side by side: DIR holds its `rewards` and `drgrpo`
packages (e.g. `git worktree add /tmp/before main`); each round runs one pass of each version, in subprocesses of
their own (runners started and warm before timing), in alternating order, and the best pass of each is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from drgrpo.algorithm.rollout.arguments import ToolArguments
from drgrpo.algorithm.rollout.python_tool import build_python_tool

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "smollm2_135m_drgrpo_tools.yaml"


def sandbox_ratio(tool, programs: int, rounds: int) -> dict:
    """Programs per second, batched vs one at a time, interleaved; the best pass of each."""
    jobs = [f"print({i} * {i + 1})" for i in range(programs)]
    tool.run_many(jobs[:2])  # runners started and warm
    best = {"batched": float("inf"), "one_at_a_time": float("inf")}
    for _ in range(rounds):
        start = time.perf_counter()
        batched = tool.run_many(jobs)
        best["batched"] = min(best["batched"], time.perf_counter() - start)
        start = time.perf_counter()
        single = [tool.run_many([job])[0] for job in jobs]
        best["one_at_a_time"] = min(best["one_at_a_time"], time.perf_counter() - start)
        assert [r.output for r in batched] == [r.output for r in single] == [str(i * (i + 1)) for i in range(programs)]
    rates = {kind: programs / seconds for kind, seconds in best.items()}
    return {**{f"{k}_per_s": round(v, 1) for k, v in rates.items()}, "ratio": rates["batched"] / rates["one_at_a_time"]}


def versions_side_by_side(folder: str, programs: int, rounds: int, workers: int) -> dict:
    """`sandbox_ratio` of this tree's sandbox and of the one in `folder`, one pass each per round, alternating."""
    best: dict[str, dict] = {}
    trees = {"this": str(ROOT), "other": os.path.abspath(folder)}
    for round_index in range(rounds):
        for name in list(trees) if round_index % 2 == 0 else list(trees)[::-1]:
            command = [sys.executable, __file__, "--one-pass", "--programs", str(programs), "--workers", str(workers)]
            env = {**os.environ, "PYTHONPATH": trees[name]}
            done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=trees[name], check=True)
            rates = json.loads(done.stdout.strip().splitlines()[-1])
            for kind in ("batched_per_s", "one_at_a_time_per_s"):
                best.setdefault(name, {})[kind] = max(best.get(name, {}).get(kind, 0.0), rates[kind])
    return best


# Run in a fresh, small interpreter: forking this process (torch loaded) would cost more than the namespaces.
NAMESPACE_PROBE = r"""
import ctypes, json, os, sys, time
CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWIPC = 0x10000000, 0x40000000, 0x08000000
libc = ctypes.CDLL(None, use_errno=True)
rounds, count = int(sys.argv[1]), int(sys.argv[2])

def children_ms(n, flags):
    start = time.perf_counter()
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os._exit(0 if libc.unshare(flags) == 0 else 3)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"unshare({flags:#x}) failed")
    return 1000 * (time.perf_counter() - start) / n

if libc.unshare(CLONE_NEWUSER) != 0:
    sys.exit(f"unshare(CLONE_NEWUSER): errno {ctypes.get_errno()}")
children_ms(10, CLONE_NEWIPC | CLONE_NEWNET)
best = {"ipc": float("inf"), "ipc_net": float("inf")}
for _ in range(rounds):
    best["ipc"] = min(best["ipc"], children_ms(count, CLONE_NEWIPC))
    best["ipc_net"] = min(best["ipc_net"], children_ms(count, CLONE_NEWIPC | CLONE_NEWNET))
print(json.dumps(best))
"""


def network_namespace_ms(rounds: int = 5, count: int = 50) -> dict:
    """Per program: a child with its own IPC namespace vs one with its own IPC and network namespaces (the sandbox's
    program process has both), interleaved rounds inside a user namespace, the least-disturbed round of each."""
    probe = subprocess.run(
        [sys.executable, "-I", "-S", "-c", NAMESPACE_PROBE, str(rounds), str(count)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if probe.returncode != 0:
        return {"error": (probe.stderr.strip().splitlines() or ["no output"])[-1]}
    best = json.loads(probe.stdout)
    return {
        "ipc_ms": round(best["ipc"], 3),
        "ipc_net_ms": round(best["ipc_net"], 3),
        "network_ms": round(best["ipc_net"] - best["ipc"], 3),
    }


class Timed:
    """Wraps a callable and adds its wall time to `self.seconds`."""

    def __init__(self, func) -> None:
        self.func, self.seconds = func, 0.0

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.func(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


def loop_share(tool, rows: int, max_new_tokens: int) -> dict:
    """Split a SmolLM2 tool turn's wall time into generation, sandbox and the loop's own work."""
    import yaml
    from transformers import AutoTokenizer

    import drgrpo.algorithm.rollout.generation as generation
    from drgrpo.algorithm.rollout.loop import LoopSettings, run_tool_loop
    from drgrpo.algorithm.rollout.protocol import TurnReader
    from drgrpo.core.models import resolve_model
    from drgrpo.core.threads import adapt_torch_threads
    from drgrpo.evaluation.backends import TransformersBackend
    from drgrpo.evaluation.problems import build_prompts
    from drgrpo.experiments.product_task import problem_row

    recipe = yaml.safe_load(RECIPE.read_text())
    path = resolve_model("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    backend = TransformersBackend(str(path), tokenizer, dtype="float32")
    adapt_torch_threads()
    questions = [problem_row(1000 + 37 * i, 100 + 11 * i)["question"] for i in range(rows)]
    prompts = [ids for _, ids in build_prompts(tokenizer, questions, "chat", None, None, recipe["chat_examples"])]
    reader = TurnReader(tokenizer)
    stop_seconds = Timed(generation.TurnStop.__call__)

    class TimedStop(generation.TurnStop):
        def __call__(self, input_ids, scores, **kwargs):
            return stop_seconds(self, input_ids, scores, **kwargs)

    generation.TurnStop = TimedStop  # the backend builds its fence stop from this module attribute
    generate = Timed(
        lambda batch, budgets, owners: backend.generate_turn(batch, [0] * len(batch), budgets, 0.0, 1.0, reader)
    )
    runs = Timed(tool.run_many)

    class Tool:
        run_many = runs

    settings = LoopSettings(max_calls=1, max_tokens=max_new_tokens, eos_ids=tuple(backend.eos_ids))
    run_tool_loop(prompts[:2], generate, Tool, tokenizer, settings, reader)  # warm-up
    generate.seconds = runs.seconds = stop_seconds.seconds = 0.0
    start = time.perf_counter()
    answers = run_tool_loop(prompts, generate, Tool, tokenizer, settings, reader)
    total = time.perf_counter() - start
    model = generate.seconds - stop_seconds.seconds
    own = total - model - runs.seconds
    return {
        "rows": rows,
        "calls": sum(a.calls for a in answers),
        "turn_seconds": round(total, 3),
        "generation_seconds": round(model, 3),
        "sandbox_seconds": round(runs.seconds, 3),
        "fence_stop_seconds": round(stop_seconds.seconds, 4),
        "loop_own_seconds": round(own, 4),
        "share": own / total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=64, help="Trivial programs per throughput pass.")
    parser.add_argument("--rounds", type=int, default=3, help="Interleaved throughput passes of each kind.")
    parser.add_argument("--workers", type=int, default=2, help="Sandbox runners (tool_num_workers).")
    parser.add_argument("--rows", type=int, default=16, help="Answers in the SmolLM2 tool turn.")
    parser.add_argument("--max_new_tokens", type=int, default=96)
    parser.add_argument("--skip_model", action="store_true", help="Only the sandbox ratio (no SmolLM2 needed).")
    parser.add_argument("--against", default=None, help="Folder with another version's rewards/ and drgrpo/.")
    parser.add_argument("--one-pass", action="store_true", help=argparse.SUPPRESS)  # --against's subprocess
    args = parser.parse_args()
    tool = build_python_tool(ToolArguments(python_tool=True, tool_num_workers=args.workers, tool_timeout=2.0))
    if args.one_pass:
        print(json.dumps(sandbox_ratio(tool, args.programs, 1)))
        return
    if args.against:
        best = versions_side_by_side(args.against, args.programs, args.rounds, args.workers)
        for kind in ("batched_per_s", "one_at_a_time_per_s"):
            ratio = best["this"][kind] / best["other"][kind]
            print(f"{kind}: this tree {best['this'][kind]:.1f}, {args.against} {best['other'][kind]:.1f}: {ratio:.3f}")
        print(json.dumps({"load_average": [round(x, 2) for x in os.getloadavg()], "side_by_side": best}))
        return
    load = os.getloadavg()
    result = {"load_average": [round(x, 2) for x in load], "sandbox": sandbox_ratio(tool, args.programs, args.rounds)}
    print(
        f"sandbox, {args.workers} workers: {result['sandbox']['batched_per_s']} programs/s batched vs "
        f"{result['sandbox']['one_at_a_time_per_s']}/s one at a time: ratio {result['sandbox']['ratio']:.2f} "
        "(goal >= 1.8)",
        flush=True,
    )
    if not args.skip_model:
        result["loop"] = loop_share(tool, args.rows, args.max_new_tokens)
        loop = result["loop"]
        print(
            f"SmolLM2 tool turn, {loop['rows']} answers, {loop['calls']} programs: {loop['turn_seconds']} s = "
            f"generation {loop['generation_seconds']} s + sandbox {loop['sandbox_seconds']} s + the loop's own "
            f"{loop['loop_own_seconds']} s (fence stop {loop['fence_stop_seconds']} s): share "
            f"{100 * loop['share']:.2f}% (goal <= 2%)"
        )
    netns = result["network_namespace"] = network_namespace_ms()
    if "error" in netns:
        print(f"network namespace per program: not measured ({netns['error']})")
    else:
        line = (
            f"network namespace per program: {netns['ipc_net_ms']} ms vs {netns['ipc_ms']} ms without it: "
            f"+{netns['network_ms']} ms"
        )
        if "loop" in result:
            loop = result["loop"]
            per_turn = loop["calls"] * netns["network_ms"] / args.workers / 1000
            netns["share_of_turn"] = per_turn / loop["turn_seconds"]
            line += (
                f"; in the SmolLM2 turn ({loop['calls']} programs, {args.workers} at a time) {1000 * per_turn:.1f} ms, "
                f"{100 * netns['share_of_turn']:.2f}% of it (inside the sandbox's {loop['sandbox_seconds']} s)"
            )
        print(line)
    result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
