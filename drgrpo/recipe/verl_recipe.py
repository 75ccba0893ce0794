"""The recipe a verl config converts into (`Conversion`), and the keys that take more than a renaming because verl and
a recipe count differently: its data files, its save/test frequency, the eval batch, Dr.GRPO's opt-ins.

- verl counts `trainer.save_freq`, `trainer.test_freq`, `trainer.total_training_steps` and its learning-rate warm-up
  in training steps, one rollout each; a recipe counts optimizer steps, `steps_per_rollout` of them a rollout
  (ppo_mini_batch updates x ppo_epochs). `per_rollout_counts` scales them, so that a run saves and evaluates as often.
- verl concatenates the files of `data.train_files`: several become a `dataset_mixture` without weights (all rows of
  every file), one a `dataset_path`.
- TRL evaluates whole groups of `num_generations` completions: `eval_batch` writes a per-device eval batch for which
  that holds at the world size (`drgrpo.recipe.batch_rules`), whenever the recipe evaluates.
- `dr_grpo: true` refuses the keys that change Dr.GRPO's objective (`drgrpo.algorithm.dr_grpo_keys`); a verl run that
  sets one (a non-zero `entropy_coeff`) trains with it, so `dr_grpo_opt_ins` keeps it with `dr_grpo_allow`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from drgrpo.algorithm.dr_grpo_keys import allowable_keys, refuses
from drgrpo.recipe.batch_rules import eval_batch_multiple, whole_group_eval_batch

NO_DATA = (
    "the verl config sets no data.train_files, so the recipe has no dataset_path: set it (or dataset_name / "
    "dataset_mixture) before training; plan.py and --explain refuse the recipe until then"
)


@dataclass
class Conversion:
    """A converted recipe: its keys (with the verl keys each came from), and what could not be carried over: what
    verl refuses (`invalid`), what the recipe cannot keep (`lossy`), infrastructure (`unmapped`), with reasons."""

    recipe: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    unmapped: dict[str, str] = field(default_factory=dict)
    lossy: dict[str, str] = field(default_factory=dict)
    invalid: list[str] = field(default_factory=list)
    unset: dict[str, list[str]] = field(default_factory=dict)  # shell variable -> the keys that need it (refused)
    notes: list[str] = field(default_factory=list)
    expanded: dict[str, str] = field(default_factory=dict)  # environment variables a launch script's values used
    world_size: int | None = None
    steps_per_rollout: int = 1  # optimizer steps per verl training step (ppo_mini_batch updates x ppo_epochs)
    no_data: str | None = None  # why the recipe has no training data (None: it has some)
    given: set[str] = field(default_factory=set, repr=False)  # the keys the verl config sets (the rest: defaults)

    def source(self, key: str) -> str:
        return key if key in self.given else f"{key} (verl's default)"

    def set(self, key: str, value: Any, source: str) -> None:
        self.recipe[key] = value
        self.sources[key] = source


def data_files(config: dict[str, Any], out: Conversion) -> None:
    """`data.train_files` / `data.val_files`: one file as `dataset_path` / `dataset_test_path`; several training
    files as a `dataset_mixture` without weights, which concatenates them as verl does."""
    for key, target in (("data.train_files", "dataset_path"), ("data.val_files", "dataset_test_path")):
        files = config.get(key)
        if files is None:
            continue
        files = files if isinstance(files, list) else [files]
        if len(files) == 1:
            out.set(target, files[0], key)
        elif files and target == "dataset_path":
            out.set(
                "dataset_mixture",
                [{"dataset_path": path} for path in files],
                f"{key}, {len(files)} files: no weights, so all rows of every file, concatenated as verl does",
            )
        elif files:
            out.lossy[key] = (
                f"{len(files)} files: a recipe evaluates on one dataset_test_path (a file or a folder): put them in "
                "one folder, or keep one"
            )
        else:
            out.lossy[key] = "an empty list: no file to read"
    if "dataset_path" not in out.recipe and "dataset_mixture" not in out.recipe:
        files = config.get("data.train_files")
        out.no_data = (
            NO_DATA
            if files is None
            else f"data.train_files={files!r} gives the recipe no data: set dataset_path (or dataset_mixture) by hand"
        )


def set_frequency(config: dict[str, Any], out: Conversion, verl_key: str, prefix: str) -> None:
    """verl's `trainer.save_freq` / `trainer.test_freq` (every N training steps, <= 0 never) as TRL's
    `{prefix}_strategy` and `{prefix}_steps` (scaled to optimizer steps by `per_rollout_counts`)."""
    every, source = config[verl_key], out.source(verl_key)
    if every > 0:
        out.set(f"{prefix}_strategy", "steps", source)
        out.set(f"{prefix}_steps", int(every), source)
    else:
        out.set(f"{prefix}_strategy", "no", source)


def per_rollout_counts(out: Conversion) -> None:
    """verl counts saving, testing, the run's length and the warm-up in training steps (one rollout each, and one
    learning-rate step); a recipe in optimizer steps: multiply each by the optimizer steps per rollout."""
    steps = out.steps_per_rollout
    if steps == 1:
        return
    scaled = []
    for key in ("save_steps", "eval_steps", "max_steps", "warmup_steps"):
        value = out.recipe.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            out.set(key, value * steps, f"{out.sources[key]}: {value} rollouts x {steps} optimizer steps per rollout")
            scaled.append(key)
    if scaled:
        out.notes.append(
            f"verl counts {', '.join(scaled)} in training steps (one rollout each); a recipe in optimizer steps, "
            f"{steps} per rollout here (ppo_mini_batch updates x ppo_epochs): scaled by {steps}"
        )


def eval_batch(out: Conversion) -> None:
    """When the recipe evaluates, a per_device_eval_batch_size TRL starts with: its eval batch (x world size) must
    hold whole groups of num_generations (transformers' default 8 often does not: rollout.n=5)."""
    if out.recipe.get("eval_strategy", "no") == "no" or out.world_size is None:
        return
    n, world = int(out.recipe["num_generations"]), out.world_size
    out.set(
        "per_device_eval_batch_size",
        whole_group_eval_batch(n, world),
        f"none (verl validates the whole set at once): a multiple of {eval_batch_multiple(n, world)}, so that the "
        f"eval batch x {world} GPUs holds whole groups of rollout.n={n}, as TRL requires",
    )


def dr_grpo_opt_ins(out: Conversion) -> None:
    """Under `dr_grpo: true`, the keys verl trains with that change Dr.GRPO's objective (a non-zero entropy_coef)
    are kept knowingly with `dr_grpo_allow`, as verl's run has them; the family card then names them."""
    if not out.recipe.get("dr_grpo"):
        return
    kept = [key for key in allowable_keys() if key in out.recipe and refuses(key, out.recipe[key])]
    if not kept:
        return
    out.set(
        "dr_grpo_allow",
        kept,
        f"{', '.join(out.sources[key] for key in kept)}: verl trains Dr.GRPO with it, so the recipe keeps it "
        "knowingly (not the paper's objective; the family card says so)",
    )
    out.notes.append(
        f"dr_grpo_allow: {kept}: verl adds {', '.join(f'{key}={out.recipe[key]}' for key in kept)} to Dr.GRPO's "
        f"objective; for the paper's objective instead, delete {', '.join(kept)} and dr_grpo_allow"
    )
