"""What `dr_grpo: true` does with each of TRL's `GRPOConfig` keys: the one table, and the check that reads it.

`dr_grpo: true` means the objective of Liu et al. (arXiv 2503.20783): group-mean advantages without the std, the
token-loss sum of each completion over a constant, no KL in the loss, and pi_theta / pi_old = 1 at the first update
(the background note, sections 2 and 3). Every TRL key is in one of four classes:

- `SET`: the switch sets it (`scale_rewards`, `loss_type`, `beta`) or requires a value of it
  (`multi_objective_aggregation`); another value is a contradiction (`drgrpo.algorithm.config.resolve_dr_grpo`).
- `REFUSED`: a value away from TRL's default changes the on-policy objective (the first update's gradient), so it is
  refused, in one line naming the key, unless the recipe keeps it knowingly with `dr_grpo_allow: [key, ...]`; the
  family card then says "opted in: not the paper's objective". The default value passes (`entropy_coef: 0`).
- `CARD`: acts only off the first update (the ratio away from 1, on later updates or rollouts of an older policy) or
  through the sampler (its mismatch with pi_theta and the importance-sampling weight that corrects it); allowed and
  named on the family card. A few are refused at the values where they would act on the first update too (`delta`
  below 1 caps a ratio of 1), with the same opt-in.
- `ALLOWED`: no effect on the on-policy objective: logging, generation and model infrastructure, hyperparameters of
  the objective itself (the group size, the constant), or keys that act only where `dr_grpo` has turned them off.

`tests/test_dr_grpo_keys.py` reads TRL's own `GRPOConfig` fields, so a key a new TRL adds fails it until it is
classified here. Standard library only; TRL's defaults are read when first needed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

SET, REFUSED, CARD, ALLOWED = "set by dr_grpo", "refused", "card", "allowed"
OPTED_IN = "opted in: not the paper's objective"


@dataclass(frozen=True)
class KeyRule:
    """A key's class, why, and for `REFUSED` / some `CARD` keys the values that change the on-policy objective
    (None: for `REFUSED`, any value other than TRL's default; for the others, none)."""

    kind: str
    why: str
    refuses: Callable[[Any], bool] | None = None


def _below(bound: float) -> Callable[[Any], bool]:
    return lambda value: value is not None and float(value) < bound


def _at_or_below(bound: float) -> Callable[[Any], bool]:
    return lambda value: value is not None and float(value) <= bound


_INFRA = "infrastructure: where and how the model, its weights and the generation run"
_LOG = "logging"
_SAMPLER = (
    "the sampler then draws from a processed distribution while the loss scores pi_theta itself: a sampler mismatch, "
    "named on the card's log-probs line"
)
_IS = (
    "the importance-sampling weight pi_learner / pi_sampler for vLLM's or the CPU engine's samples: it corrects the "
    "sampler's mismatch and leaves pi_theta / pi_old alone; named on the card's log-probs line"
)
_NOT_DR_LOSS = "acts only with loss_type sapo or vespo, which dr_grpo excludes"
_NO_BETA = "acts only on the reference model of the KL in the loss (beta), which dr_grpo turns off"
_ADAPTIVE = "acts only with use_adaptive_entropy, which dr_grpo refuses"

DR_GRPO_KEYS: dict[str, KeyRule] = {
    # --- set or required by the switch ---
    "beta": KeyRule(SET, "dr_grpo sets 0.0: no KL in the loss"),
    "scale_rewards": KeyRule(SET, "dr_grpo sets 'none': no std division of the group advantage"),
    "loss_type": KeyRule(SET, "dr_grpo sets 'dr_grpo': each completion's token-loss sum over a constant"),
    "multi_objective_aggregation": KeyRule(SET, "normalize_then_sum divides every reward by its group std"),
    # --- refused by value: they change the first update's gradient ---
    "top_entropy_quantile": KeyRule(
        REFUSED,
        "below 1.0 only that top quantile of tokens by entropy stays in the policy loss (Wang et al. 2025), the "
        "others get no gradient",
        _below(1.0),
    ),
    "entropy_coef": KeyRule(REFUSED, "a non-zero value adds an entropy bonus, -entropy_coef x mean token entropy"),
    "use_adaptive_entropy": KeyRule(
        REFUSED, "Skywork-OR1's adaptive entropy bonus, applied while the entropy is at or below entropy_target"
    ),
    "mask_truncated_completions": KeyRule(
        REFUSED,
        "completions cut at max_completion_length leave the loss (DAPO's overlong filtering), where the paper gives "
        "them reward 0 in their group (zero_reward_for_truncated: true)",
    ),
    "router_aux_loss_coef": KeyRule(
        REFUSED,
        "a non-zero value adds a Mixture-of-Experts load-balancing loss with that weight (unset, TRL's default, "
        "takes the model's own coefficient; 0 turns it off)",
        lambda value: value is not None and float(value) != 0.0,
    ),
    # --- named on the card: off the first update, or through the sampler ---
    "epsilon": KeyRule(
        CARD,
        "the clip's lower bound 1 - epsilon acts once the ratio leaves 1; below 0 it clips the ratio of 1 at the "
        "first update",
        _below(0.0),
    ),
    "epsilon_high": KeyRule(
        CARD,
        "the clip's upper bound 1 + epsilon_high acts once the ratio leaves 1; below 0 it clips the ratio of 1 at "
        "the first update",
        _below(0.0),
    ),
    "delta": KeyRule(
        CARD,
        "INTELLECT-2's two-sided cap on the ratio acts once the ratio leaves 1; below 1 it caps the ratio of 1 at "
        "the first update",
        _below(1.0),
    ),
    "importance_sampling_level": KeyRule(
        CARD,
        "'sequence' (GSPO) uses each completion's mean log-ratio; at the first update the ratio is 1 and the "
        "dr_grpo loss sums the same gradient per completion, so only later updates differ",
    ),
    "off_policy_mask_threshold": KeyRule(
        CARD,
        "DeepSeek-V3.2's mask drops a negative-advantage completion whose mean KL(sampler || pi_theta) exceeds the "
        "threshold: a sampler's mismatch or a later update; at or below 0 it drops negative-advantage completions at "
        "the first update too, since the sampler's and the learner's log-probs differ by rounding even in float32 "
        "(a positive threshold above the sampler's mismatch, such as 0.5, acts off-policy only)",
        _at_or_below(0.0),
    ),
    "num_iterations": KeyRule(CARD, "updates per rollout: all but the first have a ratio away from 1"),
    "steps_per_generation": KeyRule(CARD, "optimizer steps per rollout: later steps train on an older policy's"),
    "generation_batch_size": KeyRule(CARD, "sets steps_per_generation: later steps train on an older policy's"),
    "use_vllm": KeyRule(CARD, "vLLM samples, with log-probs of its own: the sampler mismatch"),
    "vllm_importance_sampling_correction": KeyRule(CARD, _IS),
    "vllm_importance_sampling_mode": KeyRule(CARD, _IS),
    "vllm_importance_sampling_clip_max": KeyRule(CARD, _IS),
    "vllm_importance_sampling_clip_min": KeyRule(CARD, _IS),
    "vllm_importance_sampling_cap": KeyRule(CARD, _IS + " (TRL's deprecated name of the clip_max)"),
    "top_p": KeyRule(CARD, _SAMPLER),
    "top_k": KeyRule(CARD, _SAMPLER),
    "min_p": KeyRule(CARD, _SAMPLER),
    "repetition_penalty": KeyRule(CARD, _SAMPLER),
    "generation_kwargs": KeyRule(CARD, _SAMPLER),
    "vllm_structured_outputs_regex": KeyRule(CARD, _SAMPLER),
    # --- allowed: no effect on the on-policy objective ---
    "num_generations": KeyRule(ALLOWED, "the group size G, a hyperparameter of the objective (the paper: 8)"),
    "max_completion_length": KeyRule(ALLOWED, "the generation budget, also the loss constant (the paper: 3000)"),
    "temperature": KeyRule(
        ALLOWED,
        "TRL samples and scores the same tempered policy (the loss divides the logits by it too), so the ratio stays "
        "1 (the paper samples at 1.0)",
    ),
    "reward_weights": KeyRule(ALLOWED, "part of the reward, the recipe's choice as reward_funcs are"),
    "max_tool_calling_iterations": KeyRule(ALLOWED, "generation: TRL's tool-calling turns"),
    "chat_template_kwargs": KeyRule(ALLOWED, "the prompt's formatting"),
    "num_generations_eval": KeyRule(ALLOWED, "evaluation only"),
    "disable_dropout": KeyRule(ALLOWED, "a model setting (the paper's Qwen models have no dropout)"),
    "cast_lm_head_to_fp32": KeyRule(ALLOWED, "precision of the LM head"),
    "model_init_kwargs": KeyRule(ALLOWED, _INFRA),
    "trust_remote_code": KeyRule(ALLOWED, _INFRA),
    "ds3_gather_for_generation": KeyRule(ALLOWED, _INFRA),
    "shuffle_dataset": KeyRule(ALLOWED, "the order of the prompts"),
    "pad_to_multiple_of": KeyRule(ALLOWED, _INFRA),
    "cache_implementation": KeyRule(ALLOWED, _INFRA),
    "vllm_mode": KeyRule(ALLOWED, _INFRA + " (the card names it)"),
    "vllm_model_impl": KeyRule(ALLOWED, _INFRA),
    "vllm_enable_sleep_mode": KeyRule(ALLOWED, _INFRA),
    "vllm_server_base_url": KeyRule(ALLOWED, _INFRA),
    "vllm_server_host": KeyRule(ALLOWED, _INFRA),
    "vllm_server_port": KeyRule(ALLOWED, _INFRA),
    "vllm_server_timeout": KeyRule(ALLOWED, _INFRA),
    "vllm_group_port": KeyRule(ALLOWED, _INFRA),
    "vllm_gpu_memory_utilization": KeyRule(ALLOWED, _INFRA),
    "vllm_max_model_length": KeyRule(ALLOWED, _INFRA),
    "vllm_tensor_parallel_size": KeyRule(ALLOWED, _INFRA),
    "use_transformers_continuous_batching": KeyRule(ALLOWED, _INFRA),
    "transformers_continuous_batching_config": KeyRule(ALLOWED, _INFRA),
    "use_transformers_paged": KeyRule(ALLOWED, _INFRA),
    "sapo_temperature_neg": KeyRule(ALLOWED, _NOT_DR_LOSS),
    "sapo_temperature_pos": KeyRule(ALLOWED, _NOT_DR_LOSS),
    "vespo_k_pos": KeyRule(ALLOWED, _NOT_DR_LOSS),
    "vespo_lambda_pos": KeyRule(ALLOWED, _NOT_DR_LOSS),
    "vespo_k_neg": KeyRule(ALLOWED, _NOT_DR_LOSS),
    "vespo_lambda_neg": KeyRule(ALLOWED, _NOT_DR_LOSS),
    "use_bias_correction_kl": KeyRule(ALLOWED, _NO_BETA),
    "sync_ref_model": KeyRule(ALLOWED, _NO_BETA + " (TRL refuses sync_ref_model with beta 0)"),
    "ref_model_mixup_alpha": KeyRule(ALLOWED, _NO_BETA),
    "ref_model_sync_steps": KeyRule(ALLOWED, _NO_BETA),
    "entropy_coef_min": KeyRule(ALLOWED, _ADAPTIVE),
    "entropy_coef_max": KeyRule(ALLOWED, _ADAPTIVE),
    "entropy_coef_delta": KeyRule(ALLOWED, _ADAPTIVE),
    "entropy_target": KeyRule(ALLOWED, _ADAPTIVE),
    "log_completions": KeyRule(ALLOWED, _LOG),
    "log_multimodal": KeyRule(ALLOWED, _LOG),
    "num_completions_to_print": KeyRule(ALLOWED, _LOG),
    "log_unique_prompts": KeyRule(ALLOWED, _LOG),
    "log_completions_hub_repo": KeyRule(ALLOWED, _LOG),
}


@cache
def trl_defaults() -> dict[str, Any]:
    """TRL's own default of each `GRPOConfig` key (not `DrGRPOConfig`'s, which leaves the three switch keys unset)."""
    from trl import GRPOConfig

    return {f.name: f.default for f in dataclasses.fields(GRPOConfig) if f.default is not dataclasses.MISSING}


def refuses(key: str, value: Any) -> bool:
    """Whether `key=value` changes Dr.GRPO's on-policy objective (False for a key that is never refused)."""
    rule = DR_GRPO_KEYS.get(key)
    if rule is None or rule.kind not in (REFUSED, CARD):
        return False
    if rule.refuses is not None:
        return rule.refuses(value)
    return rule.kind == REFUSED and value != trl_defaults().get(key)


def allowable_keys() -> list[str]:
    """The keys `dr_grpo_allow` may name: those refused at some value."""
    return [key for key, rule in DR_GRPO_KEYS.items() if rule.kind == REFUSED or rule.refuses is not None]


def _allow_list(config: Any) -> list[str]:
    allow = getattr(config, "dr_grpo_allow", None) or []
    return [allow] if isinstance(allow, str) else list(allow)


def check_dr_grpo_keys(config: Any) -> None:
    """Raise one line naming every key whose value changes the on-policy objective under `dr_grpo: true` and is not
    in `dr_grpo_allow`; a name in `dr_grpo_allow` that is never refused is an error too (a typo would keep nothing)."""
    allow = _allow_list(config)
    unknown = [key for key in allow if key not in allowable_keys()]
    if unknown:
        raise ValueError(
            f"dr_grpo_allow names {unknown}, which dr_grpo never refuses; it takes only the keys that change "
            f"Dr.GRPO's on-policy objective at some value: {allowable_keys()}."
        )
    if not config.dr_grpo:
        return
    found = [key for key in allowable_keys() if key not in allow and refuses(key, getattr(config, key, None))]
    if not found:
        return
    reasons = "; ".join(f"{key}={getattr(config, key)!r}: {DR_GRPO_KEYS[key].why}" for key in found)
    defaults = ", ".join(f"{key}: {trl_defaults().get(key)!r}" for key in found)
    plural = "s" if len(found) > 1 else ""
    raise ValueError(
        f"{reasons}. That changes Dr.GRPO's on-policy objective, and dr_grpo: true means the paper's. Set it back to "
        f"TRL's default{plural} ({defaults}), or keep it knowingly with dr_grpo_allow: [{', '.join(found)}] (the "
        "family card then names it), or set dr_grpo: false."
    )


def opted_in(config: Any) -> list[str]:
    """`key=value` for each key of `dr_grpo_allow` whose value changes the on-policy objective (under `dr_grpo`)."""
    if not config.dr_grpo:
        return []
    allow = _allow_list(config)
    return [
        f"{key}={getattr(config, key)}"
        for key in allowable_keys()
        if key in allow and refuses(key, getattr(config, key))
    ]


def algorithm_name(config: Any, members: tuple[str, ...] = ()) -> str:
    """The member's name for a resolved config: "Dr.GRPO" only for the paper's objective (`members` are the family
    keys that add to it, "leave-one-out"...; keys kept with `dr_grpo_allow` come last, marked as opted in);
    `loss_type: dr_grpo` without the switch says which half it is."""
    if config.dr_grpo:
        name = "Dr.GRPO"
    elif config.loss_type == "dr_grpo" and (config.scale_rewards != "none" or config.beta):
        name = "GRPO with loss_type dr_grpo (half of Dr.GRPO: add dr_grpo: true)"
    elif config.loss_type == "dr_grpo":
        name = "GRPO with Dr.GRPO's three settings (dr_grpo: true would also refuse keys that change its objective)"
    else:
        name = "GRPO"
    name = " + ".join([name, *members])
    kept = opted_in(config)
    return f"{name} + {', '.join(kept)} ({OPTED_IN})" if kept else name
