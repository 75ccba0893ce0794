"""The GPU install: the vllm extra matches TRL's supported range, and `make check-install`'s check of a resolution."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request

import pytest
from conftest import PYTHON, ROOT, skip_unless_required
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from drgrpo.setup.install_check import (
    check_report,
    cuda_build,
    cuda_builds,
    cuda_summary,
    dry_run_command,
    torch_request,
    trl_vllm_range,
)

TRL_RANGE = (Version("0.22.0"), Version("0.31.0"))


def test_vllm_extra_is_trls_supported_range():
    """The pin and TRL's own check (read from the installed TRL) cannot drift apart."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (line,) = extras["vllm"]
    requirement = Requirement(line)
    low, high = trl_vllm_range()
    assert requirement.name == "vllm" and requirement.specifier == SpecifierSet(f">={low},<={high}")
    # What the specifier admits is what TRL accepts (TRL compares the release without its local "+cu129" part).
    for version, supported in [(low, True), (high, True), ("0.21.9", False), ("0.31.1", False), ("0.33.0", False)]:
        assert requirement.specifier.contains(str(version)) is supported


def test_trl_range_is_read_from_trls_check():
    source = 'if not (Version("0.22.0") <= _vllm_base_version <= Version("0.31.0")):\n    warnings.warn(...)'
    assert trl_vllm_range(source) == TRL_RANGE
    with pytest.raises(ValueError, match="TRL changed how it states the vLLM range"):
        trl_vllm_range("def is_vllm_available(): return True")


def package(name: str, version: str, *requires: str) -> dict:
    return {"metadata": {"name": name, "version": version, "requires_dist": list(requires)}, "requested": False}


PROJECT = package(
    "drgrpo-recipes", "0.1.0", "torch<2.15,>=2.6", "trl==1.16.0", "transformers<6,>=5.20",
    'vllm<=0.31.0,>=0.22.0; extra == "vllm"', 'pytest>=8; extra == "dev"',
)  # fmt: skip
TRL = package("trl", "1.16.0", "transformers>=4.56.2", "accelerate>=1.4.0", 'vllm<0.32,>=0.22; extra == "vllm"')


def report(*packages: dict) -> dict:
    return {"version": "1", "install": [PROJECT, TRL, *packages]}


def test_a_supported_stack_passes():
    good = report(
        package("vllm", "0.30.0", "transformers>=5.10.4", "torch==2.13.0"),
        package("torch", "2.13.0+cu128"),
        package("transformers", "5.24.0"),
    )
    assert check_report(good, vllm_range=TRL_RANGE, torch_requirement=Requirement("torch==2.13.0")) == []


def test_vllm_0_33_fails_naming_the_range_and_the_replaced_torch():
    bad = report(
        package("vllm", "0.33.0", "transformers>=5.10.4", "torch==2.14.0"),
        package("torch", "2.14.0"),
        package("transformers", "5.24.0"),
    )
    problems = check_report(bad, vllm_range=TRL_RANGE, torch_requirement=Requirement("torch==2.13.0"))
    assert problems[0] == (
        "vLLM 0.33.0 is outside the range TRL supports (0.22.0 to 0.31.0): pin vllm>=0.22.0,<=0.31.0 "
        "(pyproject.toml's vllm extra does)."
    )
    assert problems[1].startswith("torch 2.14.0 would replace the requested torch==2.13.0")
    assert "drgrpo-recipes 0.1.0 requires vllm<=0.31.0,>=0.22.0, but 0.33.0 was resolved." in problems
    assert len(problems) == 3


def test_inconsistent_requirements_between_the_four_are_named():
    # vLLM 0.31 needs transformers < 5.18, this project >= 5.20: no resolution should pair them.
    bad = report(
        package("vllm", "0.31.0", "transformers<5.18,>=4.56", "torch==2.13.0"),
        package("torch", "2.13.0"),
        package("transformers", "5.24.0"),
    )
    assert check_report(bad, vllm_range=TRL_RANGE) == [
        "vllm 0.31.0 requires transformers<5.18,>=4.56, but 5.24.0 was resolved."
    ]
    missing = report(package("torch", "2.13.0"), package("transformers", "5.24.0"))
    assert check_report(missing, vllm_range=TRL_RANGE) == [
        "vLLM is not in the resolution although the vllm extra was requested."
    ]
    assert check_report(missing, vllm_range=TRL_RANGE, extras=("dev",)) == []


