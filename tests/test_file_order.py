"""`make test`'s file order: under pytest-xdist's `--dist loadscope` workers take the longest recorded files first
(tests/durations.json), not the files with the most tests (xdist >= 3.7's own re-sort, which ran the one-test
minute-long files last, one worker alone at the end)."""

from __future__ import annotations

import json
import shutil
import subprocess

from conftest import PYTHON, ROOT

TEST = "import os\n\ndef test_{n}():\n    open(os.environ['ORDER_LOG'], 'a').write('{name}\\n')\n"


def test_the_longest_recorded_file_runs_first_though_another_has_more_tests(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", tests / "conftest.py")
    (tests / "durations.json").write_text(json.dumps({"tests/test_long.py": 90.0, "tests/test_many.py": 1.0}))
    (tests / "test_long.py").write_text(TEST.format(n=0, name="long"))
    (tests / "test_many.py").write_text("".join(TEST.format(n=n, name="many") for n in range(5)))
    log = tmp_path / "order.log"
    result = subprocess.run(
        [PYTHON, "-m", "pytest", "-q", "-n", "1", "--dist", "loadscope", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "ORDER_LOG": str(log), "HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert log.read_text().split() == ["long"] + ["many"] * 5
