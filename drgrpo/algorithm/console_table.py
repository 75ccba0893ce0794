"""The completions table TRL prints to the console (`log_completions`), with control characters shown escaped.

The policy's own text can hold ESC, BEL or a C1 control (OSC 0 sets the terminal's title, OSC 52 writes its
clipboard), and TRL's table (`print_prompt_completions_sample`, rich) prints them raw to whoever watches the run. The
parquet file and wandb's table keep the raw text: they are data, not printed to a terminal, and the raw text is what
was trained on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trl.trainer.grpo_trainer as trl_grpo

from drgrpo.core.control_chars import escape_control_characters


def console_entry(entry: Any) -> Any:
    """The prompts, completions or extra columns of the completions table (TRL's deques of strings or message lists)
    with every string's control characters escaped (`escape_control_characters`), in the same shape (a deque as a
    list). A tool call's `arguments` stay as they are: TRL parses them as JSON and prints their values' repr, which
    escapes them."""
    if isinstance(entry, str):
        return escape_control_characters(entry)
    if isinstance(entry, (list, deque)):
        return [console_entry(item) for item in entry]
    if isinstance(entry, dict):
        return {key: value if key == "arguments" else console_entry(value) for key, value in entry.items()}
    return entry


@contextmanager
def escaped_console_table() -> Iterator[None]:
    """While TRL's `GRPOTrainer.log` runs, its console table gets the prompts, completions and extra columns through
    `console_entry`. TRL reads `print_prompt_completions_sample` from its module at call time and has no other hook,
    so the function is swapped there for the call, not copied; what TRL writes to parquet and wandb is untouched."""
    original = trl_grpo.print_prompt_completions_sample

    def escaped(prompts, completions, rewards, advantages, *args, extra=None, **kwargs):
        prompts, completions, extra = console_entry(prompts), console_entry(completions), console_entry(extra)
        return original(prompts, completions, rewards, advantages, *args, extra=extra, **kwargs)

    trl_grpo.print_prompt_completions_sample = escaped
    try:
        yield
    finally:
        trl_grpo.print_prompt_completions_sample = original
