"""Findings: one problem or caution the planner reports, with the recipe key it concerns and its fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One problem (`level="error"`) or caution (`level="warning"`) with the recipe key it concerns and its fix."""

    level: str
    key: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.level.upper()} [{self.key}] {self.message} Fix: {self.fix}"
