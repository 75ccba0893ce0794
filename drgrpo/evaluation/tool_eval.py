"""Evaluation with the Python tool at a call budget B (`--tool_max_calls B`; 0, the default: no tool, the evaluation
as it always was).

Each sample runs the training rollout's loop (`drgrpo.algorithm.rollout.loop`) on the evaluation backend: its turns are
seeded from the sample's own seed (turn 0 with the seed itself, so a sample that writes no code is the sample B=0
gives; turn t with `sample_seed(seed, t, 0)`), so a sample depends only on (seed, problem, sample) and its programs'
outputs, and a resumed run writes the rows an uninterrupted one would. It is graded on the policy's own text (the
observations left out), and its row keeps every turn. The tool settings are part of the run's `eval_config.json`, so
a rerun with other settings refuses to resume into the same folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from drgrpo.algorithm.rollout.arguments import ToolArguments
from drgrpo.algorithm.rollout.loop import LoopSettings, run_tool_loop
from drgrpo.algorithm.rollout.protocol import TurnReader, check_turn_reading
from drgrpo.evaluation.backends import Generation, Request
from drgrpo.evaluation.sampling import sample_seed

# The recipe's tool keys that decide what a sample is (besides the call budget): read from --recipe.
RECIPE_TOOL_KEYS = ("tool_output_chars", "tool_output_keep", "tool_timeout")


TOOL_MAX_CALLS_HELP = (
    "Call budget B of the Python tool (docs/tools.md): the model may run up to B programs per sample, their outputs "
    "fed back into the answer. 0 (default): no tool, the evaluation as without it. The recipe's tool_output_chars, "
    "tool_output_keep, tool_timeout and code_* limits apply."
)


def check_tool_budget(tool_max_calls: int) -> None:
    if not 0 <= tool_max_calls <= 64:
        raise ValueError(f"tool_max_calls={tool_max_calls}: use 0 (no tool) to 64 programs per sample.")


@dataclass(frozen=True)
class ToolGeneration(Generation):
    """A sample generated with the tool: `text` is the policy's own text (graded), `transcript` the whole answer."""

    transcript: str = ""
    turns: tuple[dict, ...] = ()
    tool_calls: int = 0
    ended: str = ""

    def record(self) -> dict:
        """The sample row's tool fields."""
        return {
            "transcript": self.transcript,
            "turns": list(self.turns),
            "tool_calls": self.tool_calls,
            "ended": self.ended,
        }


def tool_settings(tool_max_calls: int, recipe: dict) -> ToolArguments:
    """The tool's settings: the call budget, and the recipe's tool keys (defaults where it has none)."""
    defaults = {f.name: f.default for f in fields(ToolArguments)}
    values = {key: recipe.get(key, defaults[key]) for key in RECIPE_TOOL_KEYS}
    settings = ToolArguments(python_tool=True, tool_max_calls=tool_max_calls, **values)
    settings.check_tool_settings()
    return settings


def tool_config(settings: ToolArguments) -> dict:
    """The tool's part of `eval_config.json`: what a resumed run must share."""
    return {"tool_max_calls": settings.tool_max_calls, **{key: getattr(settings, key) for key in RECIPE_TOOL_KEYS}}


def turn_seed(seed: int, turn: int) -> int:
    """The seed of a sample's turn: its own seed for the first turn, a hash of (seed, turn) for the others."""
    return seed if turn == 0 else sample_seed(seed, turn, 0)


def generate_with_tool(
    backend: Any,
    tokenizer: Any,
    tool: Any,
    settings: ToolArguments,
    requests: Sequence[Request],
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    reader: TurnReader,
) -> list[ToolGeneration]:
    """Every request's sample with the tool, in order."""

    def generate(rows, budgets, owners):
        seeds = [turn_seed(requests[o[0]].seed, o[1]) if o is not None else 0 for o in owners]
        return backend.generate_turn(rows, seeds, budgets, temperature, top_p, reader)

    loop = LoopSettings(max_calls=settings.tool_max_calls, max_tokens=max_new_tokens, eos_ids=tuple(backend.eos_ids))
    answers = run_tool_loop([r.prompt_ids for r in requests], generate, tool, tokenizer, loop, reader=reader)
    generations = []
    for answer in answers:
        generations.append(
            ToolGeneration(
                text=tokenizer.decode(answer.model_ids(), skip_special_tokens=True),
                num_tokens=len(answer.ids),
                truncated=answer.end != "eos",
                transcript=tokenizer.decode(answer.ids, skip_special_tokens=True),
                turns=tuple(turn.as_record() for turn in answer.turns),
                tool_calls=answer.calls,
                ended=answer.end or "",
            )
        )
    return generations


def tool_summary(rows: Sequence[dict]) -> dict:
    """The summary's tool figures: programs run per sample, and the share of them that failed or timed out."""
    turns = [turn for row in rows for turn in row.get("turns", [])]
    calls = [turn for turn in turns if turn.get("status") is not None]
    return {
        "tool_calls_per_sample": sum(row.get("tool_calls", 0) for row in rows) / max(1, len(rows)),
        "tool_error_rate": sum(t["status"] == "error" for t in calls) / len(calls) if calls else 0.0,
        "tool_timeout_rate": sum(t["status"] == "timeout" for t in calls) / len(calls) if calls else 0.0,
    }


class ToolSession:
    """The tool of one evaluation run: its settings, its sandbox (started on first use) and its turn reader."""

    def __init__(self, settings: ToolArguments, code_settings: Any = None) -> None:
        self.settings = settings
        self.code_settings = code_settings
        self._tool = None
        self._reader: TurnReader | None = None

    @classmethod
    def from_recipe(cls, tool_max_calls: int, recipe: dict) -> ToolSession:
        from drgrpo.evaluation.code import code_settings

        return cls(tool_settings(tool_max_calls, recipe), code_settings(recipe))

    def config(self) -> dict:
        return tool_config(self.settings)

    def generate(self, backend, tokenizer, requests, temperature, top_p, max_new_tokens) -> list[ToolGeneration]:
        from drgrpo.algorithm.rollout.python_tool import build_python_tool

        if self._tool is None:
            check_turn_reading(tokenizer)  # a tokenizer whose programs would not read as written: refused
            self._reader = TurnReader(tokenizer)
            self._tool = build_python_tool(self.settings, self.code_settings)
        return generate_with_tool(
            backend, tokenizer, self._tool, self.settings, requests, temperature, top_p, max_new_tokens, self._reader
        )

    def summary(self, rows: Sequence[dict]) -> dict:
        return tool_summary(rows)
