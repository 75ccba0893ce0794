"""Does a GPU install resolve to a supported stack? pip's resolver in dry-run, then vLLM, torch, transformers and TRL
checked against each other.

`make install TORCH=... EXTRAS=dev,vllm` once let pip pick a vLLM release TRL does not support, which pinned another
torch and replaced the CUDA build the user had chosen. `make check-install` asks pip what that install would pick
(`pip install --dry-run --ignore-installed --report -`, which downloads metadata only) and `check_report` checks
the resolution:

- vLLM lies in the range TRL supports (read from the installed TRL's own check, `trl_vllm_range`);
- torch is the release the user asked for (the TORCH line), not one an extra pulled in;
- every requirement that one of these packages (and this project) states on another is met by the resolved versions.

`check_report` is a pure function of pip's installation report (https://pip.pypa.io/en/stable/reference/
installation-report/), so tests feed it fabricated reports.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

PROJECT = "drgrpo-recipes"
CHECKED = ("vllm", "torch", "transformers", "trl", PROJECT)
# TRL's check of the installed vLLM: `Version("0.22.0") <= _vllm_base_version <= Version("0.31.0")`.
_TRL_VLLM_CHECK = re.compile(r'Version\("([^"]+)"\)\s*<=\s*_vllm_base_version\s*<=\s*Version\("([^"]+)"\)')


def trl_vllm_range(source: str | None = None) -> tuple[Version, Version]:
    """The vLLM releases TRL supports, (lowest, highest), read from `trl/import_utils.py` (the installed TRL's, or
    `source`)."""
    if source is None:
        spec = importlib.util.find_spec("trl.import_utils")  # the file, without importing TRL (and torch)
        if spec is None or spec.origin is None:
            raise ValueError("TRL is not installed here: `make install` first.")
        source = Path(spec.origin).read_text()
    match = _TRL_VLLM_CHECK.search(source)
    if match is None:
        raise ValueError(
            "Cannot find TRL's vLLM version check in trl/import_utils.py (is_vllm_available); TRL changed how it "
            "states the vLLM range: read it there and update _TRL_VLLM_CHECK."
        )
    return Version(match.group(1)), Version(match.group(2))


def resolved_packages(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """{canonical name: metadata} of the packages pip's report would install."""
    return {canonicalize_name(item["metadata"]["name"]): item["metadata"] for item in report.get("install", [])}


def _requirements(metadata: Mapping[str, Any], extras: Iterable[str]) -> list[Requirement]:
    """The requirements of one package that apply here (markers evaluated, with the requested extras)."""
    requirements = []
    for line in metadata.get("requires_dist") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is None or any(requirement.marker.evaluate({"extra": extra}) for extra in ("", *extras)):
            requirements.append(requirement)
    return requirements


def torch_request(pip_args: Sequence[str]) -> Requirement | None:
    """The torch requirement among the TORCH line's arguments (`torch==2.13.0 --index-url ...`), if any."""
    for arg in pip_args:
        if arg.startswith("-"):
            continue
        try:
            requirement = Requirement(arg)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) == "torch":
            return requirement
    return None


def check_report(
    report: Mapping[str, Any],
    *,
    vllm_range: tuple[Version, Version],
    torch_requirement: Requirement | None = None,
    extras: Sequence[str] = ("dev", "vllm"),
) -> list[str]:
    """Problems with a resolution (one sentence each, with the fix); an empty list when the stack is supported."""
    packages = resolved_packages(report)
    versions = {name: Version(meta["version"]) for name, meta in packages.items()}
    problems = []
    if "vllm" in extras and "vllm" not in versions:
        problems.append("vLLM is not in the resolution although the vllm extra was requested.")
    vllm = versions.get("vllm")
    low, high = vllm_range
    if vllm is not None and not low <= Version(vllm.base_version) <= high:
        problems.append(
            f"vLLM {vllm} is outside the range TRL supports ({low} to {high}): pin vllm>={low},<={high} "
            "(pyproject.toml's vllm extra does)."
        )
    torch = versions.get("torch")
    if torch_requirement is not None and torch is not None and not torch_requirement.specifier.contains(torch, True):
        problems.append(
            f"torch {torch} would replace the requested {torch_requirement}: an extra needs another torch; choose "
            "the torch release it needs (TORCH=...) or an older release of that extra."
        )
    for name in CHECKED:
        if name not in packages:
            continue
        own_extras = extras if name == PROJECT else ()
        for requirement in _requirements(packages[name], own_extras):
            other = canonicalize_name(requirement.name)
            if other in CHECKED and other in versions and not requirement.specifier.contains(versions[other], True):
                problems.append(
                    f"{packages[name]['name']} {packages[name]['version']} requires {requirement.name}"
                    f"{requirement.specifier}, but {versions[other]} was resolved."
                )
    return problems


def dry_run_command(
    pip_args: Sequence[str],
    extras: Sequence[str],
    project: str | Path = ".",
    report: str | Path = "-",
    python: str = sys.executable,
) -> list[str]:
    """The pip command that resolves `make install TORCH="<pip_args>" EXTRAS=<extras>` without installing anything.

    `make install` installs torch from the TORCH line first, then the project with the torch release pinned; here
    both go into one resolve, so an `--index-url` of the TORCH line becomes an `--extra-index-url` (torch from the
    PyTorch index, everything else from PyPI, as in the two steps of the install).
    """
    args = ["--extra-index-url" if arg == "--index-url" else arg for arg in pip_args]
    return [
        python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--report", str(report),
        *args, "-e", f"{project}[{','.join(extras)}]",
    ]  # fmt: skip


# pip's explanation of a failed resolution: "The conflict is caused by: ... vllm 0.33.0 depends on torch==2.14.0".
_CONFLICT_LINE = re.compile(r"ERROR|conflict is caused by|depends on|user requested|constraint", re.IGNORECASE)


def resolve(pip_args: Sequence[str], extras: Sequence[str], project: str | Path = ".") -> dict[str, Any]:
    """Run pip's resolver in dry-run; the installation report, or a `RuntimeError` with pip's own explanation."""
    torch = torch_request(pip_args)
    with tempfile.TemporaryDirectory() as folder:
        extra_args: list[str] = []
        if torch is not None:  # as `make install`: the extras resolve against the chosen torch, never replace it
            constraint = Path(folder) / "torch-constraint.txt"
            constraint.write_text(f"{torch}\n")
            extra_args = ["-c", str(constraint)]
        report = Path(folder) / "report.json"
        command = dry_run_command([*pip_args, *extra_args], extras, project, report)
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode == 0:
            return json.loads(report.read_text())
    output = (result.stdout + result.stderr).splitlines()
    reason = [line.strip() for line in output if _CONFLICT_LINE.search(line) and "is ignored" not in line]
    raise RuntimeError(f"pip cannot resolve {shlex.join(command[3:])}:\n" + "\n".join(reason[-15:]))


def format_versions(report: Mapping[str, Any]) -> str:
    """The resolved versions of the checked packages, one line."""
    packages = resolved_packages(report)
    return ", ".join(f"{packages[name]['name']} {packages[name]['version']}" for name in CHECKED if name in packages)