def test_the_dry_run_mirrors_make_install():
    args = ["torch==2.13.0", "--index-url", "https://download.pytorch.org/whl/cu128"]
    assert torch_request(args) == Requirement("torch==2.13.0")
    command = dry_run_command(args, ["dev", "vllm"], "/repo", python="py")
    assert command == [
        "py", "-m", "pip", "install", "--dry-run", "--ignore-installed", "--report", "-", "torch==2.13.0",
        "--extra-index-url", "https://download.pytorch.org/whl/cu128", "-e", "/repo[dev,vllm]",
    ]  # fmt: skip


def pypi_reachable() -> bool:
    try:
        urllib.request.urlopen("https://pypi.org/simple/vllm/", timeout=10).close()
        return True
    except OSError:
        return False


def check_installs(*pip_args: str) -> list[subprocess.CompletedProcess]:
    """`scripts/check_install.py` as a user's pip runs it, once per `pip_args`, all at once (pip's resolver mostly
    waits on PyPI): this machine's own pip configuration (local find-links holding a CPU torch, local mirrors) is
    switched off, so that pip resolves from PyPI alone."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    commands = [[PYTHON, "scripts/check_install.py", "--pip_args", args, "--extras", "dev,vllm"] for args in pip_args]
    running = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for command in commands
    ]
    results = []
    for command, process in zip(commands, running, strict=True):
        stdout, stderr = process.communicate(timeout=1200)
        results.append(subprocess.CompletedProcess(command, process.returncode, stdout, stderr))
    return results


@pytest.mark.slow
def test_real_resolver_passes_the_documented_line_and_fails_vllm_0_33():
    """`make check-install` as docs/install.md runs it (a minute or two: pip downloads metadata only): the README's
    GPU line resolves to torch, torchvision and vLLM of one CUDA major version."""
    if not pypi_reachable():
        skip_unless_required("pypi", "PyPI is not reachable from this machine: pip's resolver cannot run")
    good, bad = check_installs("torch==2.13.0", "torch==2.13.0 vllm==0.33.0")
    assert good.returncode == 0, good.stdout + good.stderr[-3000:]
    assert "check-install: OK" in good.stdout and "vllm 0.30.0" in good.stdout.lower()
    assert "CUDA builds: CUDA 13 (torch, torchvision, vllm): NVIDIA driver R580 or newer" in good.stdout
    assert bad.returncode == 1 and "check-install: FAILED" in bad.stdout
    assert "torch" in bad.stdout  # pip names the torch vLLM 0.33 pins, or the check names the replaced torch


# Real wheel metadata from PyPI (requirements under an extra left out): vLLM 0.30.0 and 0.22.0, torch 2.13.0 and
# 2.11.0, torchvision 0.28.0. Every vLLM release TRL 1.16 supports pins one of these torch releases.
PYPI = json.loads((ROOT / "tests" / "fixtures" / "pypi_cuda_metadata.json").read_text())
LINUX = {"platform_system": "Linux", "sys_platform": "linux", "python_version": "3.11", "platform_machine": "x86_64"}


def pypi_package(key: str, version: str | None = None) -> dict:
    metadata = dict(PYPI[key])
    if version is not None:  # the same release from another index, with its local version label
        metadata["version"] = version
    return {"metadata": metadata, "requested": False}


def gpu_report(torch_version: str | None = None, torchvision_version: str | None = None) -> dict:
    return {
        "version": "1",
        "environment": LINUX,
        "install": [
            PROJECT,
            TRL,
            pypi_package("vllm 0.30.0 (PyPI)"),
            pypi_package("torch 2.13.0 (PyPI)", torch_version),
            pypi_package("torchvision 0.28.0 (PyPI)", torchvision_version),
            package("transformers", "5.24.0"),
        ],
    }


def test_cuda_builds_are_read_from_pypi_metadata_and_version_labels():
    torch = PYPI["torch 2.13.0 (PyPI)"]
    assert cuda_build(torch, LINUX).major == 13  # cuda-toolkit[...]==13.0.3, nvidia-*-cu13
    assert cuda_build(PYPI["torch 2.11.0 (PyPI)"], LINUX).major == 13
    assert cuda_build(torch, {**LINUX, "platform_system": "Darwin"}) is None  # the CUDA deps are Linux-only
    vllm = cuda_build(PYPI["vllm 0.30.0 (PyPI)"], LINUX)
    assert vllm.major == 13 and "nvidia-cutlass-dsl[cu13]" in vllm.evidence
    assert cuda_build(PYPI["vllm 0.22.0 (PyPI)"], LINUX).major == 13
    assert cuda_build(PYPI["torchvision 0.28.0 (PyPI)"], LINUX) is None  # PyPI's torchvision names no CUDA library
    assert cuda_build({**torch, "version": "2.13.0+cu128"}).major == 12
    assert cuda_build({**torch, "version": "2.13.0+cu130"}).major == 13
    assert cuda_build({**torch, "version": "2.13.0+cpu"}).major is None
    assert cuda_build({"name": "vllm", "version": "0.30.0+cu129"}).major == 12


def test_pypi_stack_is_one_cuda_major_and_names_the_driver():
    good = gpu_report()
    assert check_report(good, vllm_range=TRL_RANGE, torch_requirement=Requirement("torch==2.13.0")) == []
    assert cuda_summary(good) == "CUDA 13 (torch, torchvision, vllm): NVIDIA driver R580 or newer"
    assert cuda_builds(good)["torchvision"].evidence == "PyPI's build for torch 2.13.0"


def test_a_cuda_12_torch_under_cuda_13_vllm_is_refused_in_one_line():
    """pip accepts torch 2.13.0+cu128 for vLLM's `torch==2.13.0`; the check does not."""
    mixed = gpu_report("2.13.0+cu128", "0.28.0+cu128")
    problems = check_report(mixed, vllm_range=TRL_RANGE, torch_requirement=Requirement("torch==2.13.0"))
    assert problems == [
        "torch 2.13.0+cu128 is a CUDA 12 build, but vllm 0.30.0 is a CUDA 13 build (it requires "
        "nvidia-cutlass-dsl[cu13]==4.7.1): its compiled code will not load; use PyPI's torch, a CUDA 13 build "
        '(TORCH="torch==2.13.0", NVIDIA driver R580+; docs/install.md).'
    ]
    assert "\n" not in problems[0]
    cpu = check_report(gpu_report("2.13.0+cpu"), vllm_range=TRL_RANGE)
    assert cpu[0].startswith("torch 2.13.0+cpu is a CPU build, but vllm 0.30.0 is a CUDA 13 build")


