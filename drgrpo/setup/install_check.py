"""Does a GPU install resolve to a supported stack? pip's resolver in dry-run, then vLLM, torch, transformers and TRL
checked against each other.

`make install TORCH=... EXTRAS=dev,vllm` once let pip pick a vLLM release TRL does not support, which pinned another
torch and replaced the CUDA build the user had chosen. `make check-install` asks pip what that install would pick
(`pip install --dry-run --ignore-installed --report -`, which downloads metadata only) and `check_report` checks
the resolution:

- vLLM lies in the range TRL supports (read from the installed TRL's own check, `trl_vllm_range`);
- torch is the release the user asked for (the TORCH line), not one an extra pulled in;
- every requirement that one of these packages (and this project) states on another is met by the resolved versions;
- torch, torchvision and vLLM are builds for one CUDA major version (`cuda_build`, `cuda_problems`): pip accepts
  `torch==2.13.0+cu128` for vLLM's `torch==2.13.0` pin, but vLLM's PyPI wheels are CUDA 13 builds and will not load
  beside a CUDA 12 torch.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

PROJECT = "drgrpo-recipes"
CHECKED = ("vllm", "torch", "torchvision", "transformers", "trl", PROJECT)
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
    return problems + cuda_problems(report)


# The NVIDIA driver branch each CUDA major version needs (CUDA minor-version compatibility): NVIDIA's "Supported
# Drivers and CUDA Toolkit Versions" (docs.nvidia.com/datacenter/tesla/drivers/): R580 supports CUDA 13.x, R525 and
# later CUDA 12.x (the CUDA 12 release notes' minimum, 525.60.13).
MIN_DRIVER_BRANCH = {13: 580, 12: 525}
# The packages whose CUDA builds must agree: vLLM's kernels and torchvision's ops link against torch's CUDA runtime.
CUDA_CHECKED = ("torch", "torchvision", "vllm")
_LOCAL_CUDA = re.compile(r"^cu(\d+)$")  # PyTorch's and vLLM's local version labels: +cu128 (12.8), +cu130 (13.0)
_NAME_CUDA = re.compile(r"-cu(\d+)$")  # nvidia-cudnn-cu13, nvidia-nccl-cu12
_EXTRA_CUDA = re.compile(r"^cu(\d+)$")  # nvidia-cutlass-dsl[cu13]


@dataclass(frozen=True)
class CudaBuild:
    """What a package was built for: a CUDA major version, or None for a CPU build; and how that was read."""

    major: int | None
    evidence: str

    def describe(self) -> str:
        return "a CPU build" if self.major is None else f"a CUDA {self.major} build"


def _label_major(digits: str) -> int:
    """CUDA major version of a tag's digits: "128" and "130" hold the minor version (12.8, 13.0), the package names'
    and extras' "12" and "13" (nvidia-nccl-cu12, [cu13]) only the major version."""
    return int(digits[:2]) if len(digits) == 3 else int(digits)


def cuda_build(metadata: Mapping[str, Any], environment: Mapping[str, str] | None = None) -> CudaBuild | None:
    """The CUDA build of a resolved package, from its metadata; None when nothing says.

    First the local version label (`2.13.0+cu128`: CUDA 12; `+cpu`: a CPU build), as PyTorch's and vLLM's own wheel
    indexes tag their builds. Without a label (PyPI's builds), the CUDA libraries it requires: torch 2.13.0 from
    PyPI requires `cuda-toolkit[...]==13.0.3` and `nvidia-*-cu13` packages, vLLM 0.30.0 `nvidia-cutlass-dsl[cu13]`.
    Requirement markers are evaluated in `environment` (pip's report states the one it resolved for).
    """
    name, version = metadata["name"], Version(metadata["version"])
    if version.local:
        if version.local == "cpu":
            return CudaBuild(None, f"{name} {version}")
        label = _LOCAL_CUDA.match(version.local)
        if label:
            return CudaBuild(_label_major(label.group(1)), f"{name} {version}")
    for line in metadata.get("requires_dist") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({**(environment or {}), "extra": ""}):
            continue
        named = _NAME_CUDA.search(requirement.name)
        extra = next((m for m in map(_EXTRA_CUDA.match, sorted(requirement.extras)) if m), None)
        if named or extra:
            return CudaBuild(_label_major((named or extra).group(1)), f"it requires {requirement}")
        if canonicalize_name(requirement.name) == "cuda-toolkit":
            pinned = [Version(spec.version).major for spec in requirement.specifier if spec.operator == "=="]
            if pinned:
                return CudaBuild(pinned[0], f"it requires {requirement}")
    return None


def cuda_builds(report: Mapping[str, Any]) -> dict[str, CudaBuild | None]:
    """{name: CudaBuild or None (nothing says)} of the resolved torch, torchvision and vLLM.

    PyPI's torchvision names no CUDA library: an untagged torchvision is PyPI's build for PyPI's (untagged) torch of
    the release it pins, so beside an untagged torch it is that torch's build.
    """
    environment = report.get("environment") or {}
    packages = resolved_packages(report)
    builds = {name: cuda_build(packages[name], environment) for name in CUDA_CHECKED if name in packages}
    torch, vision = packages.get("torch"), packages.get("torchvision")
    if torch and vision and builds["torchvision"] is None and builds["torch"] is not None:
        if not Version(torch["version"]).local and not Version(vision["version"]).local:
            builds["torchvision"] = CudaBuild(builds["torch"].major, f"PyPI's build for torch {torch['version']}")
    return builds


def cuda_problems(report: Mapping[str, Any]) -> list[str]:
    """One sentence (with the fix) per package of `CUDA_CHECKED` whose CUDA build differs from torch's."""
    packages = resolved_packages(report)
    builds = cuda_builds(report)
    torch = builds.get("torch")
    if torch is None:
        return []
    torch_name = f"torch {packages['torch']['version']}"
    problems = []
    for name in ("vllm", "torchvision"):
        if name not in builds:
            continue
        build, label = builds[name], f"{packages[name]['name']} {packages[name]['version']}"
        if build is None and name == "torchvision" and Version(packages["torch"]["version"]).local:
            problems.append(
                f"{label} has no CUDA tag (PyPI's build, for PyPI's torch), but {torch_name} is {torch.describe()} "
                "from another index: take torch and torchvision from the same index."
            )
        if build is None or build.major == torch.major:
            continue
        fix = "use the torch build it was built for, or builds of both for one CUDA version (docs/install.md)"
        if name == "vllm" and build.major == 13:
            fix = 'use PyPI\'s torch, a CUDA 13 build (TORCH="torch==2.13.0", NVIDIA driver R580+; docs/install.md)'
        problems.append(
            f"{torch_name} is {torch.describe()}, but {label} is {build.describe()} ({build.evidence}): "
            f"its compiled code will not load; {fix}."
        )
    return problems


def cuda_summary(report: Mapping[str, Any]) -> str:
    """One line: `CUDA 13 (torch, torchvision, vllm): NVIDIA driver R580 or newer`, or what is known of the builds."""
    builds = {name: build for name, build in cuda_builds(report).items() if build is not None}
    majors = {build.major for build in builds.values()}
    if len(majors) != 1 or None in majors:
        return ", ".join(f"{name}: {build.describe()}" for name, build in builds.items()) or "no CUDA build named"
    (major,) = majors
    driver = MIN_DRIVER_BRANCH.get(major)
    needs = f": NVIDIA driver R{driver} or newer" if driver else ""
    return f"CUDA {major} ({', '.join(builds)}){needs}"


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
