"""Seconds per Dr.GRPO step on SmolLM2-135M-Instruct with the demo's batch (4 prompts x 8 completions, up to 64 new
tokens), side by side in one run, each variant in a fresh process (for its peak RSS), rounds interleaved:

- `trl_defaults`: TRL's `GRPOTrainer` with TRL's own defaults on CPU (only the batch, the task, the learning rate
  and the algorithm Dr.GRPO resolves to are set; `bf16`, gradient checkpointing and the rest are TRL's). The worker
  measures which precision that turned out to be (accelerate's mixed precision, and autocast on or off inside the
  model during generation and during the loss), and prints it;
- `float32_before`: our SmolLM2 recipe as it was before issue 29 (`bf16: false`, no sorting or cutting of padding,
  TRL's full-width LM head on CPU);
- `before_engine`: the recipe as shipped before issue 40: TRL's transformers `generate` on the float32 weights
  under bf16 autocast (`generation_engine: trl`);
- `default`: the recipe as shipped (`bf16: auto`, `sort_by_length`, `compact_lm_head`, the CPU generation engine);
- optional: `bf16` (the default with `bf16: true` forced), `float32` (the default with `bf16: false`) and
  `stock_mlp` (the default with `recompute_swiglu: false`: the time and peak RSS of keeping all four MLP tensors).

    python benchmarks/cpu_step_speed.py [--rounds 2] [--steps 2] [--threads 1] [--variants trl_defaults ...]

Each run trains `--steps` steps and times all but the first (warm-up); the table gives, per variant, the
least-disturbed time of the timed steps (the fastest time seen at each step position across rounds: other processes
only ever add time), the process's CPU seconds over the same steps (less sensitive to a busy machine), where the
time went in the last round (generation, forward + backward, optimizer, the rest), the peak RSS, and each variant's
step-time ratio to `trl_defaults` and to `float32_before`. The CPU's bf16 flag and the load average are printed. The
same seed in every variant; `zero_reward_for_truncated`, which TRL lacks, is off in all, so all do the same work.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from transformers import PrinterCallback, TrainerCallback

VARIANTS = (
    "trl_defaults", "float32_before", "before_engine", "stock_mlp", "default", "bf16", "float32", "checkpointing"
)  # fmt: skip
OURS = {
    # The recipe as it was on main before issue 29.
    "float32_before": {
        "bf16": "false",
        "sort_by_length": "false",
        "compact_lm_head": "false",
        "gradient_checkpointing": "true",
        "per_device_train_batch_size": "8",
        "gradient_accumulation_steps": "4",
    },  # fmt: skip
    "before_engine": {"generation_engine": "trl"},  # the recipe as shipped before issue 40
    "stock_mlp": {"recompute_swiglu": "false"},  # autograd keeps all four SwiGLU tensors (drgrpo/algorithm/swiglu.py)
    "default": {},
    "bf16": {"bf16": "true"},
    "float32": {"bf16": "false"},
    "checkpointing": {"gradient_checkpointing": "true"},
}
RECIPE = "recipes/smollm2_135m_drgrpo.yaml"
MEAN_LENGTH = "completions/mean_length"
# What `trl_defaults` takes from the recipe: the batch, the task and the optimizer's rate; nothing about precision,
# checkpointing or padding.
TRL_KEYS = ("num_generations", "per_device_train_batch_size", "gradient_accumulation_steps", "max_completion_length",
            "temperature", "learning_rate", "lr_scheduler_type", "seed", "use_cpu")  # fmt: skip


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class StepClock(TrainerCallback):
    """Wall and CPU seconds of every optimizer step, and of the optimizer update inside it."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.optimizer: list[float] = []
        self._start = self._cpu = self._opt = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start, self._cpu = time.perf_counter(), cpu_seconds()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._opt = time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.optimizer.append(time.perf_counter() - self._opt)

    def on_step_end(self, args, state, control, **kwargs):
        self.wall.append(time.perf_counter() - self._start)
        self.cpu.append(cpu_seconds() - self._cpu)


def timed(owner, name: str, totals: dict[str, list[float]], key: str) -> None:
    """Wrap `owner.name` so that each call's wall time is appended to `totals[key]`."""
    function = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            totals.setdefault(key, []).append(time.perf_counter() - start)

    setattr(owner, name, wrapper)


