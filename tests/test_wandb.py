"""wandb: the GPU recipes report to it under a run name derived from the recipe; offline, a tiny run needs no network,
writes its run folder with our diag/ keys, and never prints or saves the API key."""

from __future__ import annotations

import os
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import PYTHON, ROOT

from drgrpo.observe import metric_names as m

FAKE_KEY = "local-0123456789abcdef0123456789abcdef01234567"  # wandb keys are 40+ characters; this one is fake


@pytest.mark.parametrize("recipe", sorted((ROOT / "recipes").glob("qwen3_*.yaml")), ids=lambda p: p.stem)
def test_gpu_recipes_report_to_wandb_with_the_recipe_name(recipe: Path):
    settings = yaml.safe_load(recipe.read_text())
    assert settings["report_to"] == "wandb"
    assert settings["run_name"] == recipe.stem.replace("_", "-")


def wandb_records(path: Path) -> Iterator[bytes]:
    """The records of a `.wandb` transaction log: a 7-byte file header, then LevelDB-log framing (32 KiB blocks,
    7-byte record headers `<crc32, length, type>`, types FULL=1 / FIRST=2 / MIDDLE=3 / LAST=4). wandb 0.31 ships no
    Python reader for its own offline files, so the test reads the framing itself."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a wandb transaction log"
    block, position, parts = 32768, 7, []
    while position + 7 <= len(data):
        space = block - position % block
        if space < 7:  # a block's tail too short for a header is zero padding
            position += space
            continue
        _crc, length, kind = struct.unpack("<IHB", data[position : position + 7])
        payload = data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == 1:
            yield payload
        elif kind == 2:
            parts = [payload]
        elif kind == 3:
            parts.append(payload)
        elif kind == 4:
            yield b"".join([*parts, payload])


def read_offline_run(run_folder: Path) -> tuple[str, set[str]]:
    """(run name, every metric key of the history) of an offline run folder."""
    from wandb.proto import wandb_internal_pb2

    (log_file,) = run_folder.glob("run-*.wandb")
    name, keys = "", set()
    for raw in wandb_records(log_file):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run" and record.run.display_name:  # a later run record may leave the name out (an update)
            name = record.run.display_name
        elif kind == "history":
            keys.update(item.key or "/".join(item.nested_key) for item in record.history.item)
    return name, keys


@pytest.mark.slow
def test_offline_run_folder_has_diagnostics_and_no_key(tiny_model_path, addition_data, tmp_path):
    wandb_dir = tmp_path / "wandb-root"
    wandb_dir.mkdir()
    # An in-process wandb run of an earlier test (tests/test_recipes_run.py) leaves WANDB_SERVICE, the address of its
    # wandb-core service, in os.environ; a child inheriting it would log through that service, not its own.
    inherited = {key: value for key, value in os.environ.items() if key != "WANDB_SERVICE"}
    env = {
        **inherited,
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(wandb_dir),
        "WANDB_API_KEY": FAKE_KEY,
        "WANDB_PROJECT": "drgrpo-test",
        "HF_HUB_OFFLINE": "1",
    }
    output_dir = tmp_path / "run"
    command = [
        PYTHON, "scripts/train.py", "recipes/tiny_drgrpo.yaml",
        "--model_name_or_path", str(tiny_model_path), "--dataset_path", str(addition_data["train"]),
        "--output_dir", str(output_dir), "--max_steps", "2", "--logging_steps", "1",
        "--per_device_train_batch_size", "8", "--num_generations", "4",
        "--report_to", "wandb", "--run_name", "tiny-wandb-test",
    ]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]

    (run_folder,) = (wandb_dir / "wandb").glob("offline-run-*")
    name, keys = read_offline_run(run_folder)
    assert name == "tiny-wandb-test"
    expected = {m.PASS_RATE, m.PASS_AT_GROUP, m.GROUPS_ALL_CORRECT, m.GROUPS_ALL_WRONG, m.TRUNCATION_RATE}
    # The HF integration prefixes training metrics with "train/".
    assert {f"train/{key}" for key in expected} <= keys, sorted(keys)

    # The key must appear nowhere: not in the console output, not in the wandb folder, not in the training outputs.
    assert FAKE_KEY not in result.stdout and FAKE_KEY not in result.stderr
    leaked = [
        path
        for folder in (wandb_dir, output_dir)
        for path in folder.rglob("*")
        if path.is_file() and FAKE_KEY.encode() in path.read_bytes()
    ]
    assert leaked == []
