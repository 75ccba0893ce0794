"""`DrGRPOTrainer`: TRL's `GRPOTrainer` with its advantages computed by `drgrpo.advantages.group_advantages`.

Everything else (generation, the clipped surrogate, the `dr_grpo` loss aggregation, vLLM, DeepSpeed) is TRL's.
"""

from __future__ import annotations

import logging

import torch
from trl import GRPOTrainer

from drgrpo.advantages import combine_rewards, group_advantages
from drgrpo.config import DrGRPOConfig

logger = logging.getLogger(__name__)


class DrGRPOTrainer(GRPOTrainer):
    """GRPO / Dr.GRPO trainer configured by a `DrGRPOConfig`.

    The only change to TRL's algorithm is *where the advantage comes from*: one pure, tested function
    (`group_advantages`) whose std convention (`advantage_std_ddof`, `advantage_epsilon`) the config chooses. With
    the defaults it reproduces TRL's numbers exactly.
    """

    args: DrGRPOConfig

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, DrGRPOConfig):
            raise TypeError(f"DrGRPOTrainer needs a DrGRPOConfig, got {type(self.args).__name__}.")
        self._last_rewards_per_func: torch.Tensor | None = None
        if self.accelerator.is_main_process:
            logger.warning(self.args.algorithm_summary)

    # Override: keep the (all-process) rewards TRL just computed, so that the advantage override below starts from
    # exactly the numbers TRL logs, without re-running any reward function.
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    # Override: TRL computes advantages inline in this 400-line method; we let it run unchanged and then replace its
    # advantages with `group_advantages` on the same rewards. Only the group-wise/no-scaling cases with summed
    # rewards are ours; TRL's 'batch' scaling and 'normalize_then_sum' keep TRL's own advantages.
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.multi_objective_aggregation != "sum_then_normalize" or self.scale_rewards not in ("group", "none"):
            return output
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = combine_rewards(self._last_rewards_per_func, self.reward_weights)
        advantages = group_advantages(
            rewards,
            num_generations,
            scale_by_std=self.scale_rewards == "group",
            std_ddof=self.args.advantage_std_ddof,
            epsilon=self.args.advantage_epsilon,
        )
        local = output["advantages"].shape[0]
        start = self.accelerator.process_index * local
        output["advantages"] = advantages[start : start + local].to(output["advantages"].device)
        return output
