"""The per-step tool metrics (`diag/tool/...`): pure functions of every rank's answers, one row of counts each."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from drgrpo.algorithm.rollout.loop import Answer
from drgrpo.observe import metric_names as names

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
)


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
        ]
        for answer in answers
    ]
    return torch.tensor(rows, dtype=torch.float32).reshape(len(rows), len(COLUMNS))


def tool_metrics(counts: torch.Tensor) -> dict[str, float]:
    """The `diag/tool/` metrics of a batch from its answers' counts (all ranks). Rates per program run are NaN in a
    batch that ran none (TRL's logger averages the finite values only)."""
    column = {name: counts[:, i] for i, name in enumerate(COLUMNS)}
    answers = max(1, counts.shape[0])
    calls = column["calls"].sum().item()

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
    }
