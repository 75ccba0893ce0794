"""An offline wheelhouse: every file `make install` needs, for a given Python and platform, in one folder, so that a
GPU node with no network installs from it (`make install WHEELHOUSE=dir`: pip with `--no-index --find-links dir`).

    make wheelhouse WHEELHOUSE=wheels [EXTRAS=dev,vllm] [TORCH=torch==2.13.0] \\
        [WHEEL_PYTHON=3.12 WHEEL_PLATFORM=manylinux_2_35_x86_64]        # another Python / platform than this one

1. pip's resolver in dry-run (`resolve`, as `make check-install` runs it) gives the exact stack `make install` would
   install here: the TORCH line, the project with its extras, and pip, setuptools and wheel (`make install` upgrades
   them first). Packages with no wheel (DeepSpeed ships only an sdist) come as their sdist; the offline install
   builds them against the installed torch (`--no-build-isolation`, as `make install` always does).
2. For another Python or platform, pip resolves again for that target (`--python-version`, `--platform`,
   `--only-binary=:all:`, which a foreign target requires), with each sdist-only package replaced by its own
   requirements from step 1 (its metadata needs a build, which only this machine can do).
3. `pip download --no-deps` fetches exactly the resolved files; `requirements.txt` in the folder lists them.

`wheelhouse_plan` and `torch_closure` are pure functions of pip's installation reports, tested on fabricated ones.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from drgrpo.setup.install_check import PROJECT, resolve

BUILD_TOOLS = ("pip", "setuptools>=68", "wheel")  # what `make install` upgrades before anything else


@dataclass(frozen=True)
class WheelhousePlan:
    """What to download: pinned wheels (`name==version`) and pinned sdists (packages that publish no wheel)."""

    wheels: list[str]
    sdists: list[str]


def _pin(item: Mapping[str, Any]) -> str:
    return f"{item['metadata']['name']}=={item['metadata']['version']}"


def _is_sdist(item: Mapping[str, Any]) -> bool:
    return not item["download_info"]["url"].endswith(".whl")


def wheelhouse_plan(report: Mapping[str, Any]) -> WheelhousePlan:
    """The files of a resolution, the project itself left out (it is installed from the clone)."""
    wheels, sdists = [], []
    for item in report.get("install", []):
        if canonicalize_name(item["metadata"]["name"]) == PROJECT:
            continue
        (sdists if _is_sdist(item) else wheels).append(_pin(item))
    return WheelhousePlan(sorted(wheels, key=str.lower), sorted(sdists, key=str.lower))


def _applies(line: str, environment: Mapping[str, str], extras: Sequence[str] = ()) -> Requirement | None:
    try:
        requirement = Requirement(line)
    except InvalidRequirement:
        return None
    if requirement.marker is None:
        return requirement
    env = dict(environment)
    return requirement if any(requirement.marker.evaluate({**env, "extra": e}) for e in ("", *extras)) else None


def target_requirements(report: Mapping[str, Any], extras: Sequence[str], torch_line: Sequence[str]) -> list[str]:
    """Top-level requirements for a resolve on another target: the TORCH line, the project's requirements (with its
    extras) and the build tools, each sdist-only package replaced by its own requirements from `report`."""
    environment = report.get("environment") or {}
    items = {canonicalize_name(item["metadata"]["name"]): item for item in report.get("install", [])}
    sdist_only = {name for name, item in items.items() if _is_sdist(item) and name != PROJECT}
    lines = [*torch_line, *BUILD_TOOLS]
    queue = [(line, tuple(extras)) for line in items[PROJECT]["metadata"].get("requires_dist") or []]
    while queue:
        line, own_extras = queue.pop(0)
        requirement = _applies(line, environment, own_extras)
        if requirement is None:
            continue
        name = canonicalize_name(requirement.name)
        if name in sdist_only:  # its own requirements instead (no wheel to read them from on the target)
            sdist_only.discard(name)
            queue += [(dep, ()) for dep in items[name]["metadata"].get("requires_dist") or []]
            continue
        requirement.marker = None
        lines.append(str(requirement))
    return lines


def torch_closure(report: Mapping[str, Any]) -> set[str]:
    """torch and everything it requires, recursively (its CUDA libraries, triton...), as canonical names: what the
    wheelhouse holds because of torch. The rest is what the project needs beyond torch."""
    environment = report.get("environment") or {}
    items = {canonicalize_name(item["metadata"]["name"]): item for item in report.get("install", [])}
    seen, stack = set(), ["torch"] if "torch" in items else []
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for line in items[name]["metadata"].get("requires_dist") or []:
            requirement = _applies(line, environment)
            if requirement is not None and canonicalize_name(requirement.name) in items:
                stack.append(canonicalize_name(requirement.name))
    return seen


def _pip(*args: str, python: str = sys.executable) -> None:
    if subprocess.run([python, "-m", "pip", *args]).returncode != 0:
        raise ValueError(f"pip {args[0]} failed (its message is above): pip {' '.join(args[:12])} ...")


# glibc versions of the legacy manylinux names (PEP 600): a manylinux_2_28 system also runs these wheels.
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def platform_tags(platform: str) -> list[str]:
    """The platform tags a system of `platform` installs: for `manylinux_2_28_x86_64` every manylinux tag of glibc
    2.28 down to 2.5 (and their legacy names), as pip itself accepts on such a system; pip's `--platform` takes only
    the tags it is given (matplotlib, for one, ships `manylinux_2_17` wheels only)."""
    match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if match is None:
        return [platform]
    glibc, arch = int(match.group(1)), match.group(2)
    tags = []
    for minor in range(glibc, 4, -1):
        tags.append(f"manylinux_2_{minor}_{arch}")
        if minor in _LEGACY_MANYLINUX:
            tags.append(f"{_LEGACY_MANYLINUX[minor]}_{arch}")
    return tags


def target_args(python_version: str | None, platform: str | None) -> list[str]:
    """pip's options for a foreign target: binaries only, as pip requires there."""
    args = []
    if python_version:
        args += ["--python-version", python_version]
    for tag in platform_tags(platform) if platform else []:
        args += ["--platform", tag]
    return [*args, "--only-binary=:all:"] if args else []


