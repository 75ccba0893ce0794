"""The algorithm: group advantages, KL, dynamic sampling, end-of-answer tokens, the GRPO-family keys, the config with
the Dr.GRPO switch, and `DrGRPOTrainer`, TRL's `GRPOTrainer` with these pieces in place of its own.

May import: `drgrpo.core`, `rewards`, `drgrpo.data`, `drgrpo.observe` (and torch, TRL). The config lives here, not in
`drgrpo.recipe`, because the trainer needs it and it is built from the family, eos and diagnostics keys below it.

Modules, each importing only the ones listed before it:
- `schedule_keys`: the ranges of the batch and schedule keys (zero, negative, fractional refused), one check for all;
- `sampling_keys`: the ranges of the sampling keys (temperature, top_p, ...) for training and evaluation, and the
  generation budget against the model's context;
- `dr_grpo_keys`: what `dr_grpo: true` does with each TRL key (refused by value, named on the card, allowed);
- `advantages`: `group_advantages` (GRPO / Dr.GRPO / leave-one-out) and reward combination, pure functions;
- `kl`: KL to the reference policy as a penalty in the reward (verl's estimators);
- `eos`: `EosArguments`, extra end-of-answer tokens for TRL, vLLM and transformers;
- `family`: `FamilyArguments`, the GRPO family as recipe keys, and the card that names a config's member;
- `sampler_correction`: TRL's importance-sampling weight pi_learner / pi_sampler for the engine's samples, and its
  metrics with TRL's meaning;
- `batch_logs`: TRL's per-round logs redone for a batch assembled from several generation rounds;
- `dynamic_sampling`: DAPO dynamic sampling (groups whose rewards differ, refilled from fresh prompts);
- `rollout`: the rollout stage (a subpackage): the CPU generation engine, the Python tool's loop, TRL's `rollout_func`;
- `shared_prompt`: the loss forward with each prompt run once for the completions that share it;
- `padding`: completions sorted by length (or grouped by prompt) within an optimizer step, micro-batches cut short;
- `step_speed`: `StepSpeedArguments`, the keys that remove waste from a step (padding, the prompt, the LM head on CPU);
- `swiglu`: SwiGLU MLPs keeping gate and up only for the backward (`recompute_swiglu`): the same gradients;
- `code_logs`: the `diag/code/` metrics of a batch rewarded by `code` (what the programs did), over every rank;
- `console_table`: TRL's console completions table given text with its control characters escaped;
- `checkpoint_save`: checkpoints staged, fsynced and renamed into place (whole or absent); a full disk in one line;
- `finite_steps`: a step with a non-finite loss or gradient norm stops the run before it is saved;
- `config`: `DrGRPOConfig`, where `dr_grpo: true` is resolved into TRL's settings;
- `trainer`: `DrGRPOTrainer`, the smallest set of `GRPOTrainer` overrides that uses the modules above.
"""
