"""Warnings that name a known failure while it happens: pure conditions on the logged `diag/` and TRL metrics, and
the callback that applies them to the training logs (settings: `drgrpo.observe.diagnostics.DiagnosticsArguments`).

The rows come from the background note's checklist (section 5), plus the truncation collapse met on the first real
model trained here (SmolLM2-135M-Instruct on additions, grading truncated completions): the reward rose while
held-out accuracy fell from 17.0% to 14.0%, 85% of completions hit the limit, and an intermediate number in cut-off
text earned reward. The checklist's old truncation row ("every reward 0 because answers are cut off") was false
there; the warnings now tell the two cases apart.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from transformers import TrainerCallback

from drgrpo.observe.diagnostics import DiagnosticsArguments
from drgrpo.observe.metric_names import (
    PASS_RATE,
    TRL_CLIP_FRACTION,
    TRL_ENTROPY,
    TRL_KL,
    TRL_ZERO_STD_SHARE,
    TRUNCATED_SHARE_OF_CORRECT,
    TRUNCATION_RATE,
)

logger = logging.getLogger(__name__)

WATCHED = (
    TRL_ZERO_STD_SHARE,
    TRUNCATION_RATE,
    TRUNCATED_SHARE_OF_CORRECT,
    PASS_RATE,
    TRL_ENTROPY,
    TRL_CLIP_FRACTION,
    TRL_KL,
)
# Below this pass rate a batch counts as "no reward at all".
NO_REWARD_PASS_RATE = 0.01


def window_mean(values: Sequence[float], window: int) -> float | None:
    """Mean of the last `window` values, or None until `window` values exist."""
    if len(values) < window:
        return None
    recent = list(values)[-window:]
    return sum(recent) / window


def jumped(values: Sequence[float], factor: float, floor: float, window: int) -> bool:
    """Whether the latest value is above `floor` and above `factor` times the median of up to `window` before it.

    At least two earlier values are needed, so that a single noisy first log cannot define "normal".
    """
    if len(values) < 3:
        return False
    latest = values[-1]
    previous = list(values)[-window - 1 : -1]
    return latest > floor and latest > factor * statistics.median(previous)


@dataclass(frozen=True)
class FailureWarning:
    """One warning: the condition that fired and the row of the failure checklist it points at."""

    kind: str
    message: str


# Rows of the background note's checklist (section 5), quoted in the warnings so the reader knows where to look.
CHECKLIST = {
    "zero_std": "reward does not move -> check first: share of zero-variance groups, task difficulty, sampling "
    "temperature, the verifier itself.",
    "truncation_collapse": "truncation collapse: the reward pays for numbers inside text that never finished, so "
    "rambling past the limit pays, lengths grow and held-out accuracy can fall while the reward rises -> set "
    "zero_reward_for_truncated: true (the Dr.GRPO paper's rule: a truncated completion scores 0).",
    "truncation": "answers are cut off before they finish -> raise max_completion_length or make the prompt ask for "
    "shorter answers; check that the stop token (EOS) is generated.",
    "entropy": "entropy collapses fast -> too little exploration, no diversity within groups, reward scale "
    "(raise temperature, lower the learning rate, consider clip-higher).",
    "clip_kl": "KL or clip fraction explodes -> learning rate, update epochs (num_iterations), old-log-prob precision, "
    "rollout staleness.",
}


def truncation_warnings(history: dict[str, list[float]], settings: DiagnosticsArguments) -> list[FailureWarning]:
    """The truncation rows: correct completions that were cut off (the collapse), then many cut-off completions.

    The collapse needs credited truncated completions, which `zero_reward_for_truncated` rules out (it scores them 0
    before these metrics are computed); the plain row says "every reward is 0" only when the pass rate is ~0."""
    window = settings.diagnostics_window
    found = []
    truncation = window_mean(history.get(TRUNCATION_RATE, []), window)
    credited = window_mean(history.get(TRUNCATED_SHARE_OF_CORRECT, []), window)
    if credited is not None and credited > settings.warn_truncated_correct_share:
        cut = "" if truncation is None else f"{truncation:.0%} of all completions were cut off, and "
        found.append(
            FailureWarning(
                "truncation_collapse",
                f"{cut}{credited:.0%} of the completions graded correct were cut off at max_completion_length over "
                f"the last {window} logs (threshold {settings.warn_truncated_correct_share:.0%}). "
                + CHECKLIST["truncation_collapse"],
            )
        )
    if truncation is not None and truncation > settings.warn_truncation_rate:
        passed = window_mean(history.get(PASS_RATE, []), window)
        reward = (
            " and almost no completion is correct: every reward is 0 because the answers are never written"
            if passed is not None and passed < NO_REWARD_PASS_RATE
            else ""
        )
        found.append(
            FailureWarning(
                "truncation",
                f"{truncation:.0%} of completions hit max_completion_length over the last {window} logs (threshold "
                f"{settings.warn_truncation_rate:.0%}){reward}. " + CHECKLIST["truncation"],
            )
        )
    return found


def check_history(history: dict[str, list[float]], settings: DiagnosticsArguments) -> list[FailureWarning]:
    """Every warning condition that holds for the logged `history` (metric name -> values, oldest first)."""
    window = settings.diagnostics_window
    found: list[FailureWarning] = []
    zero_std = window_mean(history.get(TRL_ZERO_STD_SHARE, []), window)
    if zero_std is not None and zero_std > settings.warn_zero_std_share:
        found.append(
            FailureWarning(
                "zero_std",
                f"{zero_std:.0%} of groups had all-equal rewards over the last {window} logs (threshold "
                f"{settings.warn_zero_std_share:.0%}): those groups give zero advantage and no gradient. "
                + CHECKLIST["zero_std"],
            )
        )
    found += truncation_warnings(history, settings)
    entropy = window_mean(history.get(TRL_ENTROPY, []), window)
    if entropy is not None and entropy < settings.warn_entropy_below:
        found.append(
            FailureWarning(
                "entropy",
                f"mean token entropy {entropy:.3g} nats over the last {window} logs is below "
                f"{settings.warn_entropy_below:g}. " + CHECKLIST["entropy"],
            )
        )
    for key, floor, label in (
        (TRL_CLIP_FRACTION, settings.warn_clip_fraction_floor, "clip fraction"),
        (TRL_KL, settings.warn_kl_floor, "KL"),
    ):
        values = history.get(key, [])
        if jumped(values, settings.warn_jump_factor, floor, window):
            found.append(
                FailureWarning(
                    "clip_kl",
                    f"{label} jumped to {values[-1]:.3g}, more than {settings.warn_jump_factor:g}x its recent median. "
                    + CHECKLIST["clip_kl"],
                )
            )
    return found


class DiagnosticsCallback(TrainerCallback):
    """Warns once per kind when the training logs match a row of the failure checklist.

    It reads the same numbers that go to the console, `trainer_state.json` and `report_to`, so a warning can always be
    checked against the logged curves.
    """

    def __init__(self, settings: DiagnosticsArguments) -> None:
        self.settings = settings
        self.history: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=settings.diagnostics_window + 1))
        self.warned: set[str] = set()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or not state.is_world_process_zero:
            return
        for key in WATCHED:
            value = logs.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.history[key].append(float(value))
        for warning in check_history(self.history, self.settings):
            if warning.kind not in self.warned:
                self.warned.add(warning.kind)
                logger.warning("Diagnostics at step %d: %s", state.global_step, warning.message)
