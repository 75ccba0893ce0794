"""KL to the reference policy as a penalty *in the reward* (verl `algorithm.use_kl_in_reward`, Oat `kl_penalty_coef`).

TRL puts the KL in the loss (`beta`, TRL's own k3 estimator, no clamping). verl can instead subtract a per-token KL
estimate from the reward before the advantage is computed (`ray_trainer.apply_kl_penalty`): the policy-gradient then
sees `R - coef * sum_t KL_t` as the completion's reward. These are the pure pieces of that path; `DrGRPOTrainer`
gathers the log-probs and calls them.
"""

from __future__ import annotations

from typing import Any

import torch
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import use_adapter

# Our names; verl's "kl" and "mse" are k1 and k2 (drgrpo/recipe/verl.py maps them).
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3", "low_var_kl")


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from the sampled tokens' log-probs, element-wise (same shape in, out).

    Source: verl ``verl/trainer/ppo/core_algos.py::kl_penalty`` (after J. Schulman, "Approximating KL divergence",
    2020, http://joschu.net/blog/kl-approx.html), with ``log r = logprob - ref_logprob``:

    - ``k1`` (verl ``kl``/``k1``): ``log r``. Unbiased, high variance, can be negative per token.
    - ``k2`` (verl ``mse``/``k2``): ``0.5 * (log r)^2``.
    - ``k3`` and ``low_var_kl`` (verl treats the two names as one estimator): with ``d = ref_logprob - logprob``
      clamped to ``[-20, 20]``, ``exp(d) - d - 1``, then clamped to ``[-10, 10]``. Non-negative, low variance.
      (TRL's loss-side k3 for ``beta`` is the same expression without the two clamps.)

    Args:
        logprob: log-probs of the sampled tokens under the policy that generated them (verl: ``old_log_probs``).
        ref_logprob: log-probs of the same tokens under the reference policy.
        kind: one of ``KL_ESTIMATORS``.
    """
    if kind == "k1":
        return logprob - ref_logprob
    if kind == "k2":
        return 0.5 * (logprob - ref_logprob).square()
    if kind in ("k3", "low_var_kl"):
        log_ratio = torch.clamp(ref_logprob - logprob, min=-20.0, max=20.0)
        return torch.clamp(torch.exp(log_ratio) - log_ratio - 1.0, min=-10.0, max=10.0)
    raise ValueError(f"Unknown KL estimator {kind!r}; expected one of {list(KL_ESTIMATORS)}.")


def sequence_kl(per_token_kl: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of a completion's per-token KL over its real tokens, ``(B, T) -> (B,)``.

    verl ``apply_kl_penalty`` subtracts ``coef * KL_t`` from every token's reward and GRPO's outcome advantage
    (``compute_grpo_outcome_advantage``) sums the token rewards, so the sequence sees the sum, not the mean.
    """
    return (per_token_kl * mask.to(per_token_kl.dtype)).sum(dim=-1)


def kl_penalised_rewards(rewards: torch.Tensor, sequence_kls: torch.Tensor, coef: float) -> torch.Tensor:
    """``R - coef * sum_t KL_t`` per completion (verl: token rewards ``scores - beta * kld``, summed).

    An unscored completion (NaN reward) stays NaN, so the group advantage still leaves it out.
    """
    return rewards - coef * sequence_kls.to(rewards.dtype)


def batch_sequence_kls(trainer: Any, output: dict) -> torch.Tensor:
    """All processes' ``sum_t KL_t`` for one generation batch, in TRL's all-process order, ``(N,)``.

    The policy side is the log-prob of the sampling policy as the trainer computes it (TRL's ``old_per_token_logps``
    when it kept them, else one no-grad forward; verl uses ``old_log_prob`` the same way). The reference side is
    TRL's ``ref_per_token_logps`` when ``beta != 0`` computed them, else one no-grad forward of ``trainer.ref_model``
    (or of the PEFT model with its adapter off, as TRL does).
    """
    if "pixel_values" in output:
        raise ValueError("kl_in_reward_coef does not support multimodal inputs yet; set kl_in_reward_coef: 0.")
    input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    logits_to_keep = output["completion_ids"].size(1)
    batch_size = trainer.args.per_device_train_batch_size

    def logps(model: torch.nn.Module) -> torch.Tensor:
        return trainer._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size
        )[0]

    with torch.no_grad(), disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
        policy = output.get("old_per_token_logps")
        if policy is None:
            policy = logps(trainer.model)
        reference = output.get("ref_per_token_logps")
        if reference is None and trainer.ref_model is not None:
            reference = logps(trainer.ref_model)
        elif reference is None:
            unwrapped = trainer.accelerator.unwrap_model(trainer.model)
            with use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None):
                reference = logps(trainer.model)
    mask = output["completion_mask"] * output.get("tool_mask", 1)
    per_token = kl_penalty(policy.float(), reference.float(), trainer.args.kl_estimator)
    return trainer.accelerator.gather(sequence_kl(per_token, mask))
