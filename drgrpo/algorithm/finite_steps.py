"""No run saves a non-finite model: a step whose loss or gradient norm is NaN or infinite stops the run before that
step is saved or evaluated (a `DrGRPOTrainer` mixin).

transformers goes on after a NaN: `logging_nan_inf_filter` (on by default) even replaces a NaN step loss in the
logged mean by the mean of the steps before, and the optimizer writes NaN into every weight, which every later
checkpoint and the final model then hold (a `temperature: 1e-40` run exited 0 with every weight NaN). Here the
step's own loss (read before that filter) and its gradient norm are checked every optimizer step; the step is logged
as it happened (its NaN stays visible in `log_history.jsonl`), and the run stops in one line, its last complete
checkpoint still the newest.

Under fp16 a non-finite gradient norm is a step the loss scaler skips by design (the weights are not touched), so it
does not stop the run there; bf16 and float32 have no loss scaler.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from drgrpo.core.checkpoints import newest_complete_checkpoint
from drgrpo.core.errors import RecipeError, command_flag


class NonFiniteStepError(RecipeError):
    """A training step produced a NaN or infinite loss or gradient norm; the run stopped before saving it."""

    traceback_hint = False


def nonfinite_values(values: Mapping[str, float | None]) -> dict[str, float]:
    """The entries of `values` (metric name -> number, None when not measured) that are NaN or infinite."""
    return {name: value for name, value in values.items() if value is not None and not math.isfinite(value)}


def nonfinite_message(step: int, bad: Mapping[str, float], output_dir: str, newest: str | None) -> str:
    """The one line of a run stopped at `step` by the non-finite `bad` metrics."""
    shown = ", ".join(f"{name} {value}" for name, value in bad.items())
    kept = f"{newest} stays the newest complete checkpoint" if newest else "no checkpoint was saved before it"
    return (
        f"step {step}: {shown} (TRL's metrics): its update puts NaN or infinite values into the weights, so the run "
        f"stopped before saving or evaluating this step; {kept} in {output_dir} (every step's metrics: "
        "log_history.jsonl there). Lower learning_rate or check the rewards' scale and the sampling settings, then "
        "rerun (it resumes from the newest complete checkpoint) or start afresh "
        f"({command_flag('--overwrite_output_dir true')})."
    )


class FiniteSteps:
    """Mixin for TRL's `GRPOTrainer`: stop at the first optimizer step with a non-finite loss or gradient norm."""

    _nonfinite_loss: float | None = None

    # Override: transformers' `logging_nan_inf_filter` hides a NaN step loss from the logged mean, so each micro-step's
    # own loss is read here, before that filter; the first non-finite one of the optimizer step is kept.
    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self._nonfinite_loss is None and not bool(torch.isfinite(loss).all()):
            self._nonfinite_loss = float(loss.detach().float().mean())
        return loss

    # Override: called once per optimizer step, before transformers logs, evaluates and saves it: a non-finite step is
    # logged (nothing else), then the run stops.
    def _maybe_log_save_evaluate(self, tr_loss, grad_norm, *args, **kwargs):
        bad = self._nonfinite_step(grad_norm)
        if not bad:
            return super()._maybe_log_save_evaluate(tr_loss, grad_norm, *args, **kwargs)
        self.control.should_save = self.control.should_evaluate = False
        self.control.should_log = True
        super()._maybe_log_save_evaluate(tr_loss, grad_norm, *args, **kwargs)
        newest = newest_complete_checkpoint(self.args.output_dir)
        raise NonFiniteStepError(
            nonfinite_message(self.state.global_step, bad, self.args.output_dir, newest and newest.name)
        )

    def _nonfinite_step(self, grad_norm) -> dict[str, float]:
        """The step's non-finite metrics, the same on every process (the loss is each process's own: it is gathered,
        so that all stop together)."""
        loss, self._nonfinite_loss = self._nonfinite_loss, None
        if self.accelerator.num_processes > 1:
            flagged = [float(loss is not None), 0.0 if loss is None else loss]
            local = torch.tensor([flagged], dtype=torch.float64, device=self.accelerator.device)
            loss = next((value for flag, value in self.accelerator.gather(local).tolist() if flag), None)
        norm = grad_norm.item() if isinstance(grad_norm, torch.Tensor) else grad_norm
        if self.args.fp16:  # a non-finite gradient norm is a step the loss scaler skipped (module docstring)
            norm = None
        return nonfinite_values({"loss": loss, "grad_norm": norm})
