"""`ToolArguments`: the recipe keys of tool-integrated RL (the Python tool), mixed into `DrGRPOConfig`.

Every key has a help text and a range check here; docs/tools.md describes the protocol they configure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OUTPUT_KEEPS = ("head", "tail")  # as rewards.code.tool.OUTPUT_KEEPS (this module stays free of the reward library)
VOID_ANSWERS = ("mask", "train")
MAX_CALLS = 64
MAX_OUTPUT_CHARS = 100_000
MAX_TIMEOUT = 60.0


@dataclass
class ToolArguments:
    """The Python tool of the rollout: on/off, its call budget, its output, its time limit, and what void answers and
    errors do to training."""

    python_tool: bool = field(
        default=False,
        metadata={
            "help": "Tool-integrated RL: the policy may write ```python ... ``` mid-answer; generation stops at the "
            "closing fence, the program runs in the code sandbox and its output is appended as ```output ... ``` "
            "before generation goes on in the same answer. The output's tokens are masked out of the loss; "
            "max_completion_length counts them (docs/tools.md). Off: one completion per prompt, as without it."
        },
    )
    tool_max_calls: int = field(
        default=4,
        metadata={
            "help": f"Most programs run per answer (1 to {MAX_CALLS}). A code block past the budget ends the answer "
            "unrun (it counts as truncated, as an answer cut by max_completion_length)."
        },
    )
    tool_output_chars: int = field(
        default=400,
        metadata={
            "help": f"Most characters of one observation (1 to {MAX_OUTPUT_CHARS}); a longer output is cut, with a "
            "note of how much was left out."
        },
    )
    tool_output_keep: str = field(
        default="head",
        metadata={"help": "Which end of a longer output is kept: 'head' (its start) or 'tail' (its end)."},
    )
    tool_timeout: float = field(
        default=5.0,
        metadata={
            "help": f"CPU seconds per program (above 0, at most {MAX_TIMEOUT:g}); the wall-clock limit is twice this. "
            "A program past it is stopped and the observation says so. The other limits are the code reward's "
            "code_* keys (memory, processes, files, output)."
        },
    )
    tool_void_answers: str = field(
        default="mask",
        metadata={
            "help": "Answers whose last turn ends with neither a program nor the answer (SimpleTIR's void turns): "
            "'mask' leaves them out of the loss (they keep their reward in their group's baseline); 'train' trains "
            "on them like any other answer."
        },
    )
    tool_answer_marker: str = field(
        default="\\boxed{",
        metadata={"help": "The text that says a turn gave the final answer (for void answers): \\boxed{ by default."},
    )
    tool_error_penalty: float = field(
        default=0.0,
        metadata={
            "help": "Reward added to an answer in which a program failed (an error or a timeout): -penalty, from 0 "
            "(the default: errors cost nothing, as in ToRA and SimpleTIR) to 1. Above 0 it is one more reward "
            "function, tool_error_penalty, logged as rewards/tool_error_penalty/mean."
        },
    )
    tool_num_workers: int | None = field(
        default=None,
        metadata={
            "help": "Programs run at once per rank. None: the CPU cores available to this rank (cores / "
            "LOCAL_WORLD_SIZE, at most 8)."
        },
    )

    def check_tool_settings(self) -> None:
        """Raise a `ValueError` naming the first tool key out of its range, with the range."""
        if not 1 <= self.tool_max_calls <= MAX_CALLS:
            raise ValueError(f"tool_max_calls={self.tool_max_calls}: use 1 to {MAX_CALLS} programs per answer.")
        if not 1 <= self.tool_output_chars <= MAX_OUTPUT_CHARS:
            raise ValueError(f"tool_output_chars={self.tool_output_chars}: use 1 to {MAX_OUTPUT_CHARS} characters.")
        if self.tool_output_keep not in OUTPUT_KEEPS:
            raise ValueError(f"tool_output_keep={self.tool_output_keep!r}: choose one of {', '.join(OUTPUT_KEEPS)}.")
        if not 0 < self.tool_timeout <= MAX_TIMEOUT:
            raise ValueError(f"tool_timeout={self.tool_timeout}: use a time above 0 and at most {MAX_TIMEOUT:g} s.")
        if self.tool_void_answers not in VOID_ANSWERS:
            raise ValueError(f"tool_void_answers={self.tool_void_answers!r}: choose one of {', '.join(VOID_ANSWERS)}.")
        if not self.tool_answer_marker:
            raise ValueError("tool_answer_marker is empty: set the text a final answer contains, e.g. '\\boxed{'.")
        if not 0 <= self.tool_error_penalty <= 1:
            raise ValueError(f"tool_error_penalty={self.tool_error_penalty}: use 0 (no penalty) to 1.")
        if self.tool_num_workers is not None and self.tool_num_workers < 1:
            raise ValueError(f"tool_num_workers={self.tool_num_workers}: use 1 or more, or leave it unset.")

    @property
    def tool_summary(self) -> str | None:
        """The family card's rollout line, or None with the tool off."""
        if not self.python_tool:
            return None
        void = "masked out of the loss" if self.tool_void_answers == "mask" else "trained on"
        penalty = f", a failed program costs {self.tool_error_penalty:g}" if self.tool_error_penalty else ""
        return (
            f"multi-turn with the Python tool: up to {self.tool_max_calls} programs per answer, {self.tool_timeout:g} "
            f"s each, outputs of at most {self.tool_output_chars} characters ({self.tool_output_keep}); tool-output "
            f"tokens masked out of the loss; max_completion_length counts model and tool tokens; void answers {void}"
            f"{penalty}"
        )


