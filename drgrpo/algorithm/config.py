"""The trainer's configuration: `DrGRPOConfig`, TRL's `GRPOConfig` plus the Dr.GRPO switch and the family keys.

The Dr.GRPO switch is resolved here, once, so that the trainer and everything after it only sees TRL's plain
settings (`scale_rewards`, `loss_type`, `beta`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch
from transformers.utils import is_torch_bf16_gpu_available
from trl import GRPOConfig

from drgrpo.algorithm.dr_grpo_keys import algorithm_name, check_dr_grpo_keys
from drgrpo.algorithm.eos import EosArguments
from drgrpo.algorithm.family import FamilyArguments
from drgrpo.algorithm.rollout.arguments import EngineArguments, ToolArguments, resolve_generation_engine
from drgrpo.algorithm.sampler_correction import SamplerCorrectionArguments
from drgrpo.algorithm.sampling_keys import GENERATION_KWARGS, SAMPLING_KEYS, check_sampling_values
from drgrpo.algorithm.schedule_keys import SCHEDULE_KEYS, check_schedule_values
from drgrpo.algorithm.step_speed import StepSpeedArguments
from drgrpo.core.cpu_bf16 import resolve_bf16, this_cpu_bf16
from drgrpo.core.deepspeed_cpu import skip_shm_comm_op
from drgrpo.observe.diagnostics import DiagnosticsArguments

# What `dr_grpo: true` means in TRL's terms (Liu et al., arXiv 2503.20783; background note, section 3).
DR_GRPO_SETTINGS: dict[str, Any] = {"scale_rewards": "none", "loss_type": "dr_grpo", "beta": 0.0}
# TRL 1.16's defaults for the same three keys, used when `dr_grpo` is off and the recipe leaves them unset.
TRL_DEFAULTS: dict[str, Any] = {"scale_rewards": "group", "loss_type": "dapo", "beta": 0.0}

_SCALE_REWARDS_ALIASES = {True: "group", False: "none", "true": "group", "false": "none"}


@dataclass
class DrGRPOConfig(
    FamilyArguments,
    DiagnosticsArguments,
    EosArguments,
    StepSpeedArguments,
    EngineArguments,
    SamplerCorrectionArguments,
    ToolArguments,
    GRPOConfig,
):
    """TRL's `GRPOConfig` plus one switch, `dr_grpo`, and the std convention of the group advantage.

    `dr_grpo: true` sets `scale_rewards="none"` (no std division of group advantages), `loss_type="dr_grpo"`
    (each completion's token-loss sum divided by the constant `max_completion_length`, averaged over completions)
    and `beta=0.0` (no KL term, so no reference model). Setting any of the three to another value as well is an
    error rather than a silent override: a half-applied Dr.GRPO (e.g. the length-unbiased loss with std-scaled
    advantages) is a different algorithm. So is a TRL key whose value changes the on-policy objective
    (`entropy_coef: 0.01`, `top_entropy_quantile: 0.2`, ...): refused unless `dr_grpo_allow` names it
    (`drgrpo.algorithm.dr_grpo_keys` classifies every TRL key).

    `scale_rewards`, `loss_type` and `beta` default to `None` here, meaning "not set by the recipe"; after
    `__post_init__` they always hold the resolved values (TRL's defaults when `dr_grpo` is off).

    `advantage_std_ddof` and `advantage_epsilon` select the std convention used when advantages *are* scaled
    (GRPO): TRL's (1, 1e-4, the defaults), verl's (1, 1e-6) or the population std of the reference table (0, 1e-8).

    The diagnostics settings (`correctness_reward`, the warning thresholds and their off switch) are documented in
    `drgrpo.observe.diagnostics.DiagnosticsArguments`; `extra_eos_tokens` in `drgrpo.algorithm.eos.EosArguments`; the
    GRPO-family keys (`advantage_estimator`, `kl_in_reward_coef`, `kl_estimator`, `dynamic_sampling`) in
    `drgrpo.algorithm.family.FamilyArguments`; the Python tool's keys (`python_tool`, `tool_*`) in
    `drgrpo.algorithm.rollout.arguments.ToolArguments`.
    `dr_grpo: true` keeps `beta: 0` (no KL in the loss) but allows a KL in the reward (`kl_in_reward_coef`).
    """

    dr_grpo: bool = field(
        default=False,
        metadata={
            "help": "Use Dr.GRPO (Liu et al. 2025): scale_rewards='none', loss_type='dr_grpo', beta=0.0. Setting one "
            "of those three to a different value as well is an error. A KL in the reward (kl_in_reward_coef) is "
            "still allowed. Keys that change its on-policy objective (entropy_coef, top_entropy_quantile, "
            "mask_truncated_completions...) are refused unless listed in dr_grpo_allow."
        },
    )
    scale_rewards: str | None = field(
        default=None,
        metadata={
            "help": "How group advantages are scaled: 'group' (divide by the group's std, GRPO), 'batch' or 'none' "
            "(Dr.GRPO). Unset: 'none' with dr_grpo, else TRL's default 'group'."
        },
    )
    loss_type: str | None = field(
        default=None,
        metadata={
            "help": "How token losses are aggregated (TRL loss_type: grpo, dapo, bnpo, dr_grpo, ...). Unset: "
            "'dr_grpo' with dr_grpo, else TRL's default 'dapo'."
        },
    )
    beta: float | None = field(
        default=None,
        metadata={"help": "KL coefficient. Unset: 0.0 (no reference model). dr_grpo requires 0.0."},
    )
    dr_grpo_allow: list[str] | None = field(
        default=None,
        metadata={
            "help": "TRL keys that dr_grpo: true would refuse because their value changes Dr.GRPO's on-policy "
            "objective, kept knowingly (e.g. [entropy_coef, mask_truncated_completions]); the family card then says "
            "'opted in: not the paper's objective'. Only such keys may be named (drgrpo/algorithm/dr_grpo_keys.py); "
            "without dr_grpo it changes nothing."
        },
    )
    advantage_std_ddof: int = field(
        default=1,
        metadata={
            "help": "Delta degrees of freedom of the group std when advantages are std-scaled: 1 (sample std; TRL, "
            "verl) or 0 (population std)."
        },
    )
    advantage_epsilon: float = field(
        default=1e-4,
        metadata={"help": "Added to the group std before dividing: 1e-4 (TRL), 1e-6 (verl), 1e-8 (reference table)."},
    )

    zero_reward_for_truncated: bool = field(
        default=False,
        metadata={
            "help": "Give a completion cut at max_completion_length (no end-of-answer token) the lowest score of "
            "every reward function (each declares its reward_range; a missing score of an ended completion counts as "
            "that lowest too) and, after a KL in the reward, its group's lowest total, so it never scores more than "
            "one of its group that ended: 0 with the Dr.GRPO paper's 0/1 accuracy alone, its rule; with DAPO's "
            "overlong penalty that penalty's -1 stays. It stays in its group, unlike TRL's "
            "mask_truncated_completions, which leaves it out of the loss."
        },
    )

    def __post_init__(self) -> None:
        if isinstance(self.scale_rewards, (bool, str)):
            key = self.scale_rewards.lower() if isinstance(self.scale_rewards, str) else self.scale_rewards
            self.scale_rewards = _SCALE_REWARDS_ALIASES.get(key, self.scale_rewards)
        if self.beta is not None:
            self.beta = float(self.beta)
        if self.mask_truncated_completions and self.zero_reward_for_truncated:
            raise ValueError(
                "mask_truncated_completions: true and zero_reward_for_truncated: true are two rules for one case, a "
                "completion cut at max_completion_length: TRL's leaves it out of the loss, ours scores it lowest in "
                "its group (the Dr.GRPO paper's reward 0). Pick one and set the other to false."
            )
        resolve_dr_grpo(self)
        # Unset or `auto` becomes a bool here (TRL would turn unset into True, emulated and slow on a CPU without bf16,
        # and refused by transformers on a machine without a bf16 GPU unless use_cpu is set); `bf16_reason` says why.
        self.bf16, self.bf16_reason = resolve_bf16(
            self.bf16,
            use_cpu=self.use_cpu,
            fp16=self.fp16,
            gpu_bf16=not self.use_cpu and is_torch_bf16_gpu_available(),
            cpu=this_cpu_bf16(),
        )
        # Zero, negative or fractional batch and schedule keys (drgrpo/algorithm/schedule_keys.py; recipes are
        # checked there before parsing, with their file's name): TRL's __post_init__ would divide by them.
        check_schedule_values({key: getattr(self, key) for key in SCHEDULE_KEYS if hasattr(self, key)}, "config")
        # Sampling keys out of range (drgrpo/algorithm/sampling_keys.py): TRL would divide by temperature 0, and a
        # temperature of 1e-40 or NaN trains every weight to NaN.
        check_sampling_values({key: getattr(self, key) for key in (*SAMPLING_KEYS, GENERATION_KWARGS)}, "config")
        if self.advantage_std_ddof not in (0, 1):
            raise ValueError(f"advantage_std_ddof must be 0 or 1, got {self.advantage_std_ddof}.")
        if self.advantage_epsilon < 0:
            raise ValueError(f"advantage_epsilon must be >= 0, got {self.advantage_epsilon}.")
        self.check_diagnostics_settings()  # correctness_reward, warning thresholds: drgrpo/observe/diagnostics.py
        self.check_family_settings()  # advantage baseline, KL in reward, dynamic sampling: drgrpo/algorithm/family.py
        self.check_tool_settings()  # the Python tool's call budget, output, time limit: algorithm/rollout/arguments.py
        self.check_engine_settings()
        skip_shm_comm_op(self.deepspeed)  # before DeepSpeed starts: no g++ build of an operator training never uses
        super().__post_init__()
        # Which engine generates (drgrpo/algorithm/rollout/engine.py); the trainer re-checks what only it knows
        # (DeepSpeed ZeRO-3 without gathering for generation).
        self.engine, self.engine_reason = resolve_generation_engine(
            self.generation_engine,
            on_cpu=self.use_cpu or not torch.cuda.is_available(),
            use_vllm=self.use_vllm,
            continuous_batching=self.use_transformers_continuous_batching,
        )
        self.resolve_sampler_mode(self.engine)  # unset: token_truncate on the CPU engine, TRL's sequence_mask else
        if self.engine == "cpu" and self.vllm_importance_sampling_correction and self.loss_type == "vespo":
            raise ValueError(
                "loss_type=vespo with the CPU engine's importance-sampling correction: VESPO folds the sampler ratio "
                "into its own weights, which the engine does not feed. Set vllm_importance_sampling_correction: false "
                "or generation_engine: trl."
            )

    @property
    def algorithm_summary(self) -> str:
        """One line naming the resolved algorithm, logged by the trainer at start-up; it lists only knobs that act."""
        name = algorithm_name(self)  # the family card's name, without its family members
        parts = [f"scale_rewards={self.scale_rewards}", f"loss_type={self.loss_type}", f"beta={self.beta}"]
        if self.loss_type == "dr_grpo":
            parts.append(f"loss constant={self.max_completion_length}")
        trl_scaling = self.trl_advantage_scaling
        if trl_scaling is not None:
            parts.append(f"advantages: {trl_scaling}")
        elif self.scale_rewards == "group":
            parts.append(f"std ddof={self.advantage_std_ddof}, eps={self.advantage_epsilon:g}")
        return f"algorithm: {name} ({', '.join(parts)})"

    # --- which advantage settings act (issue 11: the summary names only those; the others get a warning) ---
    @property
    def trl_advantage_scaling(self) -> str | None:
        """What TRL's own advantage computation does when `DrGRPOTrainer` keeps it, or None when ours is used.

        `DrGRPOTrainer` replaces TRL's advantages only for summed rewards with group or no std scaling; TRL's batch
        scaling and `normalize_then_sum` stay TRL's, with TRL's fixed convention (`nanstd`, ddof 1, eps 1e-4).
        """
        if self.multi_objective_aggregation == "normalize_then_sum":
            return (
                "TRL's normalize_then_sum (each reward divided by its group std, their weighted sum by the batch "
                "std; ddof 1, eps 1e-4)"
            )
        if self.scale_rewards == "batch":
            return "TRL's batch scaling (group mean, std of the whole batch; ddof 1, eps 1e-4)"
        return None

    @property
    def inactive_advantage_settings(self) -> list[str]:
        """A warning for each of `advantage_std_ddof` / `advantage_epsilon` set away from its default where it does
        not act, naming why; empty when both act or keep their defaults."""
        std_keys = ("advantage_std_ddof", "advantage_epsilon")
        defaults = {f.name: f.default for f in fields(DrGRPOConfig) if f.name in std_keys}
        changed = [f"{key}={getattr(self, key)!r}" for key in std_keys if getattr(self, key) != defaults[key]]
        if not changed:
            return []
        trl_scaling = self.trl_advantage_scaling
        if trl_scaling is not None:
            why = (
                f"the advantages are {trl_scaling}, which DrGRPOTrainer leaves to TRL; the std convention is "
                "chosen only for scale_rewards: group with multi_objective_aggregation: sum_then_normalize"
            )
        elif self.scale_rewards == "none":
            why = "scale_rewards=none divides by no std, so there is no std convention to choose"
        else:
            return []
        return [f"{', '.join(changed)} set but not applied: {why}. Remove the key(s) from the recipe."]


def resolve_dr_grpo(config: DrGRPOConfig) -> None:
    """Fill `scale_rewards`, `loss_type` and `beta` from the `dr_grpo` switch, or raise on a contradiction; under the
    switch, refuse the keys whose value changes its on-policy objective unless `dr_grpo_allow` names them
    (`drgrpo.algorithm.dr_grpo_keys`, the table of every TRL key)."""
    if config.dr_grpo:
        for key, required in DR_GRPO_SETTINGS.items():
            value = getattr(config, key)
            if value is not None and value != required:
                raise ValueError(
                    f"{key}={value!r} contradicts dr_grpo=true, which requires {key}={required!r}. Remove {key} from "
                    f"the recipe/command line (dr_grpo sets it), or set dr_grpo: false to run that variant."
                )
            setattr(config, key, required)
        if config.multi_objective_aggregation == "normalize_then_sum":
            raise ValueError(
                "multi_objective_aggregation='normalize_then_sum' contradicts dr_grpo=true: it divides every reward "
                "by its group std whatever scale_rewards says. Use multi_objective_aggregation: sum_then_normalize."
            )
    else:
        for key, default in TRL_DEFAULTS.items():
            if getattr(config, key) is None:
                setattr(config, key, default)
    check_dr_grpo_keys(config)
