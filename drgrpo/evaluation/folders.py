"""The default output folder of an evaluation: `outputs/eval/<model>/<benchmark>[-<settings>]`.

Evaluations of one model and benchmark with settings that change the samples get folders of their own, so that `N=1`
greedy and `N=4` sampled never collide (a folder holds one run; `eval_config.json` refuses others). The suffix names
only the settings that differ from the evaluator's defaults, so the default evaluation keeps the folder it always
had, and rerunning a command finds its own folder again (and resumes there):

| setting | suffix part | e.g. |
|---|---|---|
| `n` (not 1) | `n<n>` | `n4` |
| `temperature` (not 0) | `t<temperature>` | `t1.0` |
| `top_p` (not 1.0) | `p<top_p>` | `p0.95` |
| `max_new_tokens` (not 3000) | `tok<tokens>` | `tok256` |
| `seed` (not 0) | `seed<seed>` | `seed1` |
| `max_problems` (set) | `first<N>` | `first50` |
| prompt template (not `chat`) | its name | `qwen_math` |
| answer extraction (not `math_verify`) | its name | `boxed_only` |
| system prompt, chat-template kwargs, few-shot turns, extra stop tokens (any set) | `prompt<hash>` | `prompt3fa2c1` |
| Python tool budget (not 0) | `tool<B>` | `tool2` |
| precision set by `--dtype` or the recipe's `bf16` | `bf16`, `fp32`, `fp16` | `fp32` |

`math500-n4-t1.0` is `make eval BENCH=math500 N=4`. An evaluation started before folders had suffixes (in
`<benchmark>/`, its `eval_config.json` without a `dtype`) is resumed where it is when its settings are the ones asked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path

from drgrpo.evaluation.dtypes import SHORT, EvalPrecision
from drgrpo.evaluation.report import CONFIG_FILE

logger = logging.getLogger(__name__)

DEFAULT_ROOT = Path("outputs/eval")
PROMPT_EXTRAS = ("system_prompt", "chat_template_kwargs", "chat_examples", "extra_eos_tokens")


def model_label(model_name_or_path: str) -> str:
    """The one name of a model in an evaluation's folder, `eval_config.json` and `eval-compare` rows: a local folder by
    its resolved path, relative to the current folder when inside it (`outputs/demo/model`, however it was typed:
    `./outputs/demo/model`, its absolute path, `outputs/demo/model/`), else absolute (`../run1` from /work/clone is
    `/work/run1`); a prepared short name or a hub id as it is."""
    path = Path(model_name_or_path).expanduser()
    if not path.is_dir():
        return str(model_name_or_path)
    resolved, here = path.resolve(), Path.cwd().resolve()
    return resolved.relative_to(here).as_posix() if resolved.is_relative_to(here) else resolved.as_posix()


def sanitize(text: str) -> str:
    """`text` as one folder name: runs of anything but letters, digits, `.`, `_` and `-` become `_`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip("/").removeprefix("./")).strip("_") or "model"


def settings_suffix(config: dict, max_problems: int | None, precision: EvalPrecision) -> str:
    """The settings of `config` (an `eval_config.json`) that differ from the evaluator's defaults, as `n4-t1.0`
    (the table in this module's docstring); "" for the default evaluation."""
    parts = []
    if config["n"] != 1:
        parts.append(f"n{config['n']}")
    if config["temperature"] != 0:
        parts.append(f"t{float(config['temperature'])}")
    if config["top_p"] != 1:
        parts.append(f"p{float(config['top_p'])}")
    if config["max_new_tokens"] != 3000:
        parts.append(f"tok{config['max_new_tokens']}")
    if config["seed"] != 0:
        parts.append(f"seed{config['seed']}")
    if max_problems is not None:
        parts.append(f"first{max_problems}")
    if config["prompt_template"] != "chat":
        parts.append(config["prompt_template"])
    if config["answer_extraction_mode"] != "math_verify":
        parts.append(config["answer_extraction_mode"])
    extras = [config.get(key) or None for key in PROMPT_EXTRAS]
    if any(extras):  # too long for a name: a short hash tells them apart
        digest = hashlib.sha256(json.dumps(extras, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
        parts.append(f"prompt{digest[:6]}")
    if config.get("tool_max_calls"):
        parts.append(f"tool{config['tool_max_calls']}")
    if precision.chosen:
        parts.append(SHORT.get(precision.dtype, precision.dtype))
    return sanitize("-".join(parts)) if parts else ""


def default_output_dir(
    model: str, benchmark: str, config: dict, max_problems: int | None, precision: EvalPrecision
) -> Path:
    """`outputs/eval/<model>/<benchmark>[-<settings>]`, or the suffix-less folder of an evaluation started before
    suffixes existed whose settings are these (so that it resumes instead of starting over). `<model>` is the
    model's `model_label` as one folder name: one model, however typed, one folder, never a hidden `.._run1`."""
    base = DEFAULT_ROOT / sanitize(model_label(model))
    suffix = settings_suffix(config, max_problems, precision)
    folder = base / (f"{benchmark}-{suffix}" if suffix else benchmark)
    legacy = base / benchmark / CONFIG_FILE
    if suffix and not (folder / CONFIG_FILE).exists() and not precision.chosen and legacy.is_file():
        try:
            previous = json.loads(legacy.read_text())
        except (OSError, ValueError):
            return folder
        if "dtype" not in previous and previous == {k: v for k, v in config.items() if k != "dtype"}:
            logger.info("%s holds this evaluation (from before folders named their settings): resuming there.", legacy)
            return legacy.parent
    return folder
