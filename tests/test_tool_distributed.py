"""The Python tool under DeepSpeed ZeRO-3 with 2 real processes (CPU, gloo), the ranks' answers making different
numbers of calls: one rank's prompt calls the tool on every turn until the call budget ends its answers (3 turns), the
other's answers at once (1 turn). Generation under ZeRO-3 gathers the parameters on every rank (a collective), so a
rank that generated fewer times than the other would abort the run ("collective mismatch"; NCCL would hang): the run
finishes only because the idle rank pads its calls with inactive rows.

The model is tests/tool_model.py's scripted bigram model (`loop=True`); the batch is 2 prompts x 4 completions, one
prompt per rank (TRL's sampler puts each prompt's group on one rank here), for 2 steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_distributed import free_port
from tool_model import build_tool_model

from drgrpo.observe import metric_names as m

ROOT = Path(__file__).resolve().parents[1]
ACCELERATE = Path(sys.executable).with_name("accelerate")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def uneven_run(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("tool-zero3")
    model = build_tool_model(work / "model-in", loop=True)
    data = work / "train.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": "1"}) + "\n" for q in ("call 0:", "skip 0!")))
    env = {
        **os.environ,
        "RANK_PROBE_DIR": str(work / "probe"),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
    }
    command = [
        str(ACCELERATE), "launch", "--config_file", "accelerate_configs/zero3_cpu.yaml",
        "--main_process_port", str(free_port()),
        "tests/rank_probe.py", "recipes/tiny_drgrpo.yaml",
        "--model_name_or_path", str(model), "--dataset_path", str(data), "--output_dir", str(work / "out"),
        "--max_steps", "2", "--per_device_train_batch_size", "4", "--num_generations", "4",
        "--gradient_accumulation_steps", "1", "--max_completion_length", "64", "--logging_steps", "1",
        "--reward_funcs", "probe_digits",
        "--python_tool", "true", "--tool_max_calls", "2", "--tool_answer_marker", "ok", "--tool_num_workers", "1",
    ]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"ZeRO-3 tool run failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    ranks = [json.loads((work / "probe" / f"rank{i}.json").read_text()) for i in range(2)]
    return {"ranks": ranks}


def test_the_ranks_answers_made_different_numbers_of_calls_and_the_run_finished(uneven_run):
    ranks = uneven_run["ranks"]
    assert [r["zero_stage"] for r in ranks] == [3, 3]
    assert len(ranks[0]["rounds"]) == len(ranks[1]["rounds"]) == 2
    for step in range(2):
        kinds = [{p.split()[0] for p in rank["rounds"][step]["prompts"]} for rank in ranks]
        assert sorted(map(sorted, kinds)) == [["call"], ["skip"]], kinds  # one rank calls, the other does not
    logged = [e for e in ranks[0]["log_history"] if m.TOOL_CALLS_PER_ANSWER in e]
    assert len(logged) == 2
    for entry in logged:
        # 4 answers x 2 calls on one rank, 4 x 0 on the other: 1 per answer; the calling half ends at its budget.
        assert entry[m.TOOL_CALLS_PER_ANSWER] == 1.0
        assert entry[m.TOOL_CALL_BUDGET_EXHAUSTED] == 0.5
        assert entry[m.TOOL_OUTPUT_TOKENS] > 0


def test_both_ranks_trained(uneven_run):
    for rank in uneven_run["ranks"]:
        assert len(rank["losses"]) == 2 and all(loss == loss for loss in rank["losses"])  # finite, not NaN
