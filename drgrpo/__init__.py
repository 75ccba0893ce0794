"""drgrpo: GRPO and Dr.GRPO recipes on TRL, laid out by the stages of a run.

Subpackages, bottom layer first; each imports only the layers before it (`rewards/`, the top-level reward library,
sits between `core` and `data`). docs/architecture.md draws the picture; tests/test_layout.py enforces it.
- `core`: user errors, checkpoint folders;
- `data`: prompt datasets and templates;
- `observe`: metric names, diagnostics, plots;
- `algorithm`: advantages, KL, dynamic sampling, eos tokens, family keys, the config (the Dr.GRPO switch), the trainer,
  the tool-integrated rollout (`algorithm/rollout/`);
- `run`: one training run (arguments, output-directory guard, `train()`);
- `recipe`: YAML + command line -> arguments, pre-flight parsing, the verl converter;
- `evaluation`: pass@k / maj@k on benchmarks, graded by the reward library;
- `planning`: a recipe checked at a world size before any GPU is used, Slurm launch commands;
- `experiments`: the CPU demo, GRPO vs Dr.GRPO, the length-bias experiment;
- `setup`: install check, GPU smoke-test report.

Importing the package filters two library messages that no user can act on (`drgrpo.core.noise`).
"""

from drgrpo.core.noise import quiet_library_noise

quiet_library_noise()
