"""Test helper: run `scripts/train.py` unchanged, recording per-rank facts for the multi-process and LoRA tests.

Used as the training script of an `accelerate launch`:

    RANK_PROBE_DIR=/tmp/probe accelerate launch --config_file accelerate_configs/zero3_cpu.yaml \\
        tests/rank_probe.py recipes/tiny_drgrpo.yaml --reward_funcs probe_digits ...

Before handing over to `scripts/train.py` (run as `__main__`, so the real parse -> `drgrpo.run.training.train` path
runs), it installs two test-only things:
- the reward names `probe_digits` (`digit_reward`) and `probe_half_digits` (`half_digit_reward`, all-equal groups
  for half the prompts, for dynamic sampling), used when one is the run's only reward. The randomly initialised
  tiny model never answers the addition task, so `accuracy` is 0 for every completion, every advantage is 0 and
  nothing would train; the share of digit characters varies between completions, so groups have spread, the
  advantages are non-zero and the weights move.
- `ProbeTrainer` in place of `DrGRPOTrainer` inside `drgrpo.run.training`: it behaves identically and writes
  `rank<i>.json` into `$RANK_PROBE_DIR` at the end of training with, per rank: how each parameter is partitioned
  at the start and after the last optimizer step (DeepSpeed's `ds_numel` vs the local partition `ds_tensor.numel()`
  and the size of the gathered `.data`), the final values of the local partitions of `PARTITION_SAMPLES`, every
  micro-batch loss, and for every generation round the local prompts, the all-process rewards and the local
  advantages.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

import torch
from transformers import TrainerCallback

ROOT = Path(__file__).resolve().parents[1]
PROBE_REWARD = "probe_digits"
# For dynamic sampling: all-equal (0) groups for prompts whose first operand is even, digit share otherwise.
PROBE_HALF_REWARD = "probe_half_digits"
# Tensors whose local partitions are recorded at the end (the tiny model's tied embedding and one MLP matrix).
PARTITION_SAMPLES = ("model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight")


def _text(completion) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return completion[-1].get("content") or ""
    return completion or ""


def digit_reward(completions: list, **kwargs) -> list[float]:
    """Share of a completion's characters that are digits (0.0 for an empty completion): a reward that varies."""
    scores = []
    for completion in completions:
        text = _text(completion)
        scores.append(sum(char.isdigit() for char in text) / len(text) if text else 0.0)
    return scores


def half_digit_reward(prompts: list, completions: list, **kwargs) -> list[float]:
    """0.0 for every completion of a prompt `a+b=` with even `a` (an all-equal group), else `digit_reward`."""
    digits = digit_reward(completions)
    return [0.0 if _text(p).split("+")[0].strip().isdigit() and int(_text(p).split("+")[0]) % 2 == 0 else d
            for p, d in zip(prompts, digits, strict=True)]  # fmt: skip


def with_probe_reward(resolve):
    """Wrap a `get_reward_funcs`: the spec list [PROBE_REWARD] resolves to `digit_reward`, anything else as before."""

    def get_reward_funcs(specs, *args, **kwargs):
        if list(specs) == [PROBE_REWARD]:
            return [digit_reward]
        if list(specs) == [PROBE_HALF_REWARD]:
            return [half_digit_reward]
        return resolve(specs, *args, **kwargs)

    return get_reward_funcs


def partition_facts(model: torch.nn.Module) -> dict[str, dict]:
    """Per parameter: full size (`ds_numel`), local partition size, size of the local `.data`, persistence."""
    facts = {}
    for name, param in model.named_parameters():
        if not hasattr(param, "ds_numel"):
            facts[name] = {"partitioned": False, "numel": param.numel()}
            continue
        facts[name] = {
            "partitioned": True,
            "ds_numel": int(param.ds_numel),
            "ds_shape": list(param.ds_shape),
            "local_partition": int(param.ds_tensor.numel()),
            "data_numel": int(param.data.numel()),  # 0 while the full tensor is released (not gathered)
            "persistent": bool(getattr(param, "ds_persist", False)),
        }
    return facts


