"""Whether a saved file reads back as what it claims to be, checked cheaply (its header or index, never its data).

A checkpoint whose files merely exist can still be useless: a file cut short by a power loss, a full disk or a copy
that stopped (nothing a trainer writes is fsynced) exists, is not empty, and fails only when a resumed run loads it,
as `PytorchStreamReader failed reading zip archive` or `SafetensorError: incomplete metadata`. Each check here reads
what the format itself says about the file's length and compares it with the file on disk:

- `.safetensors`: an 8-byte header length, a JSON header, and the data after it, whose last tensor must end exactly
  at the end of the file (safetensors' own layout; huggingface/safetensors, "Format");
- `.pt` / `.pth` / `.bin` (`torch.save`'s zip archive since torch 1.6): the zip's end-of-central-directory record and
  central directory, which sit at the very end of the file, and every member's data inside the file;
- `.json`: parses.

Each costs one header read, microseconds to milliseconds whatever the file's size. Standard library only.
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

TORCH_SUFFIXES = (".pt", ".pth", ".bin")
# A safetensors header is a JSON object of tensor names; anything larger is not one (the format caps it at 100 MB).
MAX_SAFETENSORS_HEADER = 100_000_000


def safetensors_problem(path: Path) -> str | None:
    """Why the `.safetensors` file at `path` is not whole (a sentence), or None when its header and size agree."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            return f"{path.name} is {size} bytes, shorter than a safetensors header"
        (header_length,) = struct.unpack("<Q", prefix)
        if header_length > min(size - 8, MAX_SAFETENSORS_HEADER):
            return f"{path.name} is cut short: its header claims {header_length} bytes, the file has {size}"
        try:
            header = json.loads(f.read(header_length))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return f"{path.name} has an unreadable header (not JSON)"
    if not isinstance(header, dict):
        return f"{path.name} has an unreadable header (not a JSON object)"
    try:
        ends = [int(entry["data_offsets"][1]) for name, entry in header.items() if name != "__metadata__"]
    except (KeyError, TypeError, IndexError, ValueError):
        return f"{path.name} has an unreadable header (a tensor without data_offsets)"
    expected = 8 + header_length + max(ends, default=0)
    if expected != size:
        state = "cut short" if size < expected else "longer than its header says"
        return f"{path.name} is {state}: {size} bytes where its header says {expected}"
    return None


def torch_archive_problem(path: Path) -> str | None:
    """Why the `torch.save` file at `path` is not a whole zip archive (a sentence), or None when it is."""
    try:
        with zipfile.ZipFile(path) as archive:
            size = path.stat().st_size
            for member in archive.infolist():  # the central directory says where each member's data lies
                if member.header_offset + member.compress_size > size:
                    return f"{path.name} is cut short: its member {member.filename} ends past the file's end"
    except zipfile.BadZipFile:
        return f"{path.name} is not a whole torch archive (its zip directory is missing: cut short?)"
    return None


def json_problem(path: Path) -> str | None:
    """Why the JSON file at `path` does not parse (a sentence), or None."""
    try:
        json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return f"{path.name} is not valid JSON ({error})"
    return None


def file_problem(path: str | Path) -> str | None:
    """Why the file at `path` cannot be what its name claims (a sentence naming it), or None when it reads back whole.

    Missing, empty, a cut-short safetensors / torch archive, or JSON that does not parse; files of other kinds are
    only required to exist and not be empty."""
    path = Path(path)
    if not path.is_file():
        return f"{path.name} is missing"
    if path.stat().st_size == 0:
        return f"{path.name} is empty"
    if path.suffix == ".safetensors":
        return safetensors_problem(path)
    if path.suffix in TORCH_SUFFIXES:
        return torch_archive_problem(path)
    if path.suffix == ".json":
        return json_problem(path)
    return None
