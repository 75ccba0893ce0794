"""What every layer uses: the user-error machinery, the checkpoint folders of a run, and which model a name means.

May import: the standard library only (`models` imports huggingface_hub when it checks a hub id). Everything else in
`drgrpo/` and `rewards/` may import this package.

Modules, each importing only the ones listed before it:
- `errors`: `RecipeError` and friends, and `run_main`, which prints a user error as one line with its fix;
- `checkpoints`: the `checkpoint-N` folders of an output directory, the newest complete one to resume from;
- `models`: which model a name means (a local folder, a hub id that can be had), and loading from the cache first.
"""
