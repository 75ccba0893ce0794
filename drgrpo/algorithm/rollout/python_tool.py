"""The Python tool built from a recipe: `tool_*` keys for its budget and output, the code reward's `code_*` keys for the
sandbox's limits (memory, processes, files, output), `tool_timeout` for its time limit."""

from __future__ import annotations

from dataclasses import replace

from drgrpo.algorithm.rollout.arguments import ToolArguments
from rewards.code.reward import sandbox_limits
from rewards.code.sandbox import get_sandbox
from rewards.code.settings import CodeRewardArguments
from rewards.code.tool import PythonTool, ToolErrorPenalty
from rewards.pool import default_num_workers


def build_python_tool(settings: ToolArguments, code_settings: CodeRewardArguments | None = None) -> PythonTool:
    """The recipe's tool, its sandbox started (a machine where programs cannot be isolated fails now, in one line)."""
    settings.check_tool_settings()
    code_settings = code_settings or CodeRewardArguments()
    code_settings.check_code_settings()
    limits = replace(sandbox_limits(code_settings), timeout=settings.tool_timeout)
    workers = settings.tool_num_workers or default_num_workers()
    fallback, python = code_settings.code_allow_network_fallback, code_settings.code_python
    # Runners of its own: never the code reward's, whose programs read hidden test cases.
    sandbox = get_sandbox(workers, limits, fallback, python, owner="python_tool")
    sandbox.start()
    return PythonTool(sandbox, settings.tool_output_chars, settings.tool_output_keep)


def tool_reward_funcs(settings: ToolArguments) -> list:
    """The reward functions the tool adds to the recipe's: `tool_error_penalty` when it is above 0, else none."""
    if settings.python_tool and settings.tool_error_penalty > 0:
        return [ToolErrorPenalty(settings.tool_error_penalty)]
    return []
