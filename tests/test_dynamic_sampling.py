"""DAPO dynamic sampling: the pure pieces by hand, and tiny-model runs that read the batch that is trained on (no
all-equal group, unchanged micro-batch size and dr_grpo normaliser, gradient accumulation with steps_per_generation)
and resume with the refill stream where it stopped."""

from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path

import pytest
import torch
from datasets import Dataset

from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.dynamic_sampling import (
    STATE_FILE,
    concat_rows,
    dropped_outcomes,
    informative_groups,
    stream_indices,
)

NAN = math.nan


def test_informative_groups_by_hand():
    rewards = torch.tensor([1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, NAN, 1, 1, 0.5, NAN, NAN, NAN, 0.2, NAN, 0.3, NAN])
    #                       mixed      | all wrong | all right | equal scored | one scored   | two differ
    assert informative_groups(rewards, 4).tolist() == [True, False, False, False, False, True]


def test_dropped_outcomes_split_correct_and_wrong():
    correctness = torch.tensor([1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5])
    informative = informative_groups(correctness, 4)
    assert informative.tolist() == [True, False, False, False]
    # all-correct: group 3; all-wrong: group 2 and the all-0.5 group (equal but not correct at threshold 1).
    assert dropped_outcomes(correctness, informative, 4, 1.0) == (1, 2)
    assert dropped_outcomes(correctness, informative, 4, 0.5) == (2, 1)


def test_rows_are_padded_like_trl():
    masks = concat_rows([{"prompt_mask": torch.tensor([[7, 8]])}, {"prompt_mask": torch.ones(1, 4).long()}], 99)
    assert masks["prompt_mask"][0].tolist() == [0, 0, 7, 8]  # a mask pads with 0, not the pad token (was pad_rows)
    merged = concat_rows(
        [
            {
                "prompt_ids": torch.tensor([[5, 6, 7]]),
                "completion_ids": torch.tensor([[1]]),
                "advantages": torch.ones(1),
            },
            {"prompt_ids": torch.tensor([[9]]), "completion_ids": torch.tensor([[2, 3]]), "advantages": torch.zeros(1)},
        ],
        pad_token_id=99,
    )
    assert merged["prompt_ids"].tolist() == [[5, 6, 7], [99, 99, 9]]  # prompts left-padded
    assert merged["completion_ids"].tolist() == [[1, 99], [2, 3]]  # completions right-padded
    assert merged["advantages"].tolist() == [1.0, 0.0]


def test_stream_walks_seeded_permutations_across_epochs():
    first = torch.randperm(5, generator=torch.Generator().manual_seed(7)).tolist()
    second = torch.randperm(5, generator=torch.Generator().manual_seed(8)).tolist()
    assert stream_indices(5, 7, 0, 5) == first
    assert stream_indices(5, 7, 3, 4) == first[3:] + second[:2]  # crosses into the next epoch's permutation
    assert stream_indices(5, 7, 3, 4) == stream_indices(5, 7, 3, 4)  # same on every rank


def test_settings_are_checked(tmp_path):
    with pytest.raises(ValueError, match="dynamic_sampling_max_rounds: 0 is not allowed"):
        DrGRPOConfig(output_dir=str(tmp_path), use_cpu=True, dynamic_sampling=True, dynamic_sampling_max_rounds=0)
    with pytest.raises(ValueError, match="dynamic_sampling_exhausted='stop' is not one of"):
        DrGRPOConfig(output_dir=str(tmp_path), use_cpu=True, dynamic_sampling=True, dynamic_sampling_exhausted="stop")
    with pytest.raises(ValueError, match="dynamic_sampling works on group advantages"):
        DrGRPOConfig(output_dir=str(tmp_path), use_cpu=True, dynamic_sampling=True, scale_rewards="batch")


# --- tiny-model runs --------------------------------------------------------------------------------------------------
def half_constant(prompts, completions, **kwargs):
    """0 for every completion of a prompt whose first operand is even (an all-equal group, always dropped); the
    share of digits otherwise (a group with spread)."""
    scores = []
    for prompt, completion in zip(prompts, completions, strict=True):
        if int(prompt.split("+")[0]) % 2 == 0:
            scores.append(0.0)
        else:
            scores.append(sum(ch.isdigit() for ch in completion) / len(completion) if completion else 0.0)
    return scores


GROUP, PER_DEVICE, ACCUMULATION, STEPS_PER_GENERATION, MAX_LEN = 4, 8, 2, 4, 6


