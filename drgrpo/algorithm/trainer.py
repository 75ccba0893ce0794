"""`DrGRPOTrainer`: TRL's `GRPOTrainer` with its advantages computed by `drgrpo.algorithm.advantages.group_advantages`,
and the per-step diagnostics of `drgrpo.observe.diagnostics` logged next to TRL's own metrics.

Its checkpoints are saved whole or not at all (`StagedCheckpoints`, drgrpo/algorithm/checkpoint_save.py) and a step
whose loss or gradient norm is not finite stops the run before it is saved (`FiniteSteps`, drgrpo/algorithm/
finite_steps.py). Everything else (generation, the clipped surrogate, the `dr_grpo` loss aggregation, vLLM, DeepSpeed)
is TRL's.
"""

from __future__ import annotations

import logging
from collections.abc import MutableSequence, Sequence

import torch
from trl import GRPOTrainer

from drgrpo.algorithm.advantages import (
    combine_rewards,
    floor_truncated_rewards,
    group_advantages,
    lowest_scores,
    truncated_at_group_lowest,
    truncated_completions,
)
from drgrpo.algorithm.checkpoint_save import StagedCheckpoints
from drgrpo.algorithm.code_logs import code_batch_metrics, code_reward_index
from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.console_table import escaped_console_table
from drgrpo.algorithm.dynamic_sampling import DynamicSampler
from drgrpo.algorithm.eos import apply_extra_eos_tokens
from drgrpo.algorithm.family import family_card, recomputes_old_logprobs
from drgrpo.algorithm.finite_steps import FiniteSteps
from drgrpo.algorithm.kl import batch_sequence_kls, kl_penalised_rewards
from drgrpo.algorithm.padding import bucket_micro_batches, grouping_changes_the_loss, micro_batch_layout
from drgrpo.algorithm.rollout.trainer_engine import build_trainer_engine
from drgrpo.algorithm.rollout.trl_rollout import MODEL_IDS, MODEL_TEXT
from drgrpo.algorithm.sampler_correction import (
    CorrectionFigures,
    corrected_advantages,
    engine_ratio_metrics,
    sampler_weights,
    trl_sampling_metrics,
)
from drgrpo.algorithm.shared_prompt import shared_prompt_forward, shares_prompts
from drgrpo.algorithm.step_speed import compact_fused_lm_head
from drgrpo.algorithm.swiglu import saves_less
from drgrpo.observe import diagnostics, metric_names
from drgrpo.observe.failure_warnings import DiagnosticsCallback

logger = logging.getLogger(__name__)


def replace_tail(buffer: MutableSequence[float], values: Sequence[float]) -> None:
    """Overwrite the last `len(values)` entries of `buffer` (a list or a bounded deque) with `values`, in order.

    When the buffer holds fewer entries than `values` (a deque whose `maxlen` is below the batch), its entries are
    the batch's last ones, so they get the last values.
    """
    count = min(len(buffer), len(values))
    offset = len(buffer) - count
    for i, value in enumerate(values[len(values) - count :]):
        buffer[offset + i] = value


