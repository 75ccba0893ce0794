"""One training run: the script's arguments, the output directory that holds one run, and `train()` itself.

May import: everything below it (`drgrpo.core`, `rewards`, `drgrpo.data`, `drgrpo.observe`, `drgrpo.algorithm`).

Modules, each importing only the ones listed before it:
- `output_guard`: `OutputDirArguments`; an output directory that holds another configuration's model is refused;
- `run_lock`: one run per output directory, an exclusive lock held for the run's life (released when it dies);
- `data_fingerprint`: the training data's fingerprint in the run record; a resume on other data is refused;
- `arguments`: `ScriptArguments`, what a run needs beside the trainer config: data, rewards, output directory;
- `before_model`: every check of the recipe before the model loads (rewards, model files, context, tokenizer, data),
  one function for training and `--explain`;
- `resume`: what a run can resume from, said at start-up and on Ctrl-C (checkpoints on or off); a finished run;
- `precision`: float32 master weights for a half-precision full fine-tune without DeepSpeed (DDP, one process);
- `stage_precision`: the start-up line naming the precision of training, TRL's generation and evaluation;
- `training`: `train()`: tokenizer, datasets, rewards, `DrGRPOTrainer`, resume, save.
"""
