"""The GPU install: the vllm extra matches TRL's supported range, and `make check-install`'s check of a resolution."""

from __future__ import annotations

import subprocess
import urllib.request

import pytest
from conftest import PYTHON, ROOT
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from drgrpo.setup.install_check import check_report, dry_run_command, torch_request, trl_vllm_range

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


def check_install(pip_args: str) -> subprocess.CompletedProcess:
    command = [PYTHON, "scripts/check_install.py", "--pip_args", pip_args, "--extras", "dev,vllm"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)


@pytest.mark.slow
def test_real_resolver_passes_the_documented_line_and_fails_vllm_0_33():
    """`make check-install` as docs/install.md runs it (a minute or two: pip downloads metadata only)."""
    if not pypi_reachable():
        pytest.skip("PyPI is not reachable from this machine: pip's resolver cannot run")
    good = check_install("torch==2.13.0")
    assert good.returncode == 0, good.stdout + good.stderr[-3000:]
    assert "check-install: OK" in good.stdout and "vllm 0.30.0" in good.stdout.lower()
    bad = check_install("torch==2.13.0 vllm==0.33.0")
    assert bad.returncode == 1 and "check-install: FAILED" in bad.stdout
    assert "torch" in bad.stdout  # pip names the torch vLLM 0.33 pins, or the check names the replaced torch