def build_wheelhouse(
    folder: str | Path,
    torch_line: Sequence[str],
    extras: Sequence[str],
    *,
    project: str | Path = ".",
    python_version: str | None = None,
    platform: str | None = None,
    no_deps: Sequence[str] = (),
) -> tuple[dict[str, Any], WheelhousePlan]:
    """Resolve and download into `folder` (module docstring); the resolution used and what was downloaded.
    `no_deps`: pinned wheels `make install` installs with `--no-deps`, downloaded without their dependencies."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    report = resolve([*torch_line, *BUILD_TOOLS], extras, project)
    host_plan = wheelhouse_plan(report)
    foreign = target_args(python_version, platform)
    if foreign:
        with tempfile.TemporaryDirectory() as scratch:
            saved = Path(scratch) / "report.json"
            requirements = target_requirements(report, extras, torch_line)
            try:
                _pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(saved), "--target",
                     str(Path(scratch) / "target"), *foreign, *requirements)  # fmt: skip
            except ValueError as error:
                where = f"Python {python_version or 'of this machine'} on {platform or 'this platform'}"
                raise ValueError(
                    f"{error} No set of wheels fits {where}: some package has no wheel there (vLLM 0.30 needs glibc "
                    "2.31 or newer on x86_64, WHEEL_PLATFORM=manylinux_2_31_x86_64: its llguidance 1.7 ships no older "
                    "wheel)."
                ) from None
            report = json.loads(saved.read_text())
        plan = WheelhousePlan(wheelhouse_plan(report).wheels, host_plan.sdists)
    else:
        plan = host_plan
    plan = WheelhousePlan([*plan.wheels, *no_deps], plan.sdists)
    if plan.wheels:
        _pip(
            "download", "--no-deps", "--quiet", "--dest", str(folder), *foreign or ["--only-binary=:all:"], *plan.wheels
        )
    if plan.sdists:
        _pip("download", "--no-deps", "--quiet", "--dest", str(folder), "--no-binary=:all:", *plan.sdists)
    (folder / "requirements.txt").write_text("\n".join([*plan.wheels, *plan.sdists]) + "\n")
    return report, plan


def folder_size(folder: str | Path, names: set[str] | None = None) -> int:
    """Bytes of the wheel and sdist files in `folder` (only those of the canonical `names`, if given)."""
    total = 0
    for path in Path(folder).iterdir():
        if not path.is_file() or path.name == "requirements.txt":
            continue
        name = canonicalize_name(path.name.split("-")[0])
        if names is None or name in names:
            total += path.stat().st_size
    return total
