"""`RewardReport`: what one call of a reward function went through, for the logged metrics and `score.py`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RewardReport:
    """Per-call bookkeeping of a wrapped reward function.

    `failed[i]` marks a completion whose scoring timed out, raised or crashed its process (`failures` counts them;
    logged as `rewards/<name>/failures`). `counters` holds further per-batch counts logged as `rewards/<name>/<key>`
    (e.g. `unparsable_golds`). `details[i]` is a short note per completion (the extracted answer, an error).
    """

    size: int
    failed: list[bool] = field(default_factory=list)
    details: list[str | None] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.failed = self.failed or [False] * self.size
        self.details = self.details or [None] * self.size

    @property
    def failures(self) -> int:
        return sum(self.failed)

    def fail(self, index: int, detail: str | None = None) -> None:
        self.failed[index] = True
        if detail is not None:
            self.details[index] = detail
