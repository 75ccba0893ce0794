"""What every layer uses: the user-error machinery and the checkpoint folders of a run.

May import: the standard library only. Everything else in `drgrpo/` and `rewards/` may import this package.

Modules, each importing only the ones listed before it:
- `errors`: `RecipeError` and friends, and `run_main`, which prints a user error as one line with its fix;
- `checkpoints`: the `checkpoint-N` folders of an output directory, the newest complete one to resume from.
"""