GENERATION_ENGINES = ("auto", "cpu", "trl")


@dataclass
class EngineArguments:
    """Which engine generates the rollouts when vLLM does not: the CPU engine (drgrpo/algorithm/rollout/engine.py) or
    TRL's transformers `generate`, mixed into `DrGRPOConfig`."""

    generation_engine: str = field(
        default="auto",
        metadata={
            "help": "Who generates without vLLM: 'cpu', the project's CPU engine (weights in the generation dtype, "
            "bf16 where the CPU computes it natively, synced once per optimizer step; the sampler's log-probs feed "
            "the importance-sampling correction, vllm_importance_sampling_* keys); 'trl', TRL's transformers generate "
            "on the trained weights (under bf16 autocast with bf16 on); 'auto' (default): the CPU engine on a CPU run "
            "that does not use vLLM, continuous batching or ZeRO-3 without gathering, else TRL's."
        },
    )

    def check_engine_settings(self) -> None:
        if self.generation_engine not in GENERATION_ENGINES:
            raise ValueError(
                f"generation_engine={self.generation_engine!r}: choose one of {', '.join(GENERATION_ENGINES)}."
            )


def resolve_generation_engine(
    requested: str, *, on_cpu: bool, use_vllm: bool, continuous_batching: bool, gathers_for_generation: bool = True
) -> tuple[str, str]:
    """('cpu' or 'trl', why): the engine `generation_engine: requested` means for a run; `cpu` where it cannot run is
    a `ValueError` naming what stops it."""
    if requested == "trl":
        return "trl", "generation_engine: trl as set (TRL's transformers generate)"
    blockers = [
        (use_vllm, "use_vllm is on (vLLM generates)"),
        (continuous_batching, "use_transformers_continuous_batching is on"),
        (not on_cpu, "the run is not on a CPU (use_cpu is off and a GPU is there)"),
        (not gathers_for_generation, "ds3_gather_for_generation is off (ZeRO-3 would generate from sharded weights)"),
    ]
    blocker = next((why for blocked, why in blockers if blocked), None)
    if blocker is None:
        return "cpu", f"generation_engine: {requested}, the CPU engine"
    if requested == "cpu":
        raise ValueError(f"generation_engine: cpu cannot run here: {blocker}. Set generation_engine: auto or trl.")
    return "trl", f"generation_engine: auto, TRL's generation: {blocker}"
