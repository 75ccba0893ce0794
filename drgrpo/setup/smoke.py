"""What `scripts/gpu_smoke.sh` checks in each run's files, and the throughput it reports.

A run passes when its loss is finite at every logged step and changes (`loss_check`), when the log's `engaged:` and
`engine:` lines (drgrpo/run/training.py: the trainer as built, the DeepSpeed engine that trained) say that bf16 and
ZeRO-3 with partitioned parameters actually ran (`engaged_check`), and, for the ZeRO-3 run, when its saved model
reloads in one process with every tensor whole (an lm_head of its own for the untied model), differs from the base
model, and generates (`reload_check`).

Throughput. Training: `trainer_state.json` (transformers' final log entry holds `train_runtime`; TRL logs each step's
`completions/mean_length`, the mean completion length over the step's completions). Evaluation: `samples.jsonl`
(`num_tokens` per sample) and the wall time of the evaluation, measured by the script.

    python -m drgrpo.setup.smoke check RUN_DIR --log RUN.log [--bf16] [--zero3] [--processes 2]
    python -m drgrpo.setup.smoke reload RUN_DIR --base BASE_MODEL_DIR [--device cuda]
    python -m drgrpo.setup.smoke throughput --train outputs/gpu_smoke/train --completions_per_step 64 \\
        --eval_samples outputs/gpu_smoke/eval/samples.jsonl --eval_seconds 12.5
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

MEAN_LENGTH = "completions/mean_length"  # TRL's GRPOTrainer metric


def training_throughput(log_history: Sequence[Mapping[str, Any]], completions_per_step: int) -> dict[str, float]:
    """Steps, seconds, steps/s and generated tokens/s of one training run, from its `log_history`.

    Generated tokens = sum over logged steps of mean completion length x completions per step; with
    `logging_steps: 1` every step is logged. Tokens/s divides by the whole training time (generation, rewards and
    the update), so it is the rate the run sustains, not the generator's peak.
    """
    final = next((entry for entry in reversed(log_history) if "train_runtime" in entry), None)
    if final is None:
        raise ValueError("log_history has no final entry with train_runtime: the run did not finish.")
    steps = [entry for entry in log_history if MEAN_LENGTH in entry]
    seconds = float(final["train_runtime"])
    tokens = sum(entry[MEAN_LENGTH] for entry in steps) * completions_per_step
    return {
        "steps": float(len(steps)),
        "seconds": seconds,
        "steps_per_second": len(steps) / seconds,
        "generated_tokens": tokens,
        "generated_tokens_per_second": tokens / seconds,
    }


def eval_throughput(samples: Iterable[Mapping[str, Any]], seconds: float) -> dict[str, float]:
    """Samples, generated tokens and tokens/s of an evaluation over `seconds` of wall time."""
    rows = list(samples)
    tokens = float(sum(row["num_tokens"] for row in rows))
    return {
        "samples": float(len(rows)),
        "seconds": seconds,
        "generated_tokens": tokens,
        "generated_tokens_per_second": tokens / seconds,
    }


def _line(name: str, numbers: Mapping[str, float]) -> str:
    parts = [f"{numbers['generated_tokens_per_second']:.0f} generated tokens/s"]
    if "steps_per_second" in numbers:
        parts.insert(0, f"{numbers['steps_per_second']:.2f} steps/s ({numbers['steps']:.0f} steps)")
    else:
        parts.append(f"{numbers['samples']:.0f} samples")
    return f"{name}: {', '.join(parts)} in {numbers['seconds']:.1f} s"


def loss_check(log_history: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
    """Finite at every logged step, and not the same number throughout (which would mean no update reached it)."""
    losses = [entry["loss"] for entry in log_history if "loss" in entry and "train_runtime" not in entry]
    if len(losses) < 2:
        return False, f"{len(losses)} logged loss(es): the check needs 2 or more (logging_steps 1, 2 or more steps)"
    broken = [step for step, loss in enumerate(losses, 1) if not math.isfinite(loss)]
    if broken:
        return False, f"loss not finite at step(s) {broken}: {losses}"
    if len(set(losses)) == 1:
        return False, f"loss {losses[0]} at all {len(losses)} steps: the rewards gave no advantage, or nothing trained"
    return True, f"{len(losses)} steps, loss {losses[0]:.4g} -> {losses[-1]:.4g} (finite, changing)"


def engaged_check(log: str, *, bf16: bool, zero3: bool, processes: int = 1) -> tuple[bool, str]:
    """bf16, ZeRO-3 with partitioned parameters and the process count, as the run's own log states them: the
    `engaged:` line (the trainer as built) and the `engine:` line (the DeepSpeed engine that trained)."""
    engaged = [line.split("engaged: ", 1)[1].strip() for line in log.splitlines() if "engaged: " in line]
    engine = [line.split("engine: ", 1)[1].strip() for line in log.splitlines() if "engine: " in line]
    if not engaged or not engine:
        return False, "the log lacks the 'engaged:' or 'engine:' line (drgrpo/run/training.py logs both)"
    engaged_line, engine_line, problems = engaged[-1], engine[-1], []
    if bf16 and "mixed precision bf16" not in engaged_line:
        problems.append("bf16 did not engage")
    if zero3:
        if "DeepSpeed ZeRO stage 3 (parameters partitioned)" not in engaged_line:
            problems.append("ZeRO-3 did not partition the parameters")
        if not engine_line.startswith("DeepSpeed ZeRO stage 3,") or "Stage3" not in engine_line:
            problems.append("no ZeRO stage 3 engine trained")
        if bf16 and "bf16 True" not in engine_line:
            problems.append("the DeepSpeed engine ran without bf16")
    if f"{processes} process(es)" not in engaged_line:
        problems.append(f"not {processes} process(es)")
    text = f"engaged: {engaged_line}; engine: {engine_line}"
    return (False, "; ".join(problems) + f" ({text})") if problems else (True, text)


def reload_check(
    run_dir: str | Path, base_dir: str | Path, device: str = "cpu", new_tokens: int = 8
) -> tuple[bool, str]:
    """The saved model reloads in one process, whole (every tensor the base model's shape; an lm_head of its own when
    the config unties it), trained (some tensor differs from the base model) and generates `new_tokens` tokens."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    saved = load_file(str(Path(run_dir) / "model.safetensors"))
    base = load_file(str(Path(base_dir) / "model.safetensors"))
    if set(saved) != set(base):
        return False, f"the saved tensors differ from the base model's: {sorted(set(saved) ^ set(base))[:5]}"
    wrong = [name for name in base if saved[name].shape != base[name].shape or saved[name].numel() == 0]
    if wrong:
        return (
            False,
            f"{len(wrong)} tensor(s) saved empty or misshapen (a ZeRO-3 shard, not the gathered weight): {wrong[:3]}",
        )
    changed = sum(not torch.equal(saved[name].float(), base[name].to(saved[name].dtype).float()) for name in base)
    if not changed:
        return False, "the saved model equals the base model: training changed no weight"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(run_dir, dtype=dtype).to(device).eval()
    untied = not model.config.tie_word_embeddings
    if untied and model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr():
        return False, "the config unties lm_head, but the reloaded lm_head shares the embedding matrix"
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    prompt = tokenizer("12+34=", return_tensors="pt").to(device)
    with torch.no_grad():
        output = model.generate(**prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    generated = output[0, prompt["input_ids"].shape[1] :]
    if len(generated) != new_tokens:
        return False, f"generated {len(generated)} tokens, not {new_tokens}"
    head = "an lm_head of its own" if untied else "tied embeddings"
    return True, (
        f"{len(saved)} tensors whole ({head}), {changed} changed by training; generated {new_tokens} tokens on "
        f"{device}: {tokenizer.decode(generated)!r}"
    )


def _throughput(args: argparse.Namespace) -> None:
    for spec in args.train:
        name, _, folder = spec.partition("=")
        history = json.loads((Path(folder) / "trainer_state.json").read_text())["log_history"]
        print(_line(name, training_throughput(history, args.completions_per_step)))
    if args.eval_samples:
        rows = [json.loads(line) for line in Path(args.eval_samples).read_text().splitlines() if line.strip()]
        print(
            _line(
                "evaluation (transformers backend, wall time incl. start-up)", eval_throughput(rows, args.eval_seconds)
            )
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="loss finite and changing; bf16 / ZeRO-3 engaged (one line, exit 1 if not)")
    check.add_argument("run_dir")
    check.add_argument("--log", required=True, help="the run's log (stdout and stderr)")
    check.add_argument("--bf16", action="store_true")
    check.add_argument("--zero3", action="store_true")
    check.add_argument("--processes", type=int, default=1)
    reload = sub.add_parser("reload", help="reload the saved model whole and generate (one line, exit 1 if not)")
    reload.add_argument("run_dir")
    reload.add_argument("--base", required=True, help="the model the run started from")
    reload.add_argument("--device", default="cpu")
    throughput = sub.add_parser("throughput", help="steps/s and generated tokens/s")
    throughput.add_argument("--train", action="append", default=[], help="NAME=OUTPUT_DIR of a training run (repeat)")
    throughput.add_argument("--completions_per_step", type=int, required=True)
    throughput.add_argument("--eval_samples", help="samples.jsonl of the evaluation")
    throughput.add_argument("--eval_seconds", type=float, help="wall time of the evaluation")
    args = parser.parse_args(argv)
    if args.command == "throughput":
        _throughput(args)
        return 0
    if args.command == "reload":
        ok, line = reload_check(args.run_dir, args.base, args.device)
    else:
        history = json.loads((Path(args.run_dir) / "trainer_state.json").read_text())["log_history"]
        log = Path(args.log).read_text(errors="replace")
        results = [loss_check(history), engaged_check(log, bf16=args.bf16, zero3=args.zero3, processes=args.processes)]
        ok, line = all(r[0] for r in results), "; ".join(r[1] for r in results)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
