"""`RewardArguments`: the recipe keys of the reward library (mixed into the train script's `ScriptArguments`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rewards.code.settings import CodeRewardArguments


@dataclass
class RewardArguments(CodeRewardArguments):
    """Which reward functions a recipe uses, and how they are run.

    Their weights are TRL's `reward_weights` (a trainer setting), aligned with `reward_funcs`. The settings of the
    code rewards (`code_*`, `tests_column`) come from `rewards.code.settings.CodeRewardArguments`.
    """

    reward_funcs: list[str] = field(
        default_factory=lambda: ["accuracy"],
        metadata={
            "help": "Reward functions: built-in names (accuracy, format, boxed_format, overlong, cosine_length, code, "
            "code_format), "
            "'package.module:function' or 'path/to/file.py:function'. Weights go in reward_weights, aligned with "
            "this list."
        },
    )
    answer_extraction_mode: str = field(
        default="math_verify",
        metadata={
            "help": "Which part of a completion the accuracy and cosine_length rewards (and evaluation) read as its "
            "final answer. boxed_only: only the final \\boxed{} (a run of boxes as one list when the gold has several "
            "parts). math_verify: boxes, else the <answer> tag, else the number after ####, else the final-answer "
            "region (from the last 'answer' phrase, or the last line with math) read by math-verify's extraction, "
            "numbers only as whole tokens. lenient: math_verify, plus the last LaTeX span anywhere in the "
            "completion's tail when the region holds none. See docs/grading.md.",
            "choices": ["boxed_only", "math_verify", "lenient"],
        },
    )
    reward_timeout: float = field(
        default=5.0,
        metadata={
            "help": "Seconds allowed to verify one completion's answer (math-verify parse + compare). Past it the "
            "verification is abandoned (its worker process killed and replaced), the completion scores 0 and "
            "rewards/<name>/failures counts it."
        },
    )
    reward_call_timeout: float = field(
        default=120.0,
        metadata={
            "help": "Seconds allowed for one call of a custom (user) reward function on a whole batch. Past it every "
            "completion of the batch scores None (excluded from its group) and counts as a failure."
        },
    )
    reward_num_workers: int | None = field(
        default=None,
        metadata={
            "help": "Processes that verify math answers, created once and reused. None: the CPU cores available to "
            "this rank (cores / LOCAL_WORLD_SIZE, at most 8). 0: verify in the trainer process (a hard timeout then "
            "works only on the main thread)."
        },
    )
    reward_worker_memory_mb: int | None = field(
        default=2048,
        metadata={
            "help": "Address-space limit of each verifier process in MiB, so that an answer like 10^{10^{10}} fails "
            "with MemoryError instead of exhausting the machine. None: no limit."
        },
    )
    overlong_max_length: int | None = field(
        default=None,
        metadata={
            "help": "DAPO overlong punishment: L_max, the generation limit in tokens. None: the trainer's "
            "max_completion_length."
        },
    )
    overlong_buffer_length: int | None = field(
        default=None,
        metadata={
            "help": "DAPO overlong punishment: L_cache, the buffer before L_max over which the penalty grows from 0 "
            "to -1. None: a fifth of L_max (DAPO used 4096 of 20480)."
        },
    )
    cosine_max_length: int | None = field(
        default=None,
        metadata={
            "help": "cosine_length reward: the length (tokens) at which the cosine schedule ends. None: the trainer's "
            "max_completion_length."
        },
    )
    cosine_min_value_correct: float = field(
        default=0.5, metadata={"help": "cosine_length reward of a correct completion of maximal length."}
    )
    cosine_max_value_correct: float = field(
        default=1.0, metadata={"help": "cosine_length reward of a correct completion of length 0."}
    )
    cosine_min_value_wrong: float = field(
        default=-1.0, metadata={"help": "cosine_length reward of a wrong completion of length 0."}
    )
    cosine_max_value_wrong: float = field(
        default=-0.5, metadata={"help": "cosine_length reward of a wrong completion of maximal length."}
    )