class DrGRPOTrainer(FiniteSteps, StagedCheckpoints, GRPOTrainer):
    """GRPO / Dr.GRPO trainer configured by a `DrGRPOConfig`.

    With every added key at its default, the only change to TRL's algorithm is *where the advantage comes from*: one
    pure, tested function (`group_advantages`) whose std convention (`advantage_std_ddof`, `advantage_epsilon`) the
    config chooses, which reproduces TRL's numbers, a group of one (eval with `num_generations_eval: 1`) included:
    its advantage is 0, as in TRL. The completions table of `log_completions` shows the advantages actually trained
    on. The GRPO family's keys act at the same places: the baseline (`advantage_estimator: leave_one_out`), a KL
    folded into the reward before the advantage (`kl_in_reward_coef`, drgrpo/algorithm/kl.py), which groups are trained
    on (`dynamic_sampling`, drgrpo/algorithm/dynamic_sampling.py), and the paper's rule for truncated completions
    (`zero_reward_for_truncated`: the lowest score of every reward function, 0 for the paper's 0/1 accuracy).

    Every step it also logs the `diag/` metrics (pass rate, all-correct / all-wrong group shares, pass@G, lengths of
    correct and incorrect completions, truncation rate, and the pi_theta/pi_old ratio before the first update when
    TRL keeps old log-probs), and, unless `diagnostics_warnings` is off, warns when they match a known failure.
    """

    args: DrGRPOConfig

    def __init__(self, *args, **kwargs) -> None:
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        # TRL builds (and DeepSpeed/FSDP-prepares, or gives a PEFT "ref" adapter) a reference model only when
        # beta != 0. A KL in the reward needs one with beta == 0, so TRL is shown a non-zero beta while it builds it,
        # and the loss's beta is put back to 0 right after: the reference comes from TRL's own code path.
        kl_in_reward_only = isinstance(config, DrGRPOConfig) and config.kl_in_reward_coef > 0 and config.beta == 0.0
        if kl_in_reward_only:
            config.beta = 1.0
        try:
            super().__init__(*args, **kwargs)
        finally:
            if kl_in_reward_only:
                config.beta = 0.0
                self.beta = 0.0
        if not isinstance(self.args, DrGRPOConfig):
            raise TypeError(f"DrGRPOTrainer needs a DrGRPOConfig, got {type(self.args).__name__}.")
        self._last_rewards_per_func: torch.Tensor | None = None
        self._last_sequence_kls: torch.Tensor | None = None  # all-process sum_t KL_t of the last round (KL in reward)
        self._truncated_scores: torch.Tensor | None = None
        self._last_truncated: torch.Tensor | None = None  # all-process flags of the last round (truncation rule)
        if self.args.zero_reward_for_truncated:
            ranges = [getattr(func, "reward_range", None) for func in self.reward_funcs]
            lowest = lowest_scores(self.reward_func_names, ranges, self.reward_weights.tolist())
            self._truncated_scores = torch.tensor(lowest)
        self._correctness_index = diagnostics.resolve_correctness_reward(
            self.reward_func_names, self.args.correctness_reward
        )
        self._ratio_probe: dict | None = None
        self._correction: dict | None = None  # armed in `_compute_loss` for the CPU engine's sampler weights
        self._correction_figures = CorrectionFigures()  # its metrics over one generation batch, logged once it is whole
        # The recipe's extra end-of-answer tokens join TRL's eos list and both generation backends' stop lists.
        apply_extra_eos_tokens(self, self.args.extra_eos_tokens)
        # The CPU engine (drgrpo/algorithm/rollout/engine.py) where the config resolved to it, else TRL's generation;
        # built after the eos list is complete: it stops rows at every end token, the recipe's extra ones included.
        self._engine = build_trainer_engine(self)
        # The loss forward's SwiGLU MLPs keep gate and up only for the backward (drgrpo/algorithm/swiglu.py): here,
        # after TRL has decided on gradient checkpointing (under which there is nothing to save).
        self._lean_mlps = saves_less(self.model) if self.args.recompute_swiglu else 0
        self._dynamic_sampler = DynamicSampler(self) if self.args.dynamic_sampling else None
        if self.args.diagnostics_warnings:
            self.add_callback(DiagnosticsCallback(self.args))
        if self.accelerator.is_main_process:
            logger.info(self.args.algorithm_summary)  # what runs, not a problem: INFO (`--explain` prints it too)
            logger.info(self._engine.describe(self.model) if self._engine is not None else self.args.engine_reason)
            logger.info(family_card(self.args))
            for message in self.args.inactive_advantage_settings:
                logger.warning(message)
            if self._truncated_scores is not None:
                logger.warning(
                    truncated_scores_line(self.reward_func_names, self._truncated_scores, self.reward_weights)
                )

    # Override: keep the (all-process) rewards TRL just computed, so that the advantage override below starts from
    # exactly the numbers TRL logs, without re-running any reward function. With `zero_reward_for_truncated` (the
    # paper's runs) truncated completions are scored 0 here, where their token ids are at hand, before TRL logs and
    # normalises the rewards: each function's lowest score (and so is a missing score of an ended completion), so
    # that truncation can never pay, in TRL's advantage as in ours. With the Python tool (drgrpo/algorithm/rollout/) the
    # rewards read the policy's own text and ids, never the tool's: a printed \boxed{} earns nothing, and a length
    # reward (`overlong`, `cosine_length`, a custom one reading `completion_ids`) counts the policy's tokens only.
    # Truncation is still read from the whole trajectory's ids, as TRL reads it.
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        reward_ids = completion_ids_list
        if inputs and MODEL_TEXT in inputs[0]:
            completions = model_completions(completions, [x[MODEL_TEXT] for x in inputs])
            reward_ids = [x[MODEL_IDS] for x in inputs]
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, reward_ids)
        if (index := code_reward_index(self.reward_func_names)) is not None:  # what the programs did (diag/code/)
            mode = "train" if self.model.training else "eval"
            for name, value in code_batch_metrics(self, index, completions, rewards_per_func).items():
                self._metrics[mode][name].append(value)
        if self._truncated_scores is not None:
            stop_token_ids = [*self.eos_token_ids, self._tokenizer.pad_token_id]
            truncated = truncated_completions(completion_ids_list, stop_token_ids).to(rewards_per_func.device)
            # TRL's rewards are already gathered over processes, in process order: gather the flags the same way.
            self._last_truncated = truncated = self.accelerator.gather(truncated)
            rewards_per_func = floor_truncated_rewards(rewards_per_func, truncated, self._truncated_scores)
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    # Override: on a CPU, the CPU engine generates instead of transformers' `generate` on the trained weights under
    # autocast (drgrpo/algorithm/rollout/engine.py, issue 40): a bf16 copy synced once per optimizer step, its
    # sampled tokens' log-probs returned, which TRL turns into `sampling_per_token_logps` for the correction in
    # `_compute_loss`. Prompts with images, and every other backend, stay TRL's.
    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if self._engine is None or images is not None or multimodal_fields:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images=has_tool_images
            )
        samples = self._engine.generate(self, prompt_ids, [self.max_completion_length] * len(prompt_ids))
        return [sample.ids for sample in samples], [sample.logprobs for sample in samples]

    # Override: the diagnostics are logged here, on the batch that is trained on. With `dynamic_sampling` that batch is
    # assembled from several generation rounds of `_score_generation` (drgrpo/algorithm/dynamic_sampling.py), which
    # logs TRL's figures and ours for the assembled batch itself (its padding groups, advantage 0, included).
    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        try:
            if self._dynamic_sampler is not None and mode == "train":
                return self._dynamic_sampler.fill(inputs, self._score_generation)
            output = self._score_generation(inputs)
            self._log_batch_diagnostics(output, mode, num_generations)
            return output
        finally:
            if self._engine is not None:  # the generation weights are not held through the loss's forward/backward
                self._engine.weights.free()

    # TRL computes advantages inline in its 400-line `_generate_and_score_completions`; we let it run unchanged and
    # then replace its advantages with `group_advantages` on the same rewards. Only the group-wise/no-scaling cases
    # with summed rewards are ours; TRL's 'batch' scaling and 'normalize_then_sum' keep TRL's own advantages
    # (`DrGRPOConfig.trl_advantage_scaling`). A group of one (eval with num_generations_eval=1) gets 0, as in TRL.
    def _score_generation(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        if self.args.trl_advantage_scaling is not None:
            return output
        rewards = combine_rewards(self._last_rewards_per_func, self.reward_weights)
        self._last_sequence_kls = None
        if self.args.kl_in_reward_coef > 0 and mode == "train":
            sequence_kls = batch_sequence_kls(self, output)  # drgrpo/algorithm/kl.py: verl's apply_kl_penalty, summed
            rewards = kl_penalised_rewards(rewards, sequence_kls.to(rewards.device), self.args.kl_in_reward_coef)
            self._metrics[mode][metric_names.KL_IN_REWARD].append(sequence_kls.float().mean().item())
            self._last_sequence_kls = sequence_kls
        if self._truncated_scores is not None:  # after every term of the total: a cut completion is its group's lowest
            rewards = truncated_at_group_lowest(rewards, self._last_truncated.to(rewards.device), num_generations)
        advantages = group_advantages(
            rewards,
            num_generations,
            scale_by_std=self.scale_rewards == "group",
            std_ddof=self.args.advantage_std_ddof,
            epsilon=self.args.advantage_epsilon,
            leave_one_out=self.args.advantage_estimator == "leave_one_out" and num_generations > 1,
        )
        local = output["advantages"].shape[0]
        start = self.accelerator.process_index * local
        output["advantages"] = advantages[start : start + local].to(output["advantages"].device)
        self._log_trained_advantages(advantages)
        return output

    def _log_trained_advantages(self, advantages: torch.Tensor) -> None:
        """Put the advantages trained on into the completions table (`log_completions`).

        TRL has just appended its own all-process advantages for this batch to `self._logs["advantages"]`, before
        our replacement; overwrite exactly those entries, so that the table shows what the loss received.
        """
        replace_tail(self._logs["advantages"], advantages.tolist())

    def _log_batch_diagnostics(self, output: dict, mode: str, num_generations: int) -> None:
        """Append this generation batch's `diag/` metrics (all processes' completions) to TRL's metric buffer."""
        stop_token_ids = [*self.eos_token_ids, self._tokenizer.pad_token_id]
        lengths, truncated = diagnostics.completion_lengths_and_truncation(
            output["completion_ids"], output["completion_mask"], stop_token_ids, self.max_completion_length
        )
        # Gathered in process order, the same order as TRL's all-process `rewards_per_func`.
        lengths, truncated = self.accelerator.gather(lengths), self.accelerator.gather(truncated)
        correctness = totals = None
        if self._correctness_index is not None and self._last_rewards_per_func is not None:
            correctness = self._last_rewards_per_func[:, self._correctness_index]
            totals = combine_rewards(self._last_rewards_per_func, self.reward_weights)  # what decides the signal
        metrics = diagnostics.batch_diagnostics(
            lengths, truncated, correctness, num_generations, self.args.correctness_threshold, totals
        )
        for name, value in metrics.items():
            self._metrics[mode][name].append(value)

    # Override: TRL pads the whole generation batch to its longest completion, shuffles it and splits it into
    # micro-batches of that width. After a new generation, sort each optimizer step's completions by length and cut
    # every micro-batch to its own longest completion (drgrpo/algorithm/padding.py): the same loss, less compute.
    # Neither where TRL recomputed pi_old in its own micro-batches: the loss forward must see the rows and the width
    # pi_old was computed at, or its rounding moves the first update's ratio off 1 (issue 42).
    def _prepare_inputs(self, generation_batch):
        generate_every = self.args.steps_per_generation * self.num_iterations
        fresh = self.model.training and (self._step % generate_every == 0 or self._buffered_inputs is None)
        inputs = super()._prepare_inputs(generation_batch)
        cut, sort = self._micro_batch_layout()
        if not (fresh and cut):
            return inputs
        self._buffered_inputs = bucket_micro_batches(
            self._buffered_inputs, self.args.gradient_accumulation_steps, sort=sort, by_prompt=self._shares_prompts()
        )
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def _micro_batch_layout(self) -> tuple[bool, bool]:
        """(cut, sort) of the micro-batches after a generation (`padding.micro_batch_layout`)."""
        grouping_dependent = grouping_changes_the_loss(
            self.loss_type, self.top_entropy_quantile, self._entropy_bonus_enabled, self.aux_loss_enabled
        )
        return micro_batch_layout(self.args.sort_by_length, recomputes_old_logprobs(self.args), grouping_dependent)

    def _shares_prompts(self) -> bool:
        """Whether the loss forward computes each prompt once (drgrpo/algorithm/shared_prompt.py): the key on,
        micro-batches sorted (then grouped by prompt), no gradient checkpointing (transformers drops the cache of a
        checkpointed layer), text only, no FSDP or DeepSpeed wrapping (their root module must run first), and pi_old
        not recomputed by TRL's own forward (the first update's ratio is then exactly 1: pi_old is this forward's
        detached output)."""
        return bool(
            self.args.share_prompt_forward
            and self._micro_batch_layout()[1]  # sorted: pi_old not recomputed, a grouping-independent loss
            and not self.args.gradient_checkpointing  # a checkpointed layer would not keep the prompt's cache
            and not self._is_vlm
            and not (self.is_fsdp_enabled or self.is_deepspeed_enabled)  # sharded: the root module must run first
        )

    # Override: TRL forms pi_theta / pi_old inside this method without logging it. Before the first optimizer step on
    # a batch of rollouts it must be ~1 (background note, section 2), so on those micro-steps we arm a probe that
    # reads the trainer's log-probs from the loss's own forward pass (no extra forward).
    def _compute_loss(self, model, inputs):
        generate_every = self.args.steps_per_generation * self.num_iterations
        has_reference = "old_per_token_logps" in inputs or "sampling_per_token_logps" in inputs
        if (
            model.training
            and has_reference
            and diagnostics.before_first_update(self._step, generate_every, self.args.gradient_accumulation_steps)
        ):
            mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
            self._ratio_probe = {"inputs": inputs, "mask": mask}
        # The CPU engine's sampler weights (drgrpo/algorithm/sampler_correction.py) need the learner's log-probs,
        # which on-policy exist only inside the loss's own forward: the correction is armed here, computed in
        # `_get_per_token_logps_and_entropies` on that forward's detached output (no extra forward) and carried on
        # the advantages of a copy of `inputs` (TRL reads the advantages after the forward), so a buffered batch
        # that trains again (num_iterations > 1) keeps its own.
        if self._engine is not None and self.args.vllm_importance_sampling_correction and model.training:
            if "sampling_per_token_logps" in inputs:
                inputs = dict(inputs)
                self._correction = {"inputs": inputs, "mask": inputs["completion_mask"] * inputs.get("tool_mask", 1)}
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._ratio_probe = None
            self._correction = None

    # Override: to hand the loss forward's log-probs to the probe armed in `_compute_loss` (the one call that asks
    # for entropies), the result returned unchanged; and on CPU to let TRL's fused LM head score only the completion
    # positions, as it does on CUDA (`compact_lm_head`, drgrpo/algorithm/step_speed.py).
    # And, in the loss forward, to run each prompt once for the completions that share it (`_shared_prompt_logps`).
    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        compact = self.args.compact_lm_head and self.accelerator.device.type == "cpu"
        with compact_fused_lm_head(compact):
            result = self._shared_prompt_logps(*args, **kwargs)
            if result is None:
                result = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._ratio_probe is not None and kwargs.get("compute_entropy"):
            self._log_first_update_ratios(result[0], **self._ratio_probe)
        if self._correction is not None and kwargs.get("compute_entropy"):
            self._apply_sampler_correction(result[0], **self._correction)
        return result

    def _shared_prompt_logps(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, **kwargs):
        """The loss forward's (log-probs, entropies, None) with each prompt computed once, or None where TRL's own
        forward runs: not the loss forward (entropies asked for, one micro-batch), multimodal or MoE inputs, the
        grouping off, or no prompt shared in this micro-batch."""
        flags = ("compute_entropy", "compute_aux_loss")
        multimodal = any(value is not None for key, value in kwargs.items() if key not in flags)
        if not kwargs.get("compute_entropy") or kwargs.get("compute_aux_loss") or multimodal or batch_size is not None:
            return None
        if not self._shares_prompts():
            return None
        if not shares_prompts(model, input_ids, attention_mask, logits_to_keep):
            return None
        with self.accelerator.autocast():
            outputs = shared_prompt_forward(model, input_ids, attention_mask, logits_to_keep)
        return outputs.log_probs[:, -logits_to_keep:], outputs.entropy[:, -logits_to_keep:], None

    def _apply_sampler_correction(self, per_token_logps: torch.Tensor, inputs: dict, mask: torch.Tensor) -> None:
        """Weight this micro-batch's advantages by pi_learner / pi_sampler (TRL's importance-sampling correction,
        `vllm_importance_sampling_*` keys) and log TRL's `sampling/` metrics as TRL does, once per generation batch
        (drgrpo/algorithm/sampler_correction.py). The learner's log-probs are pi_old where TRL recomputed it
        (num_iterations > 1, steps_per_generation > gradient_accumulation_steps), else this forward's, detached:
        on-policy they are the same numbers."""
        learner = inputs.get("old_per_token_logps")
        learner = per_token_logps.detach() if learner is None else learner
        args = self.args
        result = sampler_weights(
            learner,
            inputs["sampling_per_token_logps"],
            mask,
            args.vllm_importance_sampling_mode,
            args.vllm_importance_sampling_clip_min,
            args.vllm_importance_sampling_clip_max,
        )
        inputs["advantages"] = corrected_advantages(inputs["advantages"], result.weights)
        # The generation batch's micro-batches come once each in its first pass (later iterations repeat them with
        # the same weights): their figures are summed, and logged after the last, as TRL logs its figures once.
        place = self._step % (args.steps_per_generation * self.num_iterations)
        if place < args.steps_per_generation:
            self._correction_figures.add(result)
            if place == args.steps_per_generation - 1:
                local = self._correction_figures.take().to(self.accelerator.device).unsqueeze(0)
                ranks = self.accelerator.gather(local).cpu()
                for name, value in {**trl_sampling_metrics(ranks), **engine_ratio_metrics(ranks)}.items():
                    self._metrics["train"][name].append(value)

    def _log_first_update_ratios(self, per_token_logps: torch.Tensor, inputs: dict, mask: torch.Tensor) -> None:
        """Log pi_theta/pi_old (TRL old log-probs) and pi_trainer/pi_sampler (vLLM log-probs) on this micro-batch."""
        pairs = (
            ("old_per_token_logps", metric_names.FIRST_UPDATE_RATIO_MEAN, metric_names.FIRST_UPDATE_MAX_ABS_LOG_RATIO),
            (
                "sampling_per_token_logps",
                metric_names.SAMPLER_TRAINER_RATIO_MEAN,
                metric_names.SAMPLER_TRAINER_MAX_ABS_LOG_RATIO,
            ),
        )
        for key, mean_name, max_name in pairs:
            if key not in inputs:
                continue
            sums = diagnostics.log_ratio_sums(per_token_logps, inputs[key], mask)
            mean_ratio, max_abs_log = diagnostics.ratio_statistics(self.accelerator.gather(sums))
            self._metrics["train"][mean_name].append(mean_ratio)
            self._metrics["train"][max_name].append(max_abs_log)

    # Override: TRL's `log` averages every metric's list of values since the last log. For the maxima among our
    # metrics that would be a mean of per-micro-step maxima; reduce their lists with max first, so they stay maxima.
    # And it prints the completions table (`log_completions`) to the console as the policy wrote it: escape
    # sequences the policy emits would act on the terminal (`escaped_console_table`).
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        diagnostics.reduce_to_max(self._metrics[mode], metric_names.MAXIMUM_METRICS)
        diagnostics.reduce_to_max(self._metrics[mode], metric_names.MINIMUM_METRICS, reduce=min)
        with escaped_console_table():
            super().log(logs, start_time)

    # The refill stream's position is saved with each checkpoint, inside its atomic save (StagedCheckpoints).
    def _write_checkpoint_extras(self, folder):
        if self._dynamic_sampler is not None:
            self._dynamic_sampler.write_state(folder)

    # Override: transformers checks for the run's last step only after training one. A run resumed from a checkpoint
    # at its last step (killed after saving it, before its final save) would train one step past max_steps and save
    # that; stop before the epoch instead, so the rerun only saves the checkpoint's model (drgrpo/run/training.py).
    def _run_epoch(self, *args, **kwargs):
        if 0 < self.state.max_steps <= self.state.global_step:
            self.control.should_training_stop = True
            return None
        return super()._run_epoch(*args, **kwargs)

    # Override: on resume, transformers warns "There were missing keys in the checkpoint model loaded:
    # ['lm_head.weight']" for a model whose output layer *is* its input embeddings (tied, as in SmolLM2): the file
    # stores the shared tensor once, and loading the embeddings loads both. Keys that are such a tie are left out of
    # the warning (said in one INFO line instead); any other missing key still warns.
    def _issue_warnings_after_load(self, load_result):
        tied = [key for key in load_result.missing_keys if _is_tied_to_a_loaded_weight(self.model, key)]
        if tied:
            logger.info(
                "%s: tied to %s, which the checkpoint holds (not missing).",
                ", ".join(tied),
                _tie_sources(self.model, tied),
            )
            load_result = load_result._replace(missing_keys=[k for k in load_result.missing_keys if k not in tied])
        super()._issue_warnings_after_load(load_result)


def _tied_weights(model) -> dict[str, str]:
    """{tied parameter: the parameter it shares}, as transformers records them (`all_tied_weights_keys`)."""
    return dict(getattr(model, "all_tied_weights_keys", None) or {})


def _is_tied_to_a_loaded_weight(model, key: str) -> bool:
    """Whether parameter `key` is the very tensor of another parameter (a tie), so loading that one loaded it."""
    source = _tied_weights(model).get(key)
    try:
        return source is not None and model.get_parameter(key) is model.get_parameter(source)
    except AttributeError:  # a name the model does not have (wrapped models name parameters differently)
        return False


def _tie_sources(model, keys: Sequence[str]) -> str:
    return ", ".join(_tied_weights(model)[key] for key in keys)


def model_completions(completions: list, model_texts: list[str]) -> list:
    """The completions as the rewards see them under the Python tool: each one's text replaced by the policy's own
    (observations left out), in the same shape (a string, or a conversational [{"role": "assistant", ...}])."""
    replaced = []
    for completion, text in zip(completions, model_texts, strict=True):
        if isinstance(completion, list):
            replaced.append([{**completion[-1], "content": text}])
        else:
            replaced.append(text)
    return replaced


def truncated_scores_line(names: list[str], scores: torch.Tensor, weights: torch.Tensor) -> str:
    """The start-up line that says what `zero_reward_for_truncated` gives a truncated completion."""
    parts = ", ".join(f"{name} {score:g}" for name, score in zip(names, scores.tolist(), strict=True))
    total = float((scores * weights.cpu()).sum())
    return (
        f"zero_reward_for_truncated: a completion cut at max_completion_length scores {total:g} ({parts}), the lowest "
        "total these reward functions can give (a missing score counts as its function's lowest), and after a KL in "
        "the reward its group's lowest total, so it never scores more than a completion of its group that ended."
    )
