"""drgrpo/core/deepspeed_cpu.py: DeepSpeed on a CPU skips the shared-memory operator it would compile for nothing."""

from __future__ import annotations

import pytest
import torch

from drgrpo.core.deepspeed_cpu import SHM_COMM_OP, deepspeed_requested, skip_shm_comm_op


def test_deepspeed_is_requested_by_a_config_or_by_accelerate_launch(monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    assert not deepspeed_requested(None) and deepspeed_requested("ds.json") and deepspeed_requested({"a": 1})
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    assert deepspeed_requested(None)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "false")
    assert not deepspeed_requested(None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the operator is DeepSpeed's business")
def test_without_a_gpu_deepspeed_builds_no_shared_memory_operator(monkeypatch):
    deepspeed_ops = pytest.importorskip("deepspeed.ops")
    from deepspeed.comm.torch import build_shm_op

    monkeypatch.setattr(deepspeed_ops, "__compatible_ops__", {SHM_COMM_OP: True}, raising=False)
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    assert skip_shm_comm_op(None) is False  # no DeepSpeed asked for: untouched
    assert deepspeed_ops.__compatible_ops__[SHM_COMM_OP] is True
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    assert skip_shm_comm_op(None) is True
    assert build_shm_op() is None  # DeepSpeed's own check: nothing compiled, nothing loaded