def build(variant: str, output_dir: Path, steps: int, clock: StepClock, extra: dict[str, str] | None = None):
    """The trainer of one variant, on the same data, model and seed (`extra`: recipe keys set in every variant)."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from drgrpo.algorithm.trainer import DrGRPOTrainer
    from drgrpo.core.models import resolve_model
    from drgrpo.data import load_prompt_dataset
    from drgrpo.experiments.arithmetic_task import write_chat_addition_task
    from drgrpo.recipe.cli import parse_recipe
    from rewards import get_reward_funcs

    data = write_chat_addition_task(output_dir / "data", seed=0)
    overrides = {"dataset_path": str(data["train"]), "output_dir": str(output_dir / "run"), "max_steps": steps,
                 "zero_reward_for_truncated": "false", "logging_steps": 1, "disable_tqdm": "true",
                 **(extra or {}), **OURS.get(variant, {})}  # fmt: skip
    argv = [RECIPE, *(x for key, value in overrides.items() for x in (f"--{key}", str(value)))]
    script_args, config, model_args = parse_recipe(argv)
    model = resolve_model(model_args.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(model)
    dataset, _ = load_prompt_dataset(script_args, seed=config.seed, tokenizer=tokenizer)
    rewards = get_reward_funcs(script_args.reward_funcs, settings=script_args, max_completion_length=64)
    trainer_class = DrGRPOTrainer
    if variant == "trl_defaults":
        trainer_class = GRPOTrainer
        config = GRPOConfig(
            output_dir=str(output_dir / "run"), max_steps=steps, logging_steps=1, save_strategy="no",
            report_to="none", disable_tqdm=True, **{key: getattr(config, key) for key in TRL_KEYS},
            **{key: getattr(config, key) for key in ("scale_rewards", "loss_type", "beta")},
        )  # fmt: skip
    trainer = trainer_class(model=model, reward_funcs=rewards, args=config, train_dataset=dataset,
                            processing_class=tokenizer, callbacks=[clock])  # fmt: skip
    trainer.remove_callback(PrinterCallback)
    return trainer


def worker(variant: str, steps: int, threads: int, extra: dict[str, str]) -> None:
    """Child process: train one variant; print its step times, phases, precision and peak RSS as one JSON line."""
    import torch

    torch.set_num_threads(threads)
    phases: dict[str, list[float]] = {}
    seen: dict[str, set] = {"generation": set(), "loss": set()}
    stage = {"now": "loss"}
    with tempfile.TemporaryDirectory() as tmp:
        clock = StepClock()
        trainer = build(variant, Path(tmp), steps, clock, extra)
        probe = trainer.model.model.layers[0].mlp.down_proj

        def record(module, inputs, output):
            seen[stage["now"]].add(f"autocast {'on' if torch.is_autocast_enabled('cpu') else 'off'}, {output.dtype}")

        probe.register_forward_hook(record)
        generate = trainer._generate_single_turn

        def in_generation(*args, **kwargs):
            stage["now"] = "generation"
            start = time.perf_counter()
            try:
                return generate(*args, **kwargs)
            finally:
                stage["now"] = "loss"
                phases.setdefault("generation", []).append(time.perf_counter() - start)

        trainer._generate_single_turn = in_generation
        timed(trainer, "_prepare_inputs", phases, "prepare")  # generation, rewards, advantages, old log-probs
        timed(trainer, "training_step", phases, "training_step")  # _prepare_inputs + forward + backward
        trainer.train()
        precision = {
            "bf16": trainer.args.bf16,
            "mixed_precision": trainer.accelerator.mixed_precision,
            "gradient_checkpointing": trainer.args.gradient_checkpointing,
            "generation": sorted(seen["generation"]) or engine_weights(trainer),
            "loss": sorted(seen["loss"]),
        }
    last = len(clock.wall) - 1
    per_step = trainer.args.gradient_accumulation_steps
    window = slice(last * per_step, (last + 1) * per_step)
    generation = sum(phases.get("generation", [])[-1:])
    prepare = sum(phases["prepare"][window])
    forward_backward = sum(phases["training_step"][window]) - prepare
    result = {
        "variant": variant,
        "wall": clock.wall[1:] if len(clock.wall) > 1 else clock.wall,
        "cpu": clock.cpu[1:] if len(clock.cpu) > 1 else clock.cpu,
        "last_step": {
            "total": clock.wall[-1],
            "generation": generation,
            "scoring": prepare - generation,
            "forward_backward": forward_backward,
            "optimizer": clock.optimizer[-1],
        },  # fmt: skip
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        # The work of the last step: completions differ between variants (other samples), and so does their length.
        "last_step_mean_length": next(
            (e[MEAN_LENGTH] for e in reversed(trainer.state.log_history) if MEAN_LENGTH in e), float("nan")
        ),
        "precision": precision,
    }
    print(json.dumps(result))


def engine_weights(trainer) -> list[str]:
    """What the CPU engine generated from (its copy's dtype, or the trained weights), where it generated."""
    engine = getattr(trainer, "_engine", None)
    if engine is None:
        return []
    copy = engine.weights.copy
    dtype = next(p.dtype for p in copy.parameters()) if copy is not None else "the trained weights'"
    return [f"CPU engine, {str(dtype).removeprefix('torch.')} weights"]


def least_disturbed(runs: list[list[float]]) -> float:
    """Sum over step positions of the fastest time at that position across rounds."""
    return sum(min(times) for times in zip(*runs, strict=True))


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_variants = ["before_engine", "default"]
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=default_variants)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2, help="steps per run; all but the first are timed")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every run")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="recipe keys set in every variant (e.g. per_device_train_batch_size=4)")  # fmt: skip
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.set)
    if args.worker:
        return worker(args.worker, args.steps, args.threads, extra)

    from drgrpo.core.cpu_bf16 import this_cpu_bf16

    cpu = this_cpu_bf16()
    print(f"CPU: {'native bf16' if cpu.supported else 'no native bf16'} ({cpu.reason}); {os.cpu_count()} CPUs; "
          f"{args.threads} torch thread(s); load {load()}", flush=True)  # fmt: skip
    results: dict[str, list[dict]] = {variant: [] for variant in args.variants}
    for round_index in range(args.rounds):
        order = args.variants if round_index % 2 == 0 else list(reversed(args.variants))
        for variant in order:
            command = [sys.executable, __file__, "--worker", variant, "--steps", str(args.steps),
                       "--threads", str(args.threads), "--set", *args.set]  # fmt: skip
            started = load()
            done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            if done.returncode != 0:
                sys.exit(f"{variant} failed:\n{done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            results[variant].append(result)
            steps, cpu_steps = ([round(x, 1) for x in result[key]] for key in ("wall", "cpu"))
            print(f"round {round_index + 1}/{args.rounds} {variant}: timed steps {steps} s wall, {cpu_steps} s CPU, "
                  f"peak RSS {result['peak_rss_gb']:.2f} GB, last step's mean completion length "
                  f"{result['last_step_mean_length']:.1f} (load {started} -> {load()})", flush=True)  # fmt: skip
    wall = {v: least_disturbed([r["wall"] for r in rs]) for v, rs in results.items()}
    cpu_time = {v: least_disturbed([r["cpu"] for r in rs]) for v, rs in results.items()}
    peak = {v: min(r["peak_rss_gb"] for r in rs) for v, rs in results.items()}
    references = [v for v in ("before_engine", "trl_defaults", "float32_before", "stock_mlp") if v in results]
    print()
    ratio_columns = " | ".join(f"ratio vs {v} (wall, CPU)" for v in references)
    print(
        "| variant | precision (measured) | timed steps, wall (s) | CPU (s) | last step: generation / fwd+bwd / "
        f"optimizer / rest (s) | peak RSS (GB) | {ratio_columns} |"
    )
    print("|---" * (6 + len(references)) + "|")
    for variant, runs in results.items():
        last, precision = runs[-1]["last_step"], runs[-1]["precision"]
        rest = last["total"] - last["generation"] - last["forward_backward"] - last["optimizer"]
        described = (
            f"mixed precision {precision['mixed_precision']}; generation {'/'.join(precision['generation'])}"
            f"; loss {'/'.join(precision['loss'])}; checkpointing {precision['gradient_checkpointing']}"
        )
        ratios = " | ".join(f"{wall[ref] / wall[variant]:.2f}x, {cpu_time[ref] / cpu_time[variant]:.2f}x"
                            for ref in references)  # fmt: skip
        print(f"| {variant} | {described} | {wall[variant]:.1f} | {cpu_time[variant]:.1f} | {last['generation']:.1f} / "
              f"{last['forward_backward']:.1f} / {last['optimizer']:.1f} / {rest:.1f} | {peak[variant]:.2f} | "
              f"{ratios} |")  # fmt: skip
    print(
        f"\nratios are speed-ups: reference time / variant time (above 1: the variant is faster). {args.rounds} "
        f"round(s) x {max(1, args.steps - 1)} timed step(s); load at the end {load()} on {os.cpu_count()} CPUs."
    )


if __name__ == "__main__":
    main()