def test_torchvision_of_another_cuda_build_than_torch_is_refused():
    labelled = check_report(gpu_report("2.13.0+cu130", "0.28.0+cu128"), vllm_range=TRL_RANGE)
    assert labelled == [
        "torch 2.13.0+cu130 is a CUDA 13 build, but torchvision 0.28.0+cu128 is a CUDA 12 build (torchvision "
        "0.28.0+cu128): its compiled code will not load; use the torch build it was built for, or builds of both for "
        "one CUDA version (docs/install.md)."
    ]
    untagged = check_report(gpu_report("2.13.0+cu130"), vllm_range=TRL_RANGE)
    assert untagged == [
        "torchvision 0.28.0 has no CUDA tag (PyPI's build, for PyPI's torch), but torch 2.13.0+cu130 is a CUDA 13 "
        "build from another index: take torch and torchvision from the same index."
    ]


def test_check_install_script_refuses_a_saved_mixed_report(tmp_path):
    """`scripts/check_install.py --report` on the +cu128-under-CUDA-13 resolution: exit 1, the reason on one line."""
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(gpu_report("2.13.0+cu128", "0.28.0+cu128")))
    command = [PYTHON, "scripts/check_install.py", "--report", str(saved), "--pip_args", "torch==2.13.0"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "check-install: FAILED\n- torch 2.13.0+cu128 is a CUDA 12 build, but vllm 0.30.0 is a CUDA 13 build" in (
        result.stdout
    )
    saved.write_text(json.dumps(gpu_report()))
    good = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert good.returncode == 0
    assert "CUDA builds: CUDA 13 (torch, torchvision, vllm): NVIDIA driver R580 or newer" in good.stdout


def test_no_doc_or_command_recommends_a_torch_of_another_cuda_major():
    """Every vLLM in TRL's range is a CUDA 13 build: no install line in the README, docs, Makefile or scripts points
    torch at a CUDA 12 (or older) PyTorch index. docs/install.md names that index once, in prose, as what breaks."""
    index = re.compile(r"download\.pytorch\.org/whl/cu1[0-2]\d")
    files = [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").glob("*.md"))]
    files += [*sorted((ROOT / "scripts").rglob("*.py")), *sorted((ROOT / "scripts").rglob("*.sh"))]
    offending = []
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            is_command = path.suffix != ".md" or line.startswith("    ")  # a code line, not prose
            if is_command and index.search(line):
                offending.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offending, offending
