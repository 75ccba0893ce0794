"""Resuming an evaluation: the samples written so far (a torn last line cut off), and the check that the settings of
the run in a folder are the ones it was started with."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drgrpo.core.errors import command_flag
from drgrpo.evaluation.report import CONFIG_FILE, SAMPLES_FILE, SUMMARY_JSON, SUMMARY_MD

logger = logging.getLogger(__name__)


def read_samples(path: Path) -> list[dict]:
    """The rows of a samples file; a torn last line (the run was killed mid-write) is cut off the file."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    rows, good_end, start = [], 0, 0
    while start < len(raw):
        end = raw.find(b"\n", start)
        if end == -1:  # no newline: an unfinished write
            break
        line = raw[start:end].strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                line_number = raw.count(b"\n", 0, start) + 1
                raise ValueError(
                    f"{path}: line {line_number} is not JSON ({error}); delete the file or rerun with "
                    f"{command_flag('--overwrite true')}."
                ) from error
        good_end = start = end + 1
    if good_end < len(raw):
        logger.warning("%s: dropping an unfinished last line left by an interrupted run.", path)
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return rows


def _check_config(
    output_dir: Path,
    config: dict,
    overwrite: bool,
    optional: tuple[str, ...] = (),
    same: dict[str, Callable[[Any], Any]] | None = None,
) -> None:
    """Refuse to resume a folder whose run had other settings; `optional`: keys a folder written before they were
    recorded may lack (compared only when the folder has them); `same`: a key's normal form, applied to the folder's
    value before comparing (a model typed another way before its name was normalised)."""
    config_path = output_dir / CONFIG_FILE
    if overwrite:
        for name in (SAMPLES_FILE, SUMMARY_JSON, SUMMARY_MD, CONFIG_FILE):
            (output_dir / name).unlink(missing_ok=True)
    elif config_path.exists():
        previous = json.loads(config_path.read_text())
        previous.update({key: normal(previous[key]) for key, normal in (same or {}).items() if key in previous})
        keys = (set(previous) | set(config)) - {k for k in optional if k not in previous}
        changed = sorted(k for k in keys if previous.get(k) != config.get(k))
        if changed:
            details = "; ".join(f"{k}: {previous.get(k)!r} -> {config.get(k)!r}" for k in changed)
            raise ValueError(
                f"{output_dir} holds an evaluation with other settings ({details}). Use another output folder "
                f"({command_flag('--output_dir DIR')}), or {command_flag('--overwrite true')} to start again."
            )
    elif (output_dir / SAMPLES_FILE).exists():
        raise ValueError(
            f"{output_dir / SAMPLES_FILE} exists without {CONFIG_FILE}; use {command_flag('--overwrite true')}."
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    config_path.write_text(json.dumps(config, indent=2) + "\n")
