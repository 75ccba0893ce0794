"""benchmarks/vllm_cpu_peer.py's engine worker (issue 53): the protocol the driver reads, and the forced workload
doing the same work as vLLM's `ignore_eos` (every row all `max_tokens`), on the tiny model. vLLM's own worker needs
vLLM's venv (`--install_only` makes it) and is not run here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_engine_worker_answers_each_request_with_the_tokens_it_generated(tiny_model_path, tmp_path):
    prompts = tmp_path / "prompts.json"
    rows = [[5, 6, 7]] * 4 + [[8, 9]] * 4
    prompts.write_text(json.dumps(rows))
    spec = {"model": str(tiny_model_path), "prompts": str(prompts), "dtype": "float32", "temperature": 0.7,
            "max_tokens": 6, "max_model_len": 64}  # fmt: skip
    requests = [{"forced": True, "seed": 0}, {"forced": False, "seed": 0}, {"forced": True, "seed": 1000}]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "vllm_cpu_peer.py"), "--worker", json.dumps(spec)],
        input="".join(json.dumps(request) + "\n" for request in requests),
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "DRGRPO_TORCH_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    marked = [line.removeprefix("@peer ") for line in done.stdout.splitlines() if line.startswith("@peer ")]
    ready, *replies = [json.loads(line) for line in marked]
    assert ready["ready"] is True
    assert len(replies) == 3
    assert replies[0]["tokens"] == replies[2]["tokens"] == len(rows) * 6  # forced: no row ends early
    assert 0 < replies[1]["tokens"] <= len(rows) * 6
    assert all(reply["wall"] > 0 and reply["cpu"] > 0 and reply["threads"] == 1 for reply in replies)
