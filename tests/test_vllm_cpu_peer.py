"""benchmarks/vllm_cpu_peer.py's engine worker (issue 53): the protocol the driver reads, and the forced workload
doing the same work as vLLM's `ignore_eos` (every row all `max_tokens`), on the tiny model, in this process. vLLM's
own worker needs vLLM's venv (`--install_only` makes it) and is not run here."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
import vllm_cpu_peer  # noqa: E402

from drgrpo.core import threads as thread_choice  # noqa: E402


def test_engine_worker_answers_each_request_with_the_tokens_it_generated(
    tiny_model_path, tmp_path, monkeypatch, capsys
):
    prompts = tmp_path / "prompts.json"
    rows = [[5, 6, 7]] * 4 + [[8, 9]] * 4
    prompts.write_text(json.dumps(rows))
    spec = {"model": str(tiny_model_path), "prompts": str(prompts), "dtype": "float32", "temperature": 0.7,
            "max_tokens": 6, "max_model_len": 64}  # fmt: skip
    requests = [{"forced": True, "seed": 0}, {"forced": False, "seed": 0}, {"forced": True, "seed": 1000}]
    monkeypatch.setenv("DRGRPO_TORCH_THREADS", "1")
    monkeypatch.setattr(thread_choice, "_GOVERNOR", None)  # the worker's own choice, undone after the test
    monkeypatch.setattr(torch, "set_num_threads", lambda count: None)  # the count stays this process's
    monkeypatch.setattr(vllm_cpu_peer.time, "sleep", lambda seconds: None)  # the governor's window: fixed here
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(json.dumps(request) + "\n" for request in requests)))
    vllm_cpu_peer.engine_worker(spec)
    lines = capsys.readouterr().out.splitlines()
    ready, *replies = [json.loads(line.removeprefix(vllm_cpu_peer.MARK)) for line in lines]
    assert ready["ready"] is True
    assert len(replies) == 3
    assert replies[0]["tokens"] == replies[2]["tokens"] == len(rows) * 6  # forced: no row ends early
    assert 0 < replies[1]["tokens"] <= len(rows) * 6
    assert all(reply["wall"] > 0 and reply["cpu"] >= 0 and reply["threads"] == 1 for reply in replies)
