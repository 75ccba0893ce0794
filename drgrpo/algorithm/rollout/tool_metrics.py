"""The per-step tool metrics (`diag/tool/...`): pure functions of every rank's answers, one row of counts each."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from drgrpo.algorithm.rollout.loop import Answer
from drgrpo.observe import metric_names as names
from rewards.extract import last_boxed_group

# One row per answer; a fixed column order so that the rows of all ranks gather into one tensor.
COLUMNS = (
    "calls",
    "errors",
    "timeouts",
    "void",
    "call_budget",
    "token_budget",
    "in_code",
    "model_tokens",
    "tool_tokens",
    "ran",  # it ran at least one program that printed something
    "box_is_output",  # and its final \\boxed{} holds exactly the last program's output
)


def box_is_last_output(text: str, observations: Sequence[str]) -> bool:
    """Whether an answer's final `\\boxed{}` (of `text`, the model's own text) holds exactly the last program's output
    (both stripped): the policy read the tool's result back into its answer. False without a box or an output."""
    boxes = last_boxed_group(text)
    return bool(boxes) and bool(observations) and boxes[-1].strip() == observations[-1].strip()


def _observations(answer: Answer) -> list[str]:
    return [turn.observation for turn in answer.turns if turn.observation is not None and turn.observation.strip()]


def answer_counts(answers: Sequence[Answer], marker: str) -> torch.Tensor:
    """A (len(answers), len(COLUMNS)) float tensor of the answers' counts, in `COLUMNS` order."""
    rows = [
        [
            answer.calls,
            answer.count("error"),
            answer.count("timeout"),
            answer.is_void(marker),
            answer.end == "call_budget",
            answer.end == "token_budget",
            answer.in_code,
            answer.model_tokens,
            answer.tool_tokens,
            bool(_observations(answer)),
            box_is_last_output("".join(turn.text for turn in answer.turns), _observations(answer)),
        ]
        for answer in answers
    ]
    return torch.tensor(rows, dtype=torch.float32).reshape(len(rows), len(COLUMNS))


def tool_metrics(counts: torch.Tensor) -> dict[str, float]:
    """The `diag/tool/` metrics of a batch from its answers' counts (all ranks). Rates per program run are NaN in a
    batch that ran none (TRL's logger averages the finite values only); so is the share of answers whose box is the last
    output, of the answers whose programs printed something."""
    column = {name: counts[:, i] for i, name in enumerate(COLUMNS)}
    answers = max(1, counts.shape[0])
    calls = column["calls"].sum().item()
    ran = column["ran"].sum().item()

    def share(name: str) -> float:
        return column[name].sum().item() / answers

    return {
        names.TOOL_CALLS_PER_ANSWER: calls / answers,
        names.TOOL_ERROR_RATE: column["errors"].sum().item() / calls if calls else float("nan"),
        names.TOOL_TIMEOUT_RATE: column["timeouts"].sum().item() / calls if calls else float("nan"),
        names.TOOL_VOID_ANSWERS: share("void"),
        names.TOOL_CALL_BUDGET_EXHAUSTED: share("call_budget"),
        names.TOOL_TOKEN_BUDGET_EXHAUSTED: share("token_budget"),
        names.TOOL_CUT_IN_CODE: share("in_code"),
        names.TOOL_MODEL_TOKENS: share("model_tokens"),
        names.TOOL_OUTPUT_TOKENS: share("tool_tokens"),
        names.TOOL_BOX_IS_OUTPUT: column["box_is_output"].sum().item() / ran if ran else float("nan"),
    }
