"""Library messages that tell a user of this project nothing they can act on, filtered where they are emitted.

Each filter matches one message exactly (never a whole category or a whole logger), so every other warning still
shows:

- DeepSpeed's "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it.",
  which DeepSpeed logs at WARNING when it is imported on a machine without a GPU: the CPU path of every demo and CPU
  recipe, where a CPU is what was asked for. A logger filter on DeepSpeed's own logger (`DeepSpeed`) drops exactly
  that record; on a GPU machine DeepSpeed never emits it.
- transformers' FutureWarnings that `gradient_checkpointing`, `gradient_checkpointing_kwargs`,
  `gradient_checkpointing_enable`, `gradient_checkpointing_disable` and `is_gradient_checkpointing` are deprecated
  (renamed `activation_checkpointing*`): TRL 1.16 itself calls the old names and defaults `gradient_checkpointing`
  to True, so every run printed three of them whatever its recipe says; the names still work.

`quiet_library_noise` is called once when the `drgrpo` package is imported, before anything imports DeepSpeed.
(Parsing a recipe also filters the first of those warnings locally, `drgrpo.recipe.cli`, so that it stays quiet
under a caller's own `warnings.simplefilter`.)
"""

from __future__ import annotations

import logging
import warnings

DEEPSPEED_LOGGER = "DeepSpeed"
DEEPSPEED_CPU_FALLBACK = (
    "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it."
)
GRADIENT_CHECKPOINTING_RENAMES = r"`(is_)?gradient_checkpointing(_kwargs|_enable|_disable)?` is deprecated"


class DropMessage(logging.Filter):
    """Drops the log records whose message is exactly `message`."""

    def __init__(self, message: str):
        super().__init__()
        self.message = message

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != self.message


def quiet_library_noise() -> None:
    """Install the two filters of the module docstring (idempotent)."""
    warnings.filterwarnings("ignore", message=GRADIENT_CHECKPOINTING_RENAMES, category=FutureWarning)
    deepspeed_logger = logging.getLogger(DEEPSPEED_LOGGER)  # the same object DeepSpeed configures when imported
    if not any(isinstance(f, DropMessage) and f.message == DEEPSPEED_CPU_FALLBACK for f in deepspeed_logger.filters):
        deepspeed_logger.addFilter(DropMessage(DEEPSPEED_CPU_FALLBACK))
