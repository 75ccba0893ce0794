"""One training run: model + tokenizer, prompt dataset, reward functions, `DrGRPOTrainer`, resume, save."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from transformers import TrainerCallback
from trl import ModelConfig, get_peft_config

from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.rollout.python_tool import build_python_tool
from drgrpo.algorithm.rollout.trl_rollout import make_rollout_func
from drgrpo.algorithm.trainer import DrGRPOTrainer
from drgrpo.core.adapters import record_portable_base, save_merged
from drgrpo.core.checkpoints import find_resumable_checkpoint, newest_complete_checkpoint
from drgrpo.core.disk import disk_full_as_one_line
from drgrpo.core.errors import RecipeError
from drgrpo.core.heap import release_free_memory
from drgrpo.core.models import ADAPTER_CONFIG, MERGED_FOLDER
from drgrpo.core.threads import adapt_torch_threads, thread_line
from drgrpo.observe.step_log import use_step_lines
from drgrpo.run.arguments import ScriptArguments
from drgrpo.run.before_model import before_model, vllm_without_gpu
from drgrpo.run.data_fingerprint import check_resumed_data, data_record, dataset_fingerprint
from drgrpo.run.output_guard import check_output_dir, check_writable, read_record, run_settings, start_run
from drgrpo.run.precision import engaged_summary, engine_summary, keep_float32_master_weights, restore_dtype
from drgrpo.run.resume import finished_run, interrupted_message, start_status, unfinished_run
from drgrpo.run.run_lock import hold_output_dir
from drgrpo.run.stage_precision import trainer_precision_line

logger = logging.getLogger(__name__)


class ThreadCountCallback(TrainerCallback):
    """Re-chooses torch's thread count before every step from the CPU other processes use (drgrpo/core/threads.py)."""

    def on_step_begin(self, args, state, control, **kwargs):
        adapt_torch_threads()


class FreeMemoryCallback(TrainerCallback):
    """Returns the heap a step freed to the system after every optimizer step (drgrpo/core/heap.py): without it the
    RSS of a CPU run crept up by ~0.5 GB over the SmolLM2 demo's 15 steps (fragmentation); ~0.1 s a step."""

    def on_step_end(self, args, state, control, **kwargs):
        release_free_memory()


def train(
    script_args: ScriptArguments,
    training_args: DrGRPOConfig,
    model_args: ModelConfig,
    callbacks: Sequence[TrainerCallback] = (),
) -> DrGRPOTrainer | None:
    """Train the recipe's model and save it (with its tokenizer) to `output_dir`; resume from its last checkpoint.
    None, having changed nothing, when `output_dir` holds this run finished (`finished_run`).
    `callbacks`: extra `TrainerCallback`s (an experiment's time budget, drgrpo/experiments/budget.py)."""
    if not model_args.model_name_or_path:
        raise ValueError("The recipe names no model: set model_name_or_path (hub id or local folder).")
    if (problem := vllm_without_gpu(training_args)) is not None:  # TRL would fail at its first weight sync
        raise RecipeError(problem)
    # Refuse before anything is loaded when output_dir cannot be written (drgrpo/run/output_guard.py).
    check_writable(training_args.output_dir)
    # A full disk anywhere in the run is one line naming output_dir (drgrpo/core/disk.py); `held` keeps the run's lock
    # on output_dir (taken below, before anything is written there) until the run ends.
    with contextlib.ExitStack() as held, disk_full_as_one_line(training_args.output_dir, "writing the run's files"):
        return _train(script_args, training_args, model_args, callbacks, held)


