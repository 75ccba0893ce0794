"""The warm start of the bias experiment: the task files, the tiny model, and SFT on the sloppy teacher's tails."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from datasets import Dataset
from transformers import AutoTokenizer
from trl import SFTConfig, SFTTrainer

from drgrpo.experiments.bias.task import tail_demonstrations
from drgrpo.experiments.tasks import write_addition_task
from drgrpo.experiments.tiny import build_tiny_model

logger = logging.getLogger(__name__)


def prepare_bias_warm_start(
    output_dir: str | Path,
    *,
    seed: int = 0,
    num_test: int = 200,
    guess_error_rate: float = 0.5,
    max_tail: int = 16,
    sft_examples: int = 2500,
    sft_steps: int = 1000,
    sft_learning_rate: float = 1e-3,
) -> tuple[Path, dict[str, Path]]:
    """(warm-started model folder, {train, test} task files) under `output_dir`; reused when already complete.

    The task is all two-digit additions `10..99` (`drgrpo.experiments.tasks`, carry and no-carry), the model the demo's
    tiny Qwen3, and the SFT recipe the demo's (TRL `SFTTrainer`, completion-only loss, batch 32, constant lr), on
    `drgrpo.experiments.bias.task.tail_demonstrations` instead of bare sums.
    """
    out = Path(output_dir)
    model_dir, data_dir = out / "sft", out / "data"
    data = {"train": data_dir / "train.jsonl", "test": data_dir / "test.jsonl"}
    if (model_dir / "config.json").is_file() and all(p.is_file() for p in data.values()):
        logger.warning("Reusing the warm-started model and data in %s (delete them to rebuild)", out)
        return model_dir, data
    data = write_addition_task(data_dir, min_operand=10, max_operand=99, carry_only=False, num_test=num_test, seed=seed)
    base = build_tiny_model(out / "base", seed=seed)
    rows = [json.loads(line) for line in data["train"].read_text().splitlines()][:sft_examples]
    demos = tail_demonstrations(rows, guess_error_rate, max_tail, seed=seed)
    config = SFTConfig(
        output_dir=str(model_dir),
        max_steps=sft_steps,
        per_device_train_batch_size=32,
        learning_rate=sft_learning_rate,
        lr_scheduler_type="constant",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        save_strategy="no",
        logging_steps=100,
        disable_tqdm=True,
        seed=seed,
    )
    tokenizer = AutoTokenizer.from_pretrained(base)
    dataset = Dataset.from_list(demos)
    trainer = SFTTrainer(model=str(base), args=config, train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    trainer.save_model(str(model_dir))
    tokenizer.save_pretrained(model_dir)
    return model_dir, data