class _PartitionCallback(TrainerCallback):
    """Records the partitioning once DeepSpeed has wrapped the model, and writes the rank's JSON at the end."""

    def __init__(self, trainer: ProbeTrainer) -> None:
        self.trainer = trainer

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.trainer.probe["partition"] = partition_facts(model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        # After an optimizer step, mid-run: every gathered tensor must have been released again.
        self.trainer.probe["partition_after_step"] = partition_facts(model)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        # This rank's slice of a few tensors, to compare with the consolidated checkpoint saved after training.
        params = dict(model.named_parameters())
        self.trainer.probe["local_values"] = {
            name: params[name].ds_tensor.detach().float().flatten().tolist() for name in PARTITION_SAMPLES
        }
        self.trainer.write_probe()


def _probe_trainer_class():
    from drgrpo.algorithm.trainer import DrGRPOTrainer

    class ProbeTrainer(DrGRPOTrainer):
        """`DrGRPOTrainer` that also records what each rank saw (nothing it computes is changed)."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            plugin = self.accelerator.state.deepspeed_plugin
            self.probe = {
                "process_index": self.accelerator.process_index,
                "num_processes": self.accelerator.num_processes,
                "zero_stage": plugin.zero_stage if plugin is not None else None,
                "num_generations": self.num_generations,
                "losses": [],
                "rounds": [],
            }
            self.add_callback(_PartitionCallback(self))
            if self._engine is not None:
                self._record_engine_generations()

        def _record_engine_generations(self) -> None:
            """Per generation call of the CPU engine: whether the model it decodes with is a copy holding exactly the
            trained (gathered) weights, cast to its dtype."""
            engine = self._engine.engine
            generate = engine.generate
            self.probe["engine_calls"] = []

            def recorded(model, *args, **kwargs):
                trained = dict(self.accelerator.unwrap_model(self.model_wrapped).named_parameters())
                same = all(
                    torch.equal(p, trained[n].detach().to(p.dtype)) for n, p in model.named_parameters() if n in trained
                )
                is_copy = all(p is not trained.get(n) for n, p in model.named_parameters())
                self.probe["engine_calls"].append({"copy": is_copy, "equals_trained": same})
                return generate(model, *args, **kwargs)

            engine.generate = recorded

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            if self.model.training:
                # The batch that is trained on (with dynamic sampling not the prompts of `inputs`): decoded from it.
                self.probe["rounds"].append(
                    {
                        "prompts": self.processing_class.batch_decode(output["prompt_ids"], skip_special_tokens=True),
                        "rewards": self._last_rewards_per_func.sum(dim=1).tolist(),
                        "advantages": output["advantages"].tolist(),
                        "refill_prompts": getattr(self._dynamic_sampler, "consumed", None),
                        "rows_held_peak": getattr(self._dynamic_sampler, "rows_held_peak", None),
                        "rows_received_peak": getattr(self._dynamic_sampler, "rows_received_peak", None),
                    }
                )
            return output

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            self.probe["losses"].append(float(loss.detach()))
            return loss

        def write_probe(self) -> None:
            self.probe["log_history"] = self.state.log_history
            if self._engine is not None:
                weights = self._engine.weights
                self.probe["engine"] = {
                    "persistent": weights.persistent,
                    "syncs": weights.syncs,
                    "copy_kept": weights.copy is not None,
                }
            out = Path(os.environ["RANK_PROBE_DIR"])
            out.mkdir(parents=True, exist_ok=True)
            (out / f"rank{self.accelerator.process_index}.json").write_text(json.dumps(self.probe))

    return ProbeTrainer


ProbeTrainer = None  # the class is built lazily so that importing this module for `digit_reward` stays cheap


def install() -> None:
    """Register `probe_digits` (where the run resolves its rewards, `drgrpo.run.before_model`) and swap
    `DrGRPOTrainer` for `ProbeTrainer` in `drgrpo.run.training`."""
    global ProbeTrainer
    import drgrpo.run.before_model as before_model
    import drgrpo.run.training as training

    ProbeTrainer = _probe_trainer_class()
    before_model.get_reward_funcs = with_probe_reward(before_model.get_reward_funcs)
    training.DrGRPOTrainer = ProbeTrainer


def skip_shm_kernel() -> None:
    """Let the CPU collectives go through gloo alone, without DeepSpeed's optional shared-memory kernel.

    DeepSpeed JIT-compiles that kernel (C++, 1-3 minutes on a busy 2-core machine) the first time a machine runs
    ZeRO on CPU. It only speeds up CPU all-reduces; GPU runs use NCCL and never build it, and the collectives' results
    are the same, so the test skips the compile. (`deepspeed.ops.__compatible_ops__` is the dict DeepSpeed consults
    before building an op, and it keeps edits.)
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    skip_shm_kernel()
    install()
    sys.argv = [str(ROOT / "scripts" / "train.py"), *sys.argv[1:]]
    runpy.run_path(sys.argv[0], run_name="__main__")
