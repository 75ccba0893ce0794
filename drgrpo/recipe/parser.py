"""The train script's argument parser: TRL's `TrlParser` with the keys in groups, and errors as `RecipeError`s.

`--help` lists the keys in the order a user needs them: the Dr.GRPO switch and advantage keys, data, rewards,
diagnostics, the output directory guard, then the most-used TRL and transformers keys; `--help-all` lists all of
them. Before the keys, `--help` lists the flags to run before training (`--explain`, `--show_prompts`, `--traceback`).
Each key is put in the group of the class that declares it (the project's own classes first, else the library
class it comes from), so a key added to a dataclass lands in the right group without being listed here.

Argparse errors raise a `RecipeError` instead of printing the usage of every key; a bad value, on the command line
or in a recipe, is said with its key, value, place and expected type (`check_value`). Keys are never abbreviated, and
`--key null` (`NULL_VALUES`) gives None for a key whose type admits it, as `key: null` does in a recipe file.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any, get_args, get_type_hints

from transformers import TrainingArguments
from trl import GRPOConfig, ModelConfig, TrlParser

from drgrpo.algorithm.config import DrGRPOConfig
from drgrpo.algorithm.eos import EosArguments
from drgrpo.algorithm.family import FamilyArguments
from drgrpo.algorithm.rollout.arguments import EngineArguments, ToolArguments
from drgrpo.algorithm.sampler_correction import SamplerCorrectionArguments
from drgrpo.algorithm.step_speed import StepSpeedArguments
from drgrpo.core.errors import UsageError
from drgrpo.data import DataArguments
from drgrpo.observe.diagnostics import DiagnosticsArguments
from drgrpo.run.arguments import ScriptArguments
from drgrpo.run.output_guard import OutputDirArguments
from rewards import RewardArguments

# A command-line value that unsets an optional key (YAML's spellings of null, and Python's): `--dataset_path null`.
NULL_VALUES = frozenset({"null", "Null", "NULL", "~", "None"})  # not "none": a value of report_to, scale_rewards
USAGE = "python scripts/train.py RECIPE.yaml [--key value ...]   (--help-all: every key)"
# What to run before training, printed first by --help: the flags a user needs on a login node, before the keys.
BEFORE_TRAINING = """before training (no GPU, no model weights):
  --explain         print the recipe's GRPO family card (advantage, loss, KL,
                    staleness) after the checks training runs, then exit
  --show_prompts N  print the first N training prompts exactly as the trainer
                    renders them, then exit
  --traceback       on an error, the full traceback instead of one line (or
                    set DRGRPO_DEBUG=1)
  python scripts/plan.py RECIPE: batch, context and memory at the target
                    world size"""
# (declaring class, group title), in the order --help prints them.
GROUPS: tuple[tuple[type, str], ...] = (
    (DrGRPOConfig, "Dr.GRPO: the switch and the group advantage"),
    (FamilyArguments, "GRPO family: baseline, KL in the reward, dynamic sampling"),
    (DataArguments, "data and prompts"),
    (RewardArguments, "rewards"),
    (ToolArguments, "Python tool: multi-turn rollout (docs/tools.md)"),
    (DiagnosticsArguments, "diagnostics"),
    (EosArguments, "end-of-answer tokens"),
    (StepSpeedArguments, "speed: bf16 on CPU, padding, the LM head"),
    (EngineArguments, "generation without vLLM: the CPU engine (docs/demo.md)"),
    (SamplerCorrectionArguments, "the sampler-vs-learner correction (vLLM and the CPU engine)"),
    (OutputDirArguments, "output directory"),
    (ModelConfig, "model (TRL ModelConfig)"),
    (GRPOConfig, "GRPO trainer (TRL GRPOConfig)"),
    (TrainingArguments, "training loop (transformers TrainingArguments)"),
)
# The library keys plain --help shows; --help-all shows the rest.
COMMON_LIBRARY_KEYS = frozenset(
    {
        "model_name_or_path", "model_revision", "dtype", "attn_implementation", "use_peft", "lora_r", "lora_alpha",
        "lora_target_modules",
        "num_generations", "max_completion_length", "temperature", "top_p", "num_iterations", "epsilon",
        "reward_weights", "chat_template_kwargs", "use_vllm", "vllm_mode", "vllm_gpu_memory_utilization",
        "vllm_max_model_length", "vllm_server_host", "vllm_importance_sampling_correction",
        "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_max", "log_completions",
        "generation_batch_size", "steps_per_generation",
        "output_dir", "learning_rate", "lr_scheduler_type", "warmup_steps", "weight_decay", "max_grad_norm",
        "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps", "num_train_epochs", "bf16",
        "use_cpu", "gradient_checkpointing", "seed", "logging_steps", "save_strategy", "save_steps",
        "save_total_limit", "report_to", "run_name",
    }
)  # fmt: skip


def _is_library(cls: type) -> bool:
    return cls.__module__.startswith(("trl", "transformers"))


def declaring_class(dataclass_type: type, name: str) -> type:
    """The class that declares field `name`: the most derived of the project's own classes that annotates it, else
    the least derived library class (TRL re-declares some transformers keys only to change their defaults)."""
    declaring = [cls for cls in dataclass_type.__mro__ if name in cls.__dict__.get("__annotations__", {})]
    own = [cls for cls in declaring if not _is_library(cls)]
    return own[0] if own else declaring[-1]


def _position(cls: type, field: dataclasses.Field) -> int:
    return list(cls.__dict__["__annotations__"]).index(field.name)


def group_title(cls: type) -> str:
    """The `--help` group of the keys `cls` declares."""
    titles = dict(GROUPS)
    if cls in titles:
        return titles[cls]
    # A class not listed (a new mixin, or a base class TRL adds): the group of the first listed class of the same
    # origin (the project's, or a library's) that derives from it.
    for group_class, title in GROUPS:
        if _is_library(group_class) == _is_library(cls) and issubclass(group_class, cls):
            return title
    return GROUPS[-1][1]


class KeyHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each key once (`--learning_rate LEARNING_RATE`), without HF's `--learning-rate` alias, and the
    description (`BEFORE_TRAINING`) as written, line by line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "".join(indent + line for line in text.splitlines(keepends=True))

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        return f"{action.option_strings[0]} {self._format_args(action, self._get_default_metavar_for_optional(action))}"


class RecipeParser(TrlParser):
    """`TrlParser` with grouped `--help` (all keys when `help_all`) and `RecipeError`s instead of usage dumps."""

    def __init__(self, dataclass_types: tuple[type, ...], *, help_all: bool = False) -> None:
        self.help_all = help_all
        self.optional_keys: set[str] = set()  # the keys whose type admits None: the ones `--key null` may unset
        self._key_groups: dict[str, argparse._ArgumentGroup] = {}
        epilog = None if help_all else "Most TRL and transformers keys are hidden here: --help-all lists every key."
        super().__init__(
            dataclass_types,
            usage=USAGE,
            allow_abbrev=False,
            description=BEFORE_TRAINING,
            epilog=epilog,
            formatter_class=KeyHelpFormatter,
        )

    def _add_dataclass_arguments(self, dtype: type) -> None:
        if not self._key_groups:  # created in GROUPS order on the first call, whatever order the dataclasses come in
            self._key_groups = {title: self.add_argument_group(title) for _, title in GROUPS}
        type_hints = get_type_hints(dtype)
        fields = [(declaring_class(dtype, field.name), field) for field in dataclasses.fields(dtype) if field.init]
        # Within a group, keys in the order their class declares them (`dr_grpo` before the keys it sets).
        fields.sort(key=lambda pair: _position(*pair))
        for cls, field in fields:
            field.type = type_hints[field.name]
            if type(None) in get_args(field.type):
                self.optional_keys.add(field.name)
            before = len(self._actions)
            self._parse_dataclass_field(self._key_groups[group_title(cls)], field)
            hidden = not self.help_all and _is_library(cls) and field.name not in COMMON_LIBRARY_KEYS
            for action in self._actions[before:]:
                # `--no_KEY` (HF's complement of a true-by-default flag) repeats KEY's help: `--KEY false` says it.
                if hidden or action.option_strings[0].startswith("--no_"):
                    action.help = argparse.SUPPRESS

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        """A command-line value typed by argparse; None for `--key null` (an optional key only); a wrong value said
        with its key, value and type."""
        if len(arg_strings) == 1 and arg_strings[0] in NULL_VALUES:
            if action.dest not in self.optional_keys:
                key = action.dest
                raise UsageError(
                    f"command line: --{key} {arg_strings[0]}: {key} cannot be unset, it always has a value; give one "
                    f"(`python scripts/train.py --help` lists its type and default), or leave --{key} out to keep the "
                    "recipe's."
                )
            return None
        try:
            return super()._get_values(action, arg_strings)
        except argparse.ArgumentError:
            for value in arg_strings:
                check_value(action.dest, value, action, "command line")
            raise

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"command line: {message}. `python scripts/train.py --help` lists the keys and their types.")


def make_parser(*, help_all: bool = False) -> RecipeParser:
    return RecipeParser((ScriptArguments, DrGRPOConfig, ModelConfig), help_all=help_all)


def actions_by_key(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The action that parses each key (the positive one of a `--key` / `--no_key` pair)."""
    actions: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if action.option_strings and not action.option_strings[0].startswith("--no_"):
            actions.setdefault(action.dest, action)
    return actions


