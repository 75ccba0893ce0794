"""Shared fixtures: a tiny locally built model (no hub) and the demo's task data."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> Path:
    """A random-weight tiny Qwen3 model + tokenizer folder, built once per test session."""
    from drgrpo.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=0)


@pytest.fixture(scope="session")
def addition_data(tmp_path_factory) -> dict:
    """The demo's addition task as train/test jsonl files."""
    from drgrpo.tasks import write_addition_task

    return write_addition_task(tmp_path_factory.mktemp("addition"), max_operand=19, num_test=50)
