"""The CPU engine's row seeds across a resume (issue 53): generation calls are counted per (mode, step), so an
evaluation never moves training's samples, and a run with evaluation, stopped at a checkpoint and resumed, samples
token for token what the uninterrupted run sampled."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from datasets import Dataset
from transformers import TrainerCallback

from drgrpo.algorithm.rollout.sampler import row_seed
from drgrpo.algorithm.rollout.trainer_engine import TrainerEngine


def counting_engine(seed: int = 5) -> TrainerEngine:
    """A `TrainerEngine` with only its seed counters (no model): `_seeds` is all that is called."""
    engine = TrainerEngine.__new__(TrainerEngine)
    engine.seed, engine.calls = seed, {}
    return engine


def stand_in_trainer(step: int, training: bool):
    return SimpleNamespace(
        state=SimpleNamespace(global_step=step),
        model=SimpleNamespace(training=training),
        accelerator=SimpleNamespace(process_index=0),
    )


def test_an_evaluation_between_two_training_calls_leaves_their_seeds_alone():
    plain, evaluated = counting_engine(), counting_engine()
    for engine, evaluations in ((plain, 0), (evaluated, 2)):
        engine._seeds(stand_in_trainer(3, training=True), 2, None)
        for _ in range(evaluations):  # transformers evaluates (then saves) at the end of a step
            engine._seeds(stand_in_trainer(4, training=False), 2, None)
    # The next training call at step 4 is its first there, evaluation or not; a second one is call 1.
    for engine in (plain, evaluated):
        assert engine._seeds(stand_in_trainer(4, training=True), 2, None) == [
            row_seed(5, "train", 4, 0, 0, r) for r in range(2)
        ]
        assert engine._seeds(stand_in_trainer(4, training=True), 1, None) == [row_seed(5, "train", 4, 1, 0, 0)]
    # Evaluation counts its own calls: the two above were calls 0 and 1 at step 4.
    assert evaluated._seeds(stand_in_trainer(4, training=False), 1, None) == [row_seed(5, "eval", 4, 2, 0, 0)]


class StopAfterSaving(TrainerCallback):
    """Stop the run right after it saved checkpoint-`step` (as a kill after the save would)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True
        return control


def run(tiny_model_path, addition_data, output_dir, resume_from=None, stop_at=None) -> list[tuple]:
    """Train the tiny model for 3 steps with an evaluation after every step and a checkpoint after every step; the
    training generations, as (optimizer step, rows' ids)."""
    from rank_probe import digit_reward

    from drgrpo.algorithm.config import DrGRPOConfig
    from drgrpo.algorithm.trainer import DrGRPOTrainer

    def rows(split: str, count: int) -> Dataset:
        lines = [json.loads(line) for line in open(addition_data[split])][:count]
        return Dataset.from_list([{"prompt": r["question"], "answer": r["answer"]} for r in lines])

    config = DrGRPOConfig(
        output_dir=str(output_dir), use_cpu=True, bf16=False, report_to="none", max_steps=3, logging_steps=1,
        save_strategy="steps", save_steps=1, eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=4,
        per_device_train_batch_size=4, gradient_accumulation_steps=2, num_generations=4, max_completion_length=6,
        temperature=1.0, seed=5, dr_grpo=True, learning_rate=5e-2,
        vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=3.0,
    )  # fmt: skip
    trainer = DrGRPOTrainer(
        model=str(tiny_model_path), reward_funcs=[digit_reward], args=config,
        train_dataset=rows("train", 32), eval_dataset=rows("test", 4),
        callbacks=[StopAfterSaving(stop_at)] if stop_at else None,
    )  # fmt: skip
    generated = []
    generate = trainer._engine.engine.generate

    def record(model, prompts, seeds, budgets, stop=None):
        samples = generate(model, prompts, seeds, budgets, stop)
        if trainer.model.training:
            generated.append((trainer.state.global_step, [tuple(p) for p in prompts], [s.ids for s in samples]))
        return samples

    trainer._engine.engine.generate = record
    trainer.train(resume_from_checkpoint=resume_from)
    return generated


@pytest.mark.slow
def test_a_run_with_evaluation_stopped_and_resumed_samples_what_the_uninterrupted_run_sampled(
    tiny_model_path, addition_data, tmp_path
):
    whole = run(tiny_model_path, addition_data, tmp_path / "whole")
    assert [step for step, _, _ in whole] == [0, 1, 2]
    first = run(tiny_model_path, addition_data, tmp_path / "stopped", stop_at=2)
    assert first == whole[:2]  # the same run up to the checkpoint
    resumed = run(
        tiny_model_path, addition_data, tmp_path / "stopped", resume_from=str(tmp_path / "stopped" / "checkpoint-2")
    )
    assert [step for step, _, _ in resumed] == [2]
    assert resumed[0][1] == whole[2][1]  # the same prompts
    assert resumed[0][2] == whole[2][2]  # and, token for token, the same completions
    assert len({tuple(ids) for ids in whole[2][2]}) > 1  # they really were sampled