def _type_name(action: argparse.Action) -> str:
    """The converter's name: "float", "int", "string_to_bool", ... (TRL wraps `X | None` converters in a function
    that also accepts "none" and keeps the inner name)."""
    return getattr(action.type, "__name__", "")


def expected_type(action: argparse.Action) -> str | None:
    """What a key takes, in words, or None when any value goes (strings, dicts, library objects)."""
    if action.choices is not None:
        return "one of " + ", ".join(str(choice) for choice in action.choices)
    return {"float": "a number", "int": "an integer", "string_to_bool": "true or false"}.get(_type_name(action))


def _fits(value: Any, action: argparse.Action) -> bool:
    if isinstance(value, str):  # as argparse converts a command-line string
        try:
            converted = action.type(value) if action.type is not None else value
        except (TypeError, ValueError, argparse.ArgumentTypeError):
            return False
        return action.choices is None or converted in action.choices
    if action.choices is not None:
        return value in action.choices or str(value) in [str(choice) for choice in action.choices]
    name = _type_name(action)
    if name == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "string_to_bool":
        return isinstance(value, bool)
    return True


def check_value(key: str, value: Any, action: argparse.Action, where: str) -> None:
    """Raise a `RecipeError` naming the key, value, place and expected type when `value` does not fit the key."""
    expected = expected_type(action)
    if expected is None or value is None:
        return
    values = value if isinstance(value, list) and action.nargs in ("+", "*") else [value]
    for item in values:
        if not _fits(item, action):
            default = f" (default: {action.default})" if action.default not in (None, argparse.SUPPRESS) else ""
            fix = f"fix it in the recipe, or override it with --{key} VALUE" if where.startswith("recipe") else ""
            raise UsageError(
                f"{where}: {key}: {item!r} is not {expected}. {key} takes {expected}{default}"
                + (f"; {fix}." if fix else ".")
            )


def check_values(parser: argparse.ArgumentParser, values: Mapping[str, Any], where: str) -> None:
    """`check_value` for every known key of a recipe mapping `values`."""
    actions = actions_by_key(parser)
    for key, value in values.items():
        if key in actions:
            check_value(key, value, actions[key], where)
