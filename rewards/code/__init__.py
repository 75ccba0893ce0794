"""Verifiable rewards for code: run a completion's program on its problem's test cases, offline, in a sandbox.

- `code`: the share of test cases passed (or 1/0 with `code_scoring: all`), `rewards.code.reward.CodeReward`;
- `code_format`: one closed ```python block in the answer;
- `Sandbox` / `SandboxLimits` / `RunResult` (`rewards.code.sandbox`): run any untrusted Python program;
- `parse_tests` (`rewards.code.testcases`), `outputs_match` (`rewards.code.compare`), `extract_program`.

Settings: `CodeRewardArguments` (part of `rewards.RewardArguments`). Guarantees and limits: docs/code-rewards.md.
"""

from __future__ import annotations

from rewards.code.blocks import code_format_score, extract_program
from rewards.code.compare import outputs_match
from rewards.code.reward import CodeFormatReward, CodeReward
from rewards.code.sandbox import NamespacesUnavailable, RunResult, Sandbox, SandboxLimits, SandboxUnavailable
from rewards.code.settings import CodeRewardArguments
from rewards.code.testcases import TestCase, TestFormatError, parse_tests
from rewards.loading import load_file_module, module_attribute


def load_checker(spec: str):
    """The `code_checker` function named by `package.module:function` or `path/to/file.py:function`."""
    import importlib

    location, _, attribute = spec.rpartition(":")
    if not location or not attribute:
        raise ValueError(f"code_checker {spec!r}: expected 'package.module:function' or 'path/to/file.py:function'.")
    if location.endswith(".py") or "/" in location:
        return module_attribute(load_file_module(location, spec), attribute, f"Checker file {location!r}", spec)
    return module_attribute(importlib.import_module(location), attribute, f"Module {location!r}", spec)


def code_reward(settings: CodeRewardArguments) -> CodeReward:
    """The `code` built-in for a recipe's settings: checker resolved, worker count defaulted, sandbox started (so
    that a machine where it cannot isolate programs fails at start-up, not at the first batch)."""
    from rewards.pool import default_num_workers

    checker = load_checker(settings.code_checker) if settings.code_checker else None
    reward = CodeReward(settings, checker, settings.code_num_workers or default_num_workers())
    reward.sandbox.start()
    return reward


__all__ = [
    "CodeFormatReward",
    "CodeReward",
    "CodeRewardArguments",
    "RunResult",
    "Sandbox",
    "SandboxLimits",
    "SandboxUnavailable",
    "NamespacesUnavailable",
    "TestCase",
    "TestFormatError",
    "code_format_score",
    "code_reward",
    "extract_program",
    "outputs_match",
    "parse_tests",
]