def make_trainer(tiny_model_path, addition_data, output_dir, *, max_steps=4, **config):
    from drgrpo.algorithm.trainer import DrGRPOTrainer

    rows = [json.loads(line) for line in open(addition_data["train"])][:64]
    dataset = Dataset.from_list([{"prompt": r["question"]} for r in rows])
    args = DrGRPOConfig(
        output_dir=str(output_dir), use_cpu=True, bf16=False, report_to="none", gradient_checkpointing=False,
        max_steps=max_steps, per_device_train_batch_size=PER_DEVICE, gradient_accumulation_steps=ACCUMULATION,
        steps_per_generation=STEPS_PER_GENERATION, num_generations=GROUP, max_completion_length=MAX_LEN,
        learning_rate=1e-3, seed=5, logging_steps=1, dynamic_sampling=True, diagnostics_warnings=False,
        **{"dynamic_sampling_max_rounds": 8, "dr_grpo": True, **config},
    )  # fmt: skip
    trainer = DrGRPOTrainer(model=str(tiny_model_path), reward_funcs=[half_constant], args=args, train_dataset=dataset)
    trained, losses = [], []
    generate, compute = trainer._generate_and_score_completions, trainer._compute_loss

    def record_generation(inputs):
        output = generate(inputs)
        prompts = trainer.processing_class.batch_decode(output["prompt_ids"], skip_special_tokens=True)
        trained.append({"prompts": prompts, "rewards": trainer._last_rewards_per_func[:, 0].tolist(), "consumed": None})
        trained[-1]["consumed"] = trainer._dynamic_sampler.consumed
        trained[-1]["output"] = {k: v.clone() for k, v in output.items() if torch.is_tensor(v)}
        return output

    def record_loss(model, inputs):
        loss = compute(model, inputs)
        losses.append({"inputs": {k: v for k, v in inputs.items() if torch.is_tensor(v)}, "loss": loss.detach()})
        return loss

    trainer._generate_and_score_completions = record_generation
    trainer._compute_loss = record_loss
    return trainer, trained, losses


@pytest.mark.slow
def test_trains_only_on_informative_groups_with_an_unchanged_batch(tiny_model_path, addition_data, tmp_path):
    trainer, trained, losses = make_trainer(tiny_model_path, addition_data, tmp_path)
    trainer.train()
    generation_rows = PER_DEVICE * STEPS_PER_GENERATION  # one process: the generation batch TRL hands over
    # 4 optimizer steps x 2 micro-steps = 8 micro-batches = 2 generation rounds of 4 micro-batches.
    assert len(trained) == 2 and len(losses) == 4 * ACCUMULATION
    for batch in trained:
        assert len(batch["prompts"]) == len(batch["rewards"]) == generation_rows
        for start in range(0, generation_rows, GROUP):
            group = slice(start, start + GROUP)
            assert len(set(batch["prompts"][group])) == 1, "groups stay contiguous by prompt"
            assert len(set(batch["rewards"][group])) > 1, f"trained on an all-equal group: {batch['rewards'][group]}"
            assert int(batch["prompts"][start].split("+")[0]) % 2 == 1  # the even-operand prompts were all dropped
    assert trained[-1]["consumed"] > 0, "half the prompts are dropped every round: refill prompts must have been used"

    for record in losses:
        inputs = record["inputs"]
        # The micro-batch keeps per_device_train_batch_size rows, so dr_grpo divides by B x max_completion_length
        # with B = 8, as without dynamic sampling.
        assert inputs["completion_ids"].shape[0] == PER_DEVICE
    # On-policy (each generation batch is used once, and these micro-steps precede its updates): the first micro-step
    # of a generation has ratio 1, so its loss is -sum_i A_i |o_i| / (B x max_completion_length) / accumulation.
    for index in (0, STEPS_PER_GENERATION):
        inputs, loss = losses[index]["inputs"], losses[index]["loss"]
        tokens = inputs["completion_mask"].sum(dim=1).float()
        expected = -(inputs["advantages"] * tokens).sum() / (PER_DEVICE * MAX_LEN) / ACCUMULATION
        assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
        assert expected.abs().item() > 0

    logs = [entry for entry in trainer.state.log_history if "dynamic_sampling/rounds" in entry]
    assert logs and all(entry["dynamic_sampling/groups_padded"] == 0 for entry in logs)
    assert any(entry["dynamic_sampling/groups_dropped_all_wrong"] > 0 for entry in logs)
    assert all(entry["dynamic_sampling/prompts_consumed"] >= generation_rows / GROUP for entry in logs)
    # diag/ describes the trained batch: no all-equal group in it.
    assert all(entry.get("diag/groups_all_wrong", 0) == 0 for entry in logs)


@pytest.mark.slow
def test_batch_is_filled_when_rounds_run_out(tiny_model_path, addition_data, tmp_path, caplog):
    trainer, trained, _ = make_trainer(
        tiny_model_path, addition_data, tmp_path, max_steps=4, dynamic_sampling_max_rounds=1
    )
    with caplog.at_level(logging.WARNING, logger="drgrpo.algorithm.dynamic_sampling"):
        trainer.train()
    warnings = [r for r in caplog.records if "dynamic_sampling: 1 rounds gave" in r.getMessage()]
    assert len(warnings) == 1, "warned once, not every step"
    batch = trained[0]
    assert len(batch["prompts"]) == PER_DEVICE * STEPS_PER_GENERATION  # full batch, part of it all-equal groups
    equal = [len(set(batch["rewards"][s : s + GROUP])) == 1 for s in range(0, len(batch["rewards"]), GROUP)]
    assert any(equal) and equal == sorted(equal), "informative groups first, fill-up groups after"
    logs = [entry for entry in trainer.state.log_history if "dynamic_sampling/groups_padded" in entry]
    assert logs[0]["dynamic_sampling/groups_padded"] == sum(equal)
    assert logs[0]["dynamic_sampling/rounds"] == 1 and trained[-1]["consumed"] == 0
    assert len(trained) == 2 and all(entry["dynamic_sampling/groups_padded"] > 0 for entry in logs)


