"""The parts of issue 51 one by one, by hand: files that read back whole, a staged folder published in one rename, a
full disk recognised in each writer's words, the run lock, the data fingerprint, the non-finite check.
(End to end from the user's side: tests/test_run_integrity.py.)"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from drgrpo.algorithm.finite_steps import nonfinite_values
from drgrpo.core.disk import DiskFullError, disk_full, human_bytes
from drgrpo.core.durable import STAGING_FOLDER, publish_folder, remove_staging, staging_root
from drgrpo.core.errors import RecipeError, UsageError
from drgrpo.core.file_checks import file_problem
from drgrpo.run.data_fingerprint import check_resumed_data, data_record, dataset_fingerprint
from drgrpo.run.run_lock import LOCK_FILE, hold_output_dir


def cut(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


# -- files that read back whole -----------------------------------------------------------------------------------


def test_safetensors_header_against_the_file_size(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"a": torch.zeros(10), "b": torch.ones(3, 4)}, str(path))
    assert file_problem(path) is None
    size = path.stat().st_size
    cut(path, size - 1)
    assert file_problem(path) == f"model.safetensors is cut short: {size - 1} bytes where its header says {size}"
    cut(path, 20)  # inside the header
    assert file_problem(path).startswith("model.safetensors is cut short: its header claims ")
    path.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{bad}")
    assert file_problem(path) == "model.safetensors has an unreadable header (not JSON)"
    path.write_bytes(b"abc")
    assert file_problem(path) == "model.safetensors is 3 bytes, shorter than a safetensors header"
    save_file({"a": torch.zeros(2)}, str(path))
    path.write_bytes(path.read_bytes() + b"\0" * 8)
    assert file_problem(path).startswith("model.safetensors is longer than its header says")


def test_torch_archives_json_empty_and_missing(tmp_path):
    path = tmp_path / "optimizer.pt"
    torch.save({"state": {0: torch.arange(1000)}}, path)
    assert file_problem(path) is None
    cut(path, path.stat().st_size // 2)
    assert file_problem(path) == "optimizer.pt is not a whole torch archive (its zip directory is missing: cut short?)"
    (tmp_path / "state.json").write_text('{"global_step": 3')
    assert file_problem(tmp_path / "state.json").startswith("state.json is not valid JSON")
    (tmp_path / "empty.bin").write_bytes(b"")
    assert file_problem(tmp_path / "empty.bin") == "empty.bin is empty"
    assert file_problem(tmp_path / "missing.pt") == "missing.pt is missing"
    (tmp_path / "notes.md").write_text("anything")
    assert file_problem(tmp_path / "notes.md") is None  # other kinds: exists and not empty


# -- a folder published whole -------------------------------------------------------------------------------------


def test_a_staged_folder_appears_in_one_rename_and_replaces_a_stale_one(tmp_path):
    staged = staging_root(tmp_path) / "checkpoint-2"
    staged.mkdir(parents=True)
    (staged / "trainer_state.json").write_text("{}")
    stale = tmp_path / "checkpoint-2"
    stale.mkdir()
    (stale / "half.pt").write_text("x")
    publish_folder(staged, stale)
    assert sorted(p.name for p in stale.iterdir()) == ["trainer_state.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [STAGING_FOLDER, "checkpoint-2"]
    remove_staging(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2"]


def test_a_crash_before_the_rename_leaves_only_the_staging_folder(tmp_path, monkeypatch):
    staged = staging_root(tmp_path) / "checkpoint-3"
    staged.mkdir(parents=True)
    (staged / "model.safetensors").write_text("w")

    def killed(*args):
        raise KeyboardInterrupt  # what a signal during the save looks like to this code

    monkeypatch.setattr(os, "rename", killed)
    with pytest.raises(KeyboardInterrupt):
        publish_folder(staged, tmp_path / "checkpoint-3")
    monkeypatch.undo()
    assert not (tmp_path / "checkpoint-3").exists()
    from drgrpo.core.checkpoints import checkpoint_folders

    assert checkpoint_folders(tmp_path) == []  # no lister takes the staging folder for a checkpoint
    remove_staging(tmp_path)
    assert list(tmp_path.iterdir()) == []


# -- a full disk in each writer's words ---------------------------------------------------------------------------


def test_a_full_disk_is_recognised_in_each_writers_words(tmp_path, monkeypatch):
    import drgrpo.core.disk as disk

    assert disk_full(OSError(errno.ENOSPC, "No space left on device"), tmp_path)
    assert disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"), tmp_path)
    safetensors = Exception("Error while serializing: I/O error: No space left on device (os error 28)")
    assert disk_full(safetensors, tmp_path)
    torch_writer = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    monkeypatch.setattr(disk, "free_bytes", lambda path: 0)
    assert disk_full(torch_writer, tmp_path)
    monkeypatch.setattr(disk, "free_bytes", lambda path: 10**12)
    assert not disk_full(torch_writer, tmp_path)  # the same words with room left: not a full disk
    assert not disk_full(RuntimeError("CUDA out of memory"), tmp_path)
    wrapped = RuntimeError("save failed")
    wrapped.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert disk_full(wrapped, tmp_path)
    assert (human_bytes(0), human_bytes(1500), human_bytes(3_800_000)) == ("0 bytes", "1.5 KB", "3.8 MB")


def test_a_full_disk_while_writing_the_step_log_is_one_line(tmp_path, monkeypatch):
    import builtins

    from drgrpo.observe.step_log import _LogFile

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(builtins, "open", full)
    with pytest.raises(DiskFullError) as info:
        _LogFile().append(SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace(global_step=3), {"loss": 1.0})
    monkeypatch.undo()
    message = str(info.value)
    assert message.startswith(f"output_dir {str(tmp_path)!r}: the disk is full (") and "\n" not in message
    assert "free) while writing log_history.jsonl." in message and "rerun the same command" in message


# -- one run per output_dir ---------------------------------------------------------------------------------------


def test_the_lock_names_its_holder_and_is_released_on_exit(tmp_path):
    with hold_output_dir(tmp_path / "run"):
        holder = (tmp_path / "run" / LOCK_FILE).read_text()
        assert holder.startswith(f"pid {os.getpid()} on host {socket.gethostname()} since ")
        with pytest.raises(UsageError) as info, hold_output_dir(tmp_path / "run"):
            pass
        assert str(info.value).startswith(
            f"output_dir {str(tmp_path / 'run')!r} is in use by another run ({holder.strip()}): one output_dir "
        )
    with hold_output_dir(tmp_path / "run"):  # released: taken again at once
        pass


# -- the data fingerprint -----------------------------------------------------------------------------------------


def test_the_fingerprint_follows_the_rows_and_their_order():
    from datasets import Dataset

    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(3000)]
    same = dataset_fingerprint(Dataset.from_list(rows))
    assert dataset_fingerprint(Dataset.from_list([dict(row) for row in rows])) == same and len(same) == 16
    assert dataset_fingerprint(Dataset.from_list([rows[1], rows[0], *rows[2:]])) != same
    assert dataset_fingerprint(Dataset.from_list([*rows[:-1], {"prompt": "2999+1=", "answer": "3001"}])) != same


def test_a_resume_compares_the_record(caplog):
    now = data_record("b" * 16, ["dataset_path d.jsonl"], 10)
    check_resumed_data(None, now, "out", allow_change=False)  # no record
    check_resumed_data({"settings": {}}, now, "out", allow_change=False)  # a record from before fingerprints
    check_resumed_data({"data": now}, now, "out", allow_change=False)
    before = {"data": data_record("a" * 16, ["dataset_path d.jsonl"], 12)}
    with pytest.raises(RecipeError) as info:
        check_resumed_data(before, now, "out", allow_change=False)
    assert str(info.value) == (
        "output_dir 'out' holds a run that started on other training data: dataset_path d.jsonl now gives 10 rows, "
        f"fingerprint {'b' * 16}, the run started on 12 rows, fingerprint {'a' * 16} (the file changed, or what the "
        "recipe selects from it). To resume on the new data anyway, add --allow_data_change true; to train on it from "
        "step 0, use another output_dir (--output_dir DIR)."
    )
    with caplog.at_level(logging.WARNING):
        check_resumed_data(before, now, "out", allow_change=True)
    assert "allow_data_change: the run in out resumes on changed training data" in caplog.text


# -- the non-finite check -----------------------------------------------------------------------------------------


def test_nonfinite_values_by_hand():
    assert nonfinite_values({"loss": 0.5, "grad_norm": 3.0}) == {}
    assert nonfinite_values({"loss": None, "grad_norm": 1e38}) == {}
    bad = nonfinite_values({"loss": math.nan, "grad_norm": math.inf, "x": -math.inf})
    assert list(bad) == ["loss", "grad_norm", "x"] and math.isnan(bad["loss"])


def test_allow_data_change_is_bookkeeping():
    """allow_data_change is not a setting of the run: passing it never counts as a changed configuration."""
    from drgrpo.run.output_guard import BOOKKEEPING_KEYS

    assert "allow_data_change" in BOOKKEEPING_KEYS
    assert json.loads(json.dumps(data_record("f" * 16, ["x"], 1))) == {
        "fingerprint": "f" * 16,
        "sources": ["x"],
        "rows": 1,
    }
