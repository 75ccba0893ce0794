"""Shared fixtures: a tiny locally built model (no hub) and the demo's task data."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# `make test` sets MAKELEVEL, which makes fixes read `ARGS="--flag value"` (drgrpo.core.errors.command_flag); the tests
# that check a message see the plain command line unless they set it themselves.
os.environ.pop("MAKELEVEL", None)

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# Capabilities a machine must have for its tests to run rather than skip (`$DRGRPO_REQUIRE`: comma-separated names of
# `CAPABILITIES`, or `all`; quiet_machine: the sandbox's fairness test can only judge a machine not loaded past its
# limits). `.ci/run` sets `all`, so a test that would skip there fails instead.
REQUIRE_ENV = "DRGRPO_REQUIRE"
CAPABILITIES = frozenset(
    {"namespaces", "root", "system_python", "cgroups", "landlock", "prlimit", "pypi", "network_cut", "smollm2",
     "quiet_machine", "proc_stat", "shellcheck", "cpu_torch", "no_gpu"}
)  # fmt: skip


# Seconds each test file took in a recorded run (`DRGRPO_RECORD_DURATIONS=1 make test` rewrites it):
# parallel workers take the longest files first, so that no minute-long file starts last while the other worker idles.
# Only an order: no test reads a time from it.
DURATIONS_FILE = Path(__file__).with_name("durations.json")


def pytest_configure(config: pytest.Config) -> None:
    """Keep the files in the order `pytest_collection_modifyitems` gives them: pytest-xdist >= 3.7 re-sorts
    `--dist loadscope`'s files by their number of tests unless told not to, which handed the two longest files
    (the wheelhouse install and the GPU smoke, one test each) out last, one worker running them alone at the end."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under parallel workers (`make test`: pytest-xdist, one test file per worker at a time; this runs in each
    worker, which xdist starts with `workerinput`) files are handed out longest first (`DURATIONS_FILE`), a file not
    recorded there right after the recorded ones that took a minute if it holds end-to-end (`slow`) tests, else last.
    Each file's tests keep their order; one process (-n 0) keeps collection order."""
    if not hasattr(config, "workerinput"):
        return
    recorded = json.loads(DURATIONS_FILE.read_text()) if DURATIONS_FILE.is_file() else {}
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}

    def seconds(item: pytest.Item) -> float:
        name = item.path.relative_to(ROOT).as_posix()
        return recorded.get(name, 60.0 if item.path in slow_files else 0.0)

    items.sort(key=lambda item: -seconds(item))  # stable: each file's tests stay in order, together


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With DRGRPO_RECORD_DURATIONS=1, write each file's seconds (setup, call and teardown of its tests) to
    `DURATIONS_FILE`, from the run's own reports (in the controller, under workers)."""
    if os.environ.get("DRGRPO_RECORD_DURATIONS") != "1" or hasattr(session.config, "workerinput"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    totals: dict[str, float] = {}
    for reports in reporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                name = report.nodeid.split("::")[0]
                totals[name] = totals.get(name, 0.0) + report.duration
    ordered = {name: round(value, 1) for name, value in sorted(totals.items(), key=lambda kv: -kv[1]) if value >= 1}
    DURATIONS_FILE.write_text(json.dumps(ordered, indent=0) + "\n")


def default_sigint() -> None:
    """`preexec_fn` of a child a test stops with Ctrl-C (SIGINT): a shell starts a background job (`make test &`,
    `nohup`) with SIGINT ignored, children inherit that, and Python then installs no KeyboardInterrupt handler, so
    the child would run to its end and the test would fail for how it was launched."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def skip_unless_required(requirement: str, reason: str) -> NoReturn:
    """Skip the calling test for `reason` (a missing `requirement` of the machine), or fail it where `$DRGRPO_REQUIRE`
    names `requirement` or `all`: a skip is never silent on a machine that is meant to run the test."""
    if requirement not in CAPABILITIES or not reason.strip():  # a misspelt name could never be required
        pytest.fail(f"skip_unless_required({requirement!r}, {reason!r}): name one of {sorted(CAPABILITIES)} and why")
    required = {name.strip() for name in os.environ.get(REQUIRE_ENV, "").split(",") if name.strip()}
    unknown = sorted(required - CAPABILITIES - {"all"})
    if unknown:
        pytest.fail(f"{REQUIRE_ENV} names no capability {', '.join(unknown)}; choose: {sorted(CAPABILITIES)}, all")
    if requirement in required or "all" in required:
        pytest.fail(f"{reason}; {REQUIRE_ENV}={os.environ[REQUIRE_ENV]} requires {requirement!r} on this machine")
    # Not silent: the reason names the missing capability and how to require it, and pytest's `-ra` (pyproject's
    # addopts) lists every skip with its reason at the end of the run; CI (`DRGRPO_REQUIRE=all`) fails above instead.
    pytest.skip(reason=f"{reason} (needs {requirement!r}; {REQUIRE_ENV}={requirement} or all fails this test instead)")


def write_complete_checkpoint(
    output_dir: Path, step: int, *, skip: tuple[str, ...] = (), state: str | None = None
) -> Path:
    """`output_dir/checkpoint-STEP` with the files `Trainer._save_checkpoint` writes, in their real formats (a complete
    checkpoint reads back whole: drgrpo/core/file_checks.py), minus `skip`; `state`: trainer_state.json's text."""
    import torch
    from safetensors.torch import save_file

    folder = output_dir / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    writers = {
        "model.safetensors": lambda path: save_file({"w": torch.arange(6.0).reshape(2, 3)}, path),
        "optimizer.pt": lambda path: torch.save({"state": {0: {"step": torch.tensor(step)}}}, path),
        "scheduler.pt": lambda path: torch.save({"last_epoch": step}, path),
        "rng_state.pth": lambda path: torch.save({"python": step}, path),
        "trainer_state.json": lambda path: Path(path).write_text(
            state if state is not None else json.dumps({"global_step": step, "log_history": []})
        ),
    }
    for name, write in writers.items():
        if name not in skip:
            write(str(folder / name))
    return folder


def _torch_threads(count: int):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(count)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def one_torch_thread():
    """One torch thread in this process for the test: the tiny model gains nothing from threads, and on a shared CPU
    extra threads only contend (~10x slower). Restored after the test."""
    yield from _torch_threads(1)


@pytest.fixture
def two_torch_threads():
    """Two torch threads in this process for the test, whatever the worker runs: what only happens with a second
    thread (parallel kernels, their order of work). Restored after the test."""
    yield from _torch_threads(2)


@pytest.fixture
def run_script(monkeypatch, capfd):
    """`python SCRIPT ARGS...` run in this process, as typed from `cwd` (the clone by default) with `env` added to the
    environment: the script's `__main__` by runpy, its exit status, stdout and stderr (file descriptors included: the
    loggers and children of the script) as `subprocess.run` returns them. It skips a second interpreter's start and its
    imports of torch, transformers and TRL (~9 s of CPU each); a test of what only a fresh process shows (signals,
    start-up imports, threads at start) runs the script in a subprocess instead. The environment, the logging set-up,
    `sys.argv`, torch's thread count (and the choice of it, drgrpo/core/threads.py) and the garbage collector are
    restored after each call."""
    import gc
    import logging
    import runpy
    import subprocess

    from drgrpo.core import threads as thread_choice

    def run(script: str, *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None):
        capfd.readouterr()  # what the test printed before is not the script's
        environ, root = dict(os.environ), logging.getLogger()
        handlers, level = root.handlers[:], root.level
        root.handlers = []  # a fresh process has none: the script's logging.basicConfig takes effect, as typed
        threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None
        collecting = gc.isenabled()  # scripts/plan.py pauses the garbage collector for its own short life
        governor = thread_choice._GOVERNOR
        thread_choice._GOVERNOR = None  # a fresh process chooses its torch threads afresh, from the environment given
        try:
            with monkeypatch.context() as patch:
                patch.chdir(cwd)
                patch.setattr(sys, "argv", [script, *args])
                os.environ.update(env or {})  # restored with whatever the script itself set
                status = 0
                try:
                    runpy.run_path(str(ROOT / script), run_name="__main__")
                except SystemExit as exit_:
                    code = exit_.code
                    status = code if isinstance(code, int) else (0 if code is None else 1)
                    if isinstance(code, str):
                        print(code, file=sys.stderr)
        finally:
            for handler in root.handlers:
                handler.close()
            root.handlers, root.level = handlers, level
            os.environ.clear()
            os.environ.update(environ)
            if threads is not None:
                sys.modules["torch"].set_num_threads(threads)
            if collecting:
                gc.enable()
            thread_choice._GOVERNOR = governor
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess([PYTHON, script, *args], status, out, err)

    return run


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> Path:
    """A random-weight tiny Qwen3 model + tokenizer folder, built once per test session."""
    from drgrpo.experiments.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=0)