@pytest.mark.slow
def test_resume_continues_the_refill_stream(tiny_model_path, addition_data, tmp_path):
    first_dir = tmp_path / "first"
    trainer, trained, _ = make_trainer(
        tiny_model_path, addition_data, first_dir, max_steps=4, save_strategy="steps", save_steps=2
    )
    trainer.train()
    saved = json.loads((first_dir / "checkpoint-2" / STATE_FILE).read_text())["consumed"]
    assert saved == trained[0]["consumed"] > 0  # steps 1-2 are the first generation batch

    # A second run that starts from checkpoint-2 (as after a kill): the stream continues from the saved position.
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(first_dir / "checkpoint-2", resumed_dir / "checkpoint-2")
    resumed, resumed_trained, _ = make_trainer(
        tiny_model_path, addition_data, resumed_dir, max_steps=4, save_strategy="steps", save_steps=2
    )
    resumed.train(resume_from_checkpoint=str(resumed_dir / "checkpoint-2"))
    assert len(resumed_trained) == 1 and resumed.state.global_step == 4
    assert resumed_trained[0]["consumed"] > saved  # it drew new prompts after the saved position, not from 0
    assert resumed_trained[0]["consumed"] == trained[1]["consumed"]
    assert resumed_trained[0]["prompts"] == trained[1]["prompts"]


def stream_callback(consumed: int, is_main_process: bool):
    """The refill stream's resume callback over a stand-in sampler (only its position and process role matter)."""
    from types import SimpleNamespace

    from drgrpo.algorithm.dynamic_sampling import _ResumeStreamPosition

    accelerator = SimpleNamespace(is_main_process=is_main_process)
    return _ResumeStreamPosition(SimpleNamespace(consumed=consumed, trainer=SimpleNamespace(accelerator=accelerator)))


def test_resume_position_is_read_on_the_main_process_and_broadcast(tmp_path, monkeypatch):
    """Multi-node without shared storage: only the main process's disk holds dynamic_sampling.json (written with the
    checkpoint there), so every rank takes the main process's value instead of reading its own disk."""
    from types import SimpleNamespace

    import drgrpo.algorithm.dynamic_sampling as dynamic_sampling

    args, state = SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace(global_step=2)
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / STATE_FILE).write_text(json.dumps({"consumed": 17}))
    sent = []

    def broadcast(objects, from_process=0):  # torch.distributed's broadcast_object_list, process 0 sending
        if not sent:
            sent.extend(objects)
        objects[:] = sent
        return objects

    monkeypatch.setattr(dynamic_sampling, "broadcast_object_list", broadcast, raising=False)
    main = stream_callback(0, is_main_process=True)
    main.on_train_begin(args, state, None)
    other_disk = tmp_path / "other-node"  # a rank whose disk has no checkpoint folder
    other = stream_callback(0, is_main_process=False)
    other.on_train_begin(SimpleNamespace(output_dir=str(other_disk)), state, None)
    assert main.sampler.consumed == other.sampler.consumed == 17


def test_the_stream_position_is_in_the_checkpoint_when_it_appears(
    tiny_model_path, addition_data, tmp_path, monkeypatch
):
    """A checkpoint appears in output_dir whole, in one rename (drgrpo/algorithm/checkpoint_save.py): the stream's file
    must be in the staged folder by then, beside its trainer_state.json, or a kill right after the rename would resume
    with the stream restarted."""
    import drgrpo.algorithm.checkpoint_save as checkpoint_save

    seen = []
    publish = checkpoint_save.publish_folder

    def checked_publish(staged, final):
        seen.append(
            (Path(final).name, (Path(staged) / STATE_FILE).is_file(), (Path(staged) / "trainer_state.json").is_file())
        )
        return publish(staged, final)

    monkeypatch.setattr(checkpoint_save, "publish_folder", checked_publish)
    trainer, trained, _ = make_trainer(
        tiny_model_path, addition_data, tmp_path, max_steps=4, save_strategy="steps", save_steps=2
    )
    trainer.train()
    assert seen == [("checkpoint-2", True, True), ("checkpoint-4", True, True)]
    saved = json.loads((tmp_path / "checkpoint-2" / STATE_FILE).read_text())["consumed"]
    assert saved == trained[0]["consumed"] > 0