def _train(
    script_args: ScriptArguments,
    training_args: DrGRPOConfig,
    model_args: ModelConfig,
    callbacks: Sequence[TrainerCallback],
    held: contextlib.ExitStack,
) -> DrGRPOTrainer | None:
    """`train`'s body; the output_dir's lock goes into `held`."""
    # An output_dir that holds another run's model is refused before anything loads (drgrpo/run/output_guard.py).
    settings = run_settings(script_args, training_args, model_args)
    overwrite = script_args.overwrite_output_dir
    check_output_dir(training_args.output_dir, settings, overwrite=overwrite)
    # A rerun of a finished run changes nothing (drgrpo/run/resume.py): said in one line, before anything loads.
    if not overwrite and (finished := finished_run(training_args.output_dir, training_args)) is not None:
        logger.warning(finished)
        return None
    # Every check of the recipe before the model loads, the one function --explain runs too (drgrpo/run/
    # before_model.py): rewards, model name and files, context, tokenizer and extra eos tokens, data.
    inputs = before_model(script_args, training_args, model_args)
    model_path, tokenizer = inputs.model_path, inputs.tokenizer
    train_dataset, eval_dataset = inputs.train_dataset, inputs.eval_dataset
    # The data a run resumes on is the data it started on (drgrpo/run/data_fingerprint.py): checked before the model
    # loads, against the fingerprint the run record keeps.
    data = data_record(dataset_fingerprint(train_dataset), inputs.sources, len(train_dataset))
    if not overwrite and newest_complete_checkpoint(training_args.output_dir) is not None:
        check_resumed_data(
            read_record(Path(training_args.output_dir)),
            data,
            training_args.output_dir,
            allow_change=script_args.allow_data_change,
        )
    # One run per output_dir (drgrpo/run/run_lock.py): everything above only read it; the lock is taken before the
    # model loads and the first write, and held until the run ends. Under `accelerate launch` the main process takes
    # it (the other ranks are the same run).
    if int(os.environ.get("RANK", "0")) == 0:
        held.enter_context(hold_output_dir(training_args.output_dir))
    # The Python tool (drgrpo/algorithm/rollout/): its sandbox starts now, so a machine that cannot isolate programs
    # fails before the model loads; TRL's `rollout_func` then runs the multi-turn loop on every rank.
    rollout_func = None
    if training_args.python_tool:
        rollout_func = make_rollout_func(training_args, build_python_tool(training_args, script_args))

    trainer = DrGRPOTrainer(
        model=model_path,
        reward_funcs=inputs.reward_funcs,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        rollout_func=rollout_func,
    )

    use_step_lines(trainer)  # one short line per logged step; the whole dict goes to output_dir/log_history.jsonl
    # Without DeepSpeed (or FSDP's own upcast) nothing keeps float32 copies of bf16 weights: a 1e-6 update would round
    # away. The reference model follows the trained copy's precision, so that the KL before any update is 0.
    master_weights = keep_float32_master_weights(
        trainer.model,
        deepspeed=trainer.is_deepspeed_enabled,
        fsdp=trainer.is_fsdp_enabled,
        mixed_precision=trainer.accelerator.mixed_precision,
        reference=trainer.ref_model,
    )
    if trainer.accelerator.device.type == "cpu":  # the thread count, said at start-up and on every step line
        logger.info(thread_line())
        trainer.add_callback(ThreadCountCallback())
        trainer.add_callback(FreeMemoryCallback())
    for callback in callbacks:
        trainer.add_callback(callback)
    if trainer.accelerator.is_main_process:
        logger.info("engaged: %s", engaged_summary(trainer))  # what ran, not what was asked (gpu_smoke.sh reads it)
        logger.info(trainer_precision_line(trainer))  # training, generation, evaluation; why (bf16: auto)
    unfinished = unfinished_run(training_args.output_dir)  # read before this run's record replaces the last one's
    if trainer.accelerator.is_main_process:
        start_run(training_args.output_dir, settings, run_name=training_args.run_name, overwrite=overwrite, data=data)
    trainer.accelerator.wait_for_everyone()  # no rank looks for checkpoints while the main one deletes stale ones
    # The newest *complete* checkpoint: one half-written by a run killed while saving is skipped with a warning.
    last_checkpoint = None if overwrite else find_resumable_checkpoint(training_args.output_dir)
    if trainer.accelerator.is_main_process:  # what this run starts from, and whether a stopped run can resume
        status = start_status(training_args, last_checkpoint, overwrite=overwrite, unfinished=unfinished)
        (logger.warning if last_checkpoint is not None or unfinished else logger.info)(status)
    try:
        trainer.train(resume_from_checkpoint=last_checkpoint)
    except KeyboardInterrupt:  # Ctrl-C: say what a rerun does (resume from a checkpoint, or start over)
        step = trainer.state.global_step
        raise KeyboardInterrupt(interrupted_message(training_args.output_dir, training_args, step)) from None
    if trainer.accelerator.is_main_process:
        logger.info("engine: %s", engine_summary(trainer))
    if master_weights is not None:
        restore_dtype(trainer.model, master_weights)
    with disk_full_as_one_line(training_args.output_dir, "saving the final model"):
        trainer.save_model(training_args.output_dir)
        trainer.save_state()  # trainer_state.json with every logged step, also when no checkpoint was saved
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(training_args.output_dir)
        _finish_adapter(training_args.output_dir, model_args.model_name_or_path, script_args.save_merged_model)
    return trainer


def _finish_adapter(output_dir: str, model_name: str, merge: bool) -> None:
    """A LoRA run's adapter names its base as the recipe did (portable: not this machine's cache path) and, with
    `save_merged_model`, the merged model is saved to output_dir/merged; `make eval` evaluates either folder."""
    if not (Path(output_dir) / ADAPTER_CONFIG).is_file():
        if merge:
            logger.warning("save_merged_model: this run trains no adapter (use_peft is off); output_dir is the model.")
        return
    record_portable_base(output_dir, model_name)
    if merge:
        merged = save_merged(output_dir, Path(output_dir) / MERGED_FOLDER)
        logger.info("save_merged_model: the base with the adapter merged in is in %s", merged)