@pytest.fixture(scope="session")
def addition_data(tmp_path_factory) -> dict:
    """The demo's addition task as train/test jsonl files."""
    from drgrpo.experiments.tasks import write_addition_task

    return write_addition_task(tmp_path_factory.mktemp("addition"), max_operand=19, num_test=50)


@pytest.fixture
def unprivileged_tree() -> Path:
    """A copy of the `rewards` and `drgrpo` packages and the sandbox probes (as `tests/code_sandbox_probe.py`,
    `tests/code_sandbox_kernel_probe.py`, `tests/code_sandbox_isolation_probe.py` and
    `tests/code_sandbox_leftovers_probe.py`) that any user can read.

    The unprivileged-trainer tests run Python as uid 1000, which cannot enter a clone under a private folder
    (`mktemp -d` makes 0700 folders, and CI's clone may be under one), so they import from this copy instead.
    """
    folder = Path(tempfile.mkdtemp(prefix="drgrpo-unprivileged-"))
    try:
        for package in ("rewards", "drgrpo"):  # rewards imports drgrpo.core.errors
            shutil.copytree(ROOT / package, folder / package, ignore=shutil.ignore_patterns("__pycache__"))
        (folder / "tests").mkdir()
        probes = ("code_sandbox_probe.py", "code_sandbox_kernel_probe.py", "code_sandbox_isolation_probe.py")
        for probe in (*probes, "code_sandbox_leftovers_probe.py"):
            shutil.copy(ROOT / "tests" / probe, folder / "tests" / probe)
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
