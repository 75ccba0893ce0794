"""End-to-end evaluation with the tiny model: report files and values, agreement with the training reward,
resuming after a killed run, the comparison table."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PYTHON, ROOT, default_sigint

from drgrpo.evaluation import evaluate, pass_at_k

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def read_rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_report_values_and_agreement_with_the_training_reward(tiny_model_path, tmp_path):
    from rewards import accuracy

    problems = [{"question": f"{a}+{b}=", "answer": str(a + b)} for a, b in [(1, 2), (3, 4), (10, 5), (7, 7)] * 4]
    data = write_jsonl(tmp_path / "sums.jsonl", problems)
    settings = dict(n=4, temperature=1.0, max_new_tokens=6, batch_size=16, progress=False, seed=3)
    first = evaluate(tiny_model_path, data, "question", "answer", "plain", output_dir=tmp_path / "a", **settings)
    rows = read_rows(tmp_path / "a")
    assert len(rows) == 16 * 4 == first["num_samples"]
    assert {(r["problem_index"], r["sample_index"]) for r in rows} == {(p, s) for p in range(16) for s in range(4)}
    for row in rows:
        assert row["prompt"] == row["question"]  # plain template
        assert row["num_tokens"] in range(1, 7)  # at least the first token, at most max_new_tokens
        # A shorter one ended at the tiny tokenizer's stop token; one of 6 may have ended there too, at its last token.
        assert not row["truncated"] or row["num_tokens"] == 6
    answered = [r for r in rows if r["extracted"] is not None]
    assert answered, "the tiny model should put a number in some completions at temperature 1"

    # Make the model right by construction: the gold of each problem becomes one of its own sampled answers. The
    # same seed gives the same completions, so which samples are correct is known from the training reward.
    new_gold = {}
    for row in answered:
        new_gold.setdefault(row["problem_index"], row["extracted"])
    relabeled = [{**problem, "answer": new_gold.get(i, problem["answer"])} for i, problem in enumerate(problems)]
    data_b = write_jsonl(tmp_path / "relabeled.jsonl", relabeled)
    summary = evaluate(tiny_model_path, data_b, "question", "answer", "plain", output_dir=tmp_path / "b", **settings)
    rows_b = sorted(read_rows(tmp_path / "b"), key=lambda r: (r["problem_index"], r["sample_index"]))
    assert [r["completion"] for r in rows_b] == [
        r["completion"] for r in sorted(rows, key=lambda r: (r["problem_index"], r["sample_index"]))
    ]
    rewards = accuracy(
        completions=[r["completion"] for r in rows_b], answer=[relabeled[r["problem_index"]]["answer"] for r in rows_b]
    )
    assert [r["correct"] for r in rows_b] == [reward == 1.0 for reward in rewards]
    correct_per_problem = [sum(r["correct"] for r in rows_b if r["problem_index"] == p) for p in range(16)]
    assert sum(correct_per_problem) >= len(new_gold) > 0
    assert summary["pass@1"] == pytest.approx(sum(correct_per_problem) / 64)
    assert summary["pass@2"] == pytest.approx(sum(pass_at_k(4, c, 2) for c in correct_per_problem) / 16)
    assert summary["pass@4"] == pytest.approx(sum(c > 0 for c in correct_per_problem) / 16)
    lengths_ok = [r["num_tokens"] for r in rows_b if r["correct"]]
    assert summary["mean_length_correct"] == pytest.approx(sum(lengths_ok) / len(lengths_ok))
    assert summary["truncation_rate"] == pytest.approx(sum(r["truncated"] for r in rows_b) / 64)
    assert summary["unparsable_golds"] == 0
    on_disk = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert on_disk["pass@1"] == summary["pass@1"] and on_disk["benchmark"] == "relabeled"
    assert "| pass@4 (%) |" in (tmp_path / "b" / "summary.md").read_text()

    from scripts.compare_evals import main as compare

    table = compare([str(tmp_path)]).splitlines()
    # `make eval-compare` shows how many problems each benchmark had (16 in both runs here).
    assert table[0] == "| model | metric (%) | relabeled (16 problems) | sums (16 problems) | Avg. |"
    assert table[2].startswith(
        f"| {tiny_model_path} | pass@1 | {100 * summary['pass@1']:.1f} | {100 * first['pass@1']:.1f} |"
    )


def test_chat_template_and_recipe_defaults(tiny_model_path, tmp_path):
    data = write_jsonl(tmp_path / "q.jsonl", [{"q": "2+2=", "a": 4}, {"q": "1+1=", "a": 2}])
    chat = evaluate(
        tiny_model_path, data, "q", "a", "chat", max_new_tokens=2, output_dir=tmp_path / "chat", progress=False
    )
    prompt = read_rows(tmp_path / "chat")[0]["prompt"]
    assert prompt.startswith("<|im_start|>user\n") and prompt.endswith("<|im_start|>assistant\n")
    assert chat["prompt_template"] == "chat" and chat["num_samples"] == 2
    # The tiny recipe says `prompt_template: plain`; the evaluator takes it from there when given the recipe.
    from_recipe = evaluate(
        tiny_model_path,
        data,
        "q",
        "a",
        max_new_tokens=2,
        output_dir=tmp_path / "recipe",
        recipe=str(ROOT / "recipes" / "tiny_drgrpo.yaml"),
        progress=False,
    )
    assert from_recipe["prompt_template"] == "plain"
    assert read_rows(tmp_path / "recipe")[0]["prompt"] == "2+2="


def _rows_by_key(folder: Path) -> dict:
    return {(r["problem_index"], r["sample_index"]): r for r in read_rows(folder)}


def test_killed_run_resumes_to_the_uninterrupted_result(tiny_model_path, tmp_path):
    problems = [{"question": f"{a}+{b}=", "answer": str(a + b)} for a in range(4) for b in range(2)]
    data = write_jsonl(tmp_path / "resume.jsonl", problems)
    killed_dir = tmp_path / "killed"
    argv = [
        "--model_name_or_path", str(tiny_model_path), "--benchmark", str(data), "--n", "4", "--temperature", "1.0",
        "--max_new_tokens", "10", "--seed", "7", "--output_dir", str(killed_dir), "--progress", "false",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [PYTHON, "scripts/evaluate.py", *argv, "--batch_size", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    samples = killed_dir / "samples.jsonl"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if samples.exists() and samples.read_bytes().count(b"\n") >= 5:
                break
            time.sleep(0.01)
    finally:
        process.send_signal(signal.SIGKILL)
        _, stderr = process.communicate()
    written = samples.read_bytes().count(b"\n") if samples.exists() else 0
    assert 5 <= written < 32, f"the run should have been killed half way ({written} rows): {stderr.decode()[-2000:]}"
    assert not (killed_dir / "summary.json").exists()

    # The same command again (other batch size: samples do not depend on batching) completes the run.
    from scripts.evaluate import main as evaluate_cli

    resumed = evaluate_cli([*argv, "--batch_size", "8"])
    rows = read_rows(killed_dir)
    keys = [(r["problem_index"], r["sample_index"]) for r in rows]
    assert len(keys) == len(set(keys)) == 32, "no duplicate and no missing sample after resuming"

    uninterrupted = evaluate_cli([*argv[:-4], "--output_dir", str(tmp_path / "whole"), "--batch_size", "16"])
    drop = {"output_dir"}
    assert {k: v for k, v in resumed.items() if k not in drop} == {
        k: v for k, v in uninterrupted.items() if k not in drop
    }
    before, after = _rows_by_key(killed_dir), _rows_by_key(tmp_path / "whole")
    assert {k: (r["completion"], r["verdict"]) for k, r in before.items()} == {
        k: (r["completion"], r["verdict"]) for k, r in after.items()
    }

    # A third run finds everything done: nothing is generated or appended.
    size = samples.stat().st_size
    assert evaluate_cli([*argv, "--batch_size", "8"])["pass@1"] == resumed["pass@1"]
    assert samples.stat().st_size == size


def test_checkpoint_generation_defaults_do_not_leak_into_greedy_decoding(tiny_model_path, tmp_path):
    import shutil

    import torch
    from transformers import AutoTokenizer, GenerationConfig

    from drgrpo.evaluation import Request, TransformersBackend

    # A checkpoint whose generation_config.json asks for sampling with a heavy repetition penalty and no repeats.
    noisy = shutil.copytree(tiny_model_path, tmp_path / "noisy")
    config = GenerationConfig.from_pretrained(noisy)
    config.update(do_sample=True, temperature=0.1, repetition_penalty=50.0, no_repeat_ngram_size=1, top_k=2)
    config.save_pretrained(noisy)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    requests = [Request(i, 0, tuple(tokenizer(f"{i}+{i}=")["input_ids"]), seed=i) for i in range(12)]
    clean = TransformersBackend(str(tiny_model_path), tokenizer).generate(requests, 0.0, 1.0, 12)
    loaded = TransformersBackend(str(noisy), tokenizer).generate(requests, 0.0, 1.0, 12)
    assert [g.text for g in loaded] == [g.text for g in clean]
    # ...while the penalty really would have changed them (so the comparison above can fail).
    backend = TransformersBackend(str(noisy), tokenizer)
    ids = torch.tensor([list(requests[0].prompt_ids)])
    with torch.inference_mode():
        penalised = backend.model.generate(input_ids=ids, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert tokenizer.decode(penalised[0, ids.shape[1] :], skip_special_tokens=True) != clean[0].text


def test_ctrl_c_ends_with_one_line_saying_what_is_saved_and_how_to_resume(tiny_model_path, tmp_path):
    """Ctrl-C in `make eval` (SIGINT to the evaluation): no KeyboardInterrupt traceback, one line with the samples
    saved and the command to resume, exit status 130; rerunning it resumes."""
    problems = [{"question": f"{a}+{b}=", "answer": str(a + b)} for a in range(4) for b in range(2)]
    data = write_jsonl(tmp_path / "interrupt.jsonl", problems)
    out = tmp_path / "interrupted"
    argv = [
        "--model_name_or_path", str(tiny_model_path), "--benchmark", str(data), "--n", "64", "--temperature", "1.0",
        "--max_new_tokens", "10", "--seed", "7", "--output_dir", str(out), "--progress", "false", "--batch_size", "1",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MAKELEVEL": "1"}
    process = subprocess.Popen(
        [PYTHON, "scripts/evaluate.py", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=default_sigint,
    )
    samples = out / "samples.jsonl"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if samples.exists() and samples.read_bytes().count(b"\n") >= 3:
                break
            time.sleep(0.01)
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    stderr = stderr.decode()
    saved = samples.read_bytes().count(b"\n")
    assert process.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last == (
        f"interrupted: {saved} of 512 samples are saved in {samples}; rerun the same make eval command to resume "
        "(saved samples are not generated again)."
    )
    assert 3 <= saved < 512  # 512 samples: more than a fast machine finishes before the signal
