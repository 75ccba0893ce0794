"""Watching a run: the names of its metrics, the per-step diagnostics and warnings, and plots of its curves.

May import: `drgrpo.core` (and torch, transformers, matplotlib). The trainer (`drgrpo.algorithm`) logs through it;
plots read what a run wrote.

Modules, each importing only the ones listed before it:
- `metric_names`: the names of every metric that diagnostics, warnings and plots read (import-light, no torch);
- `code_metrics`: what the programs of a `code`-rewarded batch did, one outcome per answer (the `diag/code/` metrics);
- `diagnostics`: `DiagnosticsArguments` (the warnings' settings) and the per-step diag/ metrics;
- `failure_warnings`: the conditions that name a known failure (the truncation collapse among them) and the callback
  that warns while it happens;
- `step_log`: the one line a run prints per logged step (the whole metrics dict goes to log_history.jsonl);
- `plotting`: training-curve panels from `trainer_state.json`, several runs overlaid (PNG).
"""
