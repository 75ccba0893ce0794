"""The offline wheelhouse: what it downloads (pure functions on fabricated pip reports), and (slow) `make wheelhouse`
then `make install WHEELHOUSE=...` with the network cut (`unshare -n`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request

import pytest
from conftest import PYTHON, ROOT, skip_unless_required

from drgrpo.setup.wheelhouse import target_args, target_requirements, torch_closure, wheelhouse_plan

LINUX = {"platform_system": "Linux", "sys_platform": "linux", "python_version": "3.11"}


def item(name: str, version: str, *requires: str, sdist: bool = False) -> dict:
    url = f"https://files.example/{name}-{version}" + (".tar.gz" if sdist else "-py3-none-any.whl")
    return {
        "metadata": {"name": name, "version": version, "requires_dist": list(requires)},
        "download_info": {"url": url},
    }


def report(*extra: dict) -> dict:
    return {
        "environment": LINUX,
        "install": [
            item(
                "drgrpo-recipes",
                "0.1.0",
                "torch<2.15,>=2.6",
                "trl==1.16.0",
                "deepspeed<0.20,>=0.18",
                'pytest>=8; extra == "dev"',
                'vllm<=0.31.0,>=0.22.0; extra == "vllm"',
            ),  # fmt: skip
            item("torch", "2.13.0", "sympy>=1.13.3", 'nvidia-nccl-cu13==2.29.7; platform_system == "Linux"'),
            item("sympy", "1.14.0", "mpmath<1.4,>=1.1.0"),
            item("mpmath", "1.3.0"),
            item("nvidia-nccl-cu13", "2.29.7"),
            item("trl", "1.16.0", "accelerate>=1.4.0"),
            item("accelerate", "1.12.0", "torch>=2.0.0", "numpy"),
            item("numpy", "2.3.0"),
            item("deepspeed", "0.19.8", "torch", "hjson", 'nvidia-ml-py; platform_system != "Darwin"', sdist=True),
            item("hjson", "3.1.0"),
            item("nvidia-ml-py", "13.580.82"),
            item("pytest", "8.4.0"),
            *extra,
        ],
    }


def test_plan_pins_every_file_and_keeps_sdists_apart():
    plan = wheelhouse_plan(report())
    assert plan.sdists == ["deepspeed==0.19.8"]  # DeepSpeed publishes no wheel: the node builds it
    assert "drgrpo-recipes==0.1.0" not in plan.wheels  # installed from the clone
    assert plan.wheels[:3] == ["accelerate==1.12.0", "hjson==3.1.0", "mpmath==1.3.0"] and len(plan.wheels) == 10


def test_a_foreign_target_resolves_the_sdists_requirements_instead():
    lines = target_requirements(report(), ["dev"], ["torch==2.13.0"])
    assert lines[:4] == [
        "torch==2.13.0",
        "pip",
        "setuptools>=68",
        "wheel",
    ]  # the TORCH line, what make install upgrades
    assert "pytest>=8" in lines and not any(line.startswith("vllm") for line in lines)  # only the requested extras
    assert not any(line.startswith("deepspeed") for line in lines)
    assert "hjson" in lines and "nvidia-ml-py" in lines  # DeepSpeed's own requirements take its place
    args = target_args("3.12", "manylinux_2_28_x86_64")
    assert args[:4] == ["--python-version", "3.12", "--platform", "manylinux_2_28_x86_64"]
    assert args[-1] == "--only-binary=:all:"
    platforms = args[3:-1:2]  # every manylinux tag such a system installs, matplotlib's manylinux2014 among them
    assert "manylinux2014_x86_64" in platforms and "manylinux_2_17_x86_64" in platforms and len(platforms) == 27
    assert target_args(None, "macosx_14_0_arm64") == ["--platform", "macosx_14_0_arm64", "--only-binary=:all:"]
    assert target_args(None, None) == []


def test_torch_closure_is_torch_and_what_it_requires():
    """What the wheelhouse holds because of torch (its CUDA libraries...); numpy is accelerate's, not torch's."""
    assert torch_closure(report()) == {"torch", "sympy", "mpmath", "nvidia-nccl-cu13"}
    mac = {**report(), "environment": {**LINUX, "platform_system": "Darwin"}}
    assert torch_closure(mac) == {"torch", "sympy", "mpmath"}  # the CUDA library is Linux-only


def pypi_reachable() -> bool:
    try:
        urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=10).close()
        return True
    except OSError:
        return False


def network_can_be_cut() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(["unshare", "-n", "true"]).returncode == 0


@pytest.mark.slow
def test_make_install_from_the_wheelhouse_with_the_network_cut(tmp_path):
    """`make wheelhouse` (this machine's Python and platform, EXTRAS=dev), then `make install WHEELHOUSE=...` into a
    new venv inside a network namespace with no network at all, then the stack imports there."""
    if not network_can_be_cut():
        skip_unless_required(
            "network_cut", "`unshare -n` is not allowed here (needs root or user namespaces): cannot cut the network"
        )
    if not pypi_reachable():
        skip_unless_required("pypi", "PyPI is not reachable: the wheelhouse cannot be downloaded")
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    built = subprocess.run(
        ["make", "-s", "wheelhouse", f"WHEELHOUSE={wheels}", "EXTRAS=dev"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    assert f"wheelhouse {wheels}:" in built.stdout and "deepspeed==" in built.stdout
    cut = ["unshare", "-n"]
    probe = "import socket; socket.create_connection(('pypi.org', 443), timeout=5)"
    assert subprocess.run([*cut, PYTHON, "-c", probe], capture_output=True).returncode != 0  # really offline
    # PIP_COMPILE=0 (pip's `--no-compile`): no bytecode written for the ~15,000 files installed, which took two
    # thirds of the install's CPU (140 -> 47 s on a Zen 3) and says nothing about the wheelhouse: the same files are
    # read from the same folder, and the imports below compile what they load.
    offline = {**os.environ, "PIP_COMPILE": "0"}
    installed = subprocess.run(
        [*cut, "make", "install", f"WHEELHOUSE={wheels}", f"VENV={venv}", "EXTRAS=dev"],
        cwd=ROOT, env=offline, capture_output=True, text=True, timeout=2400,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-3000:]
    imports = "import torch, trl, deepspeed, transformers, pytest, drgrpo.run.training; print(trl.__version__)"
    check = subprocess.run([*cut, str(venv / "bin" / "python"), "-c", imports], capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.strip().endswith("1.16.0"), check.stderr[-2000:]
