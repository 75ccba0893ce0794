"""A GPU launch on a machine without GPUs ends in one line from the first rank, and no launcher report.

`accelerate launch --config_file accelerate_configs/zero3.yaml scripts/train.py RECIPE` runs torchrun inside
accelerate: 8 worker processes. On a machine without GPUs each of them failed on its own (8 copies of one error), and
torchrun then printed its `ChildFailedError` report (a traceback, then one block per rank: ~100 lines).

- `check_launched_worker(argv)`: scripts/train.py calls it before the recipe is parsed (before torch, TRL). In a
  torchrun worker whose recipe trains on GPUs (it does not set `use_cpu: true`) on a machine where there is no GPU,
  rank 0 prints one line naming the CPU setup, and the launch ends (below). Anywhere else it returns at once.
- `python -m drgrpo.setup.gpu_launch ACCELERATE_CONFIG`: `make train ACCELERATE_CONFIG=...` runs it before it
  launches: an accelerate config with `use_cpu: false` on a machine without GPUs is one line, status 2.

How the launch ends, and why this way. torchrun (torch.distributed.elastic) ends in one of three ways: every worker
exits 0 (status 0, silent: wrong, the launch failed); a worker exits non-zero (the `ChildFailedError` report, which
accelerate re-raises: the traceback and the report, whatever the exit code); or torchrun itself gets SIGTERM (it logs
"Received 15 death signal, shutting down workers", logs "Sending process N closing signal" for every
worker still alive, and accelerate exits 143 without a traceback). No exit code, error file or environment variable
of a worker changes this, and accelerate's config has no pre-launch check, so the quiet failure is the third way, with
every worker already gone: the other local ranks exit 0 (torchrun waits for the rest); local rank 0 waits for them,
then exits (status 2) while a watcher it forked sends SIGTERM to torchrun as soon as local rank 0 is a zombie, before
torchrun's next poll (every 0.1 s) reaps it and reads the status. Local rank 0 exits just after one of torchrun's
polls (it watches the count of torchrun's sleeps), so the watcher has the whole 0.1 s. Output: DeepSpeed's import
warning (accelerate's, before any worker starts), the one line, torchrun's one "Received" line; status 143.

The trade-off: this relies on torchrun's internals (torch 2.13, accelerate 1.16), and signalling the parent is the
only way a worker has to end torchrun without the report. When a step cannot be done (no psutil, a worker that does
not exit, a watcher too late), local rank 0's status 2 reaches torchrun and the launch fails as before, with the
report: never with status 0. `make train` needs none of this: it checks the config before it launches.

The bare `accelerate launch scripts/train.py RECIPE` (no `--config_file`, no accelerate config on the machine) runs
no torchrun: accelerate's simple launcher starts one process, copies its stderr through, and on a non-zero exit raises
a `CalledProcessError` from a `RuntimeError` holding that stderr again (the error line twice, then 27 lines of
traceback). Its SIGTERM handler exits quietly (status 143), so the process it started ends it that way
(`end_simple_launch`): once its stderr is copied through, it signals accelerate, which ends it. `check_launched_worker`
says the GPU line there too, and `ends_simple_launch_quietly` does the same after any user error of scripts/train.py.
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from drgrpo.core.errors import EXIT_USER_ERROR

CPU_CONFIG = "accelerate_configs/zero3_cpu.yaml"
CPU_RECIPE = "recipes/tiny_drgrpo.yaml"
# Device files one of which a GPU torch can use needs: NVIDIA (containers included), AMD ROCm, WSL2.
GPU_DEVICE_FILES = ("/dev/nvidia*", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")
TRUE_WORDS = ("true", "yes", "t", "y", "1")  # transformers' string_to_bool
SIBLINGS_WAIT_S = 60.0  # the other local ranks run the same check (a Python start-up each, on a busy machine)
TICK_WAIT_S = 1.0  # torchrun sleeps 0.1 s (accelerate's --monitor_interval) between polls of its workers
WATCH_S = 5.0


def no_gpu_reason(environ: Mapping[str, str] = os.environ) -> str | None:
    """Why torch can use no GPU here, or None when it can. Decided without torch when the answer is plain
    (CUDA_VISIBLE_DEVICES empty, no GPU device files on Linux); otherwise torch is asked."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    if sys.platform.startswith("linux") and not any(glob.glob(pattern) for pattern in GPU_DEVICE_FILES):
        return "no GPU driver: no /dev/nvidia*"
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return f"torch {torch.__version__} is a CPU build"
    return f"torch {torch.__version__} sees no GPU; `python -m drgrpo.setup.gpu_probe probe` says why"


def recipe_trains_on_cpu(argv: Sequence[str]) -> bool | None:
    """Whether a scripts/train.py command line trains on CPU (`use_cpu`, on the command line or in the recipe); None
    when it names no recipe (`--help`) or one that cannot be read (scripts/train.py then reports that)."""
    from drgrpo.core.errors import RecipeError
    from drgrpo.recipe.file import command_line_values, read_recipe, recipe_argv, recipe_path

    try:
        argv = recipe_argv(argv)
        path = recipe_path(argv)
        if path is None:
            return None
        recipe = read_recipe(path)
    except (RecipeError, OSError):
        return None
    given = command_line_values(argv).get("use_cpu")
    if given is not None:
        return not given or given[0].lower() in TRUE_WORDS  # a bare `--use_cpu` is true
    return recipe.get("use_cpu") is True


def is_torchrun_worker(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process is a worker started by torchrun's agent (accelerate's launcher for DeepSpeed and DDP)."""
    return all(key in environ for key in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "RANK"))


def worker_message(recipe: str, world_size: str, reason: str) -> str:
    """The one line rank 0 prints."""
    return (
        f"error: this launch trains {recipe} on {world_size} GPUs, and this machine has none ({reason}). Without "
        f"GPUs: `accelerate launch --config_file {CPU_CONFIG} scripts/train.py {CPU_RECIPE}` (ZeRO-3 on 2 CPU "
        "processes; `make demo-tiny` builds its model), or one process: `make train`."
    )


def config_message(config: str, processes: object, reason: str) -> str:
    """The one line `make train` prints for an accelerate config that needs GPUs."""
    return (
        f"error: {config} runs {processes} processes on GPUs (use_cpu: false), and this machine has none ({reason}). "
        f"Without GPUs: `make train ACCELERATE_CONFIG={CPU_CONFIG} RECIPE={CPU_RECIPE}` (ZeRO-3 on 2 CPU processes; "
        "`make demo-tiny` builds its model), or one process: `make train`."
    )


def simple_message(recipe: str, reason: str) -> str:
    """The one line of the bare `accelerate launch scripts/train.py RECIPE` (one process) on a machine without GPUs."""
    return (
        f"error: accelerate launch without --config_file runs {recipe} as one process on a GPU, and this machine has "
        f"none ({reason}). Without GPUs: `accelerate launch --config_file {CPU_CONFIG} scripts/train.py {CPU_RECIPE}` "
        "(ZeRO-3 on 2 CPU processes; `make demo-tiny` builds its model), or one process: `make train`."
    )


def check_launched_worker(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> None:
    """Return, unless this is a torchrun worker (or the one process of accelerate's simple launcher) of a recipe that
    trains on GPUs on a machine without one: then rank 0 prints one line and the launch ends (the module docstring),
    without returning."""
    torchrun = is_torchrun_worker(environ)
    launcher = None if torchrun else simple_launcher_pid(environ)
    if not torchrun and launcher is None or environ.get("ACCELERATE_USE_CPU", "").lower() in TRUE_WORDS:
        return
    if recipe_trains_on_cpu(argv) is not False:
        return
    reason = no_gpu_reason(environ)
    if reason is None:
        return
    from drgrpo.recipe.file import recipe_argv, recipe_path

    recipe = str(recipe_path(recipe_argv(argv)))
    if launcher is not None:
        print(simple_message(recipe, reason), file=sys.stderr, flush=True)
        end_simple_launch(launcher)
    if environ["RANK"] == "0":
        print(worker_message(recipe, environ.get("WORLD_SIZE", "several"), reason), file=sys.stderr, flush=True)
    end_worker(environ)


def simple_launcher_pid(environ: Mapping[str, str] = os.environ) -> int | None:
    """The pid of `accelerate launch` when this process is the one its simple launcher started (accelerate's
    variables set, no torchrun, the parent's command line `accelerate ... launch`), else None."""
    if "TORCHELASTIC_RUN_ID" in environ or "ACCELERATE_DYNAMO_BACKEND" not in environ:
        return None
    try:
        import psutil

        parent = psutil.Process(os.getppid())
        words = [Path(word).name for word in parent.cmdline()]
    except Exception:  # no psutil, or the parent is gone: the launch fails as before, with accelerate's traceback
        return None
    launcher = any(word == "accelerate" or word.startswith("accelerate.") for word in words) and "launch" in words
    return parent.pid if launcher else None


def end_simple_launch(launcher: int, exit_status: int = EXIT_USER_ERROR) -> NoReturn:
    """End accelerate's simple launch without its traceback: once accelerate has copied this process's stderr through
    (the pipe is empty, and a moment more for its write), SIGTERM to accelerate, whose handler exits quietly (143)
    and ends this process; `exit_status` if it does not (the launch then fails with accelerate's report, as before)."""
    import fcntl
    import termios

    sys.stdout.flush()
    sys.stderr.flush()
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            unread = bytearray(4)
            fcntl.ioctl(2, termios.FIONREAD, unread)
            if int.from_bytes(unread, sys.byteorder) == 0:
                break
            time.sleep(0.01)
    except OSError:  # stderr is not a pipe: nothing to wait for
        pass
    time.sleep(0.2)
    try:
        os.kill(launcher, signal.SIGTERM)
        time.sleep(WATCH_S)  # accelerate ends this process on its way out
    except OSError:
        pass
    os._exit(exit_status)


@contextlib.contextmanager
def ends_simple_launch_quietly(environ: Mapping[str, str] = os.environ) -> Iterator[None]:
    """Around scripts/train.py's `run_main`: a user error (its line printed, status 2) ends accelerate's simple launch
    quietly instead of with accelerate's traceback; anywhere else (no launcher, torchrun) nothing changes."""
    try:
        yield
    except SystemExit as exit_:
        if exit_.code == EXIT_USER_ERROR and (launcher := simple_launcher_pid(environ)) is not None:
            end_simple_launch(launcher)
        raise


def end_worker(environ: Mapping[str, str] = os.environ) -> NoReturn:
    """Leave the launch: other local ranks at once with status 0, local rank 0 last, with torchrun ended behind it."""
    sys.stdout.flush()
    sys.stderr.flush()
    if environ["LOCAL_RANK"] != "0":
        os._exit(0)
    try:
        _arm_launcher_end(os.getppid())
    except Exception:  # a best effort: without it the launch still fails, with torchrun's report
        pass
    # Non-zero even when the watcher is armed: if torchrun polls first after all, it fails the launch (with its
    # report) instead of counting 8 exits with status 0 as a finished run.
    os._exit(EXIT_USER_ERROR)


def _alive(process: Any) -> bool:
    """Whether a `psutil.Process` is running (neither exited nor a zombie)."""
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _arm_launcher_end(agent_pid: int) -> bool:
    """Wait for the other workers to be gone, then fork the watcher that ends torchrun once this process has exited;
    return just after one of torchrun's polls. False when it cannot be done (torchrun then reports the exit)."""
    try:
        import psutil
    except ImportError:
        return False
    if agent_pid <= 1:
        return False
    me = os.getpid()
    agent = psutil.Process(agent_pid)
    deadline = time.monotonic() + SIBLINGS_WAIT_S
    while any(child.pid != me and _alive(child) for child in agent.children()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    # torchrun's main thread sleeps 0.1 s between polls: each sleep is one voluntary context switch. Right after the
    # count moves, it has just polled and gone back to sleep, so this process's exit and the watcher's signal both
    # land inside that sleep, before the poll that would reap this process and see its exit status.
    switches = agent.num_ctx_switches().voluntary
    deadline = time.monotonic() + TICK_WAIT_S
    while agent.num_ctx_switches().voluntary == switches and time.monotonic() < deadline:
        time.sleep(0.0005)
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.close(write_end)
        _watch(read_end, me, agent_pid)
    os.close(read_end)
    return True  # write_end stays open until this process exits: the watcher then reads EOF


def _watch(read_end: int, worker_pid: int, agent_pid: int) -> NoReturn:
    """The watcher: once the worker has exited (a zombie torchrun has not reaped yet), SIGTERM to torchrun."""
    try:
        import psutil

        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # let go of the launcher's output: a caller reading it to the end is not held up
            os.dup2(devnull, fd)
        os.read(read_end, 1)  # EOF: the worker is exiting
        deadline = time.monotonic() + WATCH_S
        while time.monotonic() < deadline:
            try:
                zombie = psutil.Process(worker_pid).status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                break  # torchrun reaped it first: it has seen status 2 and fails the launch with its report
            if zombie:
                os.kill(agent_pid, signal.SIGTERM)
                break
            time.sleep(0.0001)
    finally:
        os._exit(0)


def check_accelerate_config(config: str) -> str | None:
    """The error line for an accelerate config that runs on GPUs when this machine has none, else None."""
    import yaml

    path = Path(config)
    if not path.is_file():
        shipped = ", ".join(sorted(str(p) for p in Path("accelerate_configs").glob("*.yaml")))
        return f"error: ACCELERATE_CONFIG={config}: no such file (the configs: {shipped or 'accelerate_configs/'})."
    settings = yaml.safe_load(path.read_text()) or {}
    if settings.get("use_cpu") is True:
        return None
    reason = no_gpu_reason()
    return None if reason is None else config_message(config, settings.get("num_processes", "several"), reason)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m drgrpo.setup.gpu_launch ACCELERATE_CONFIG", file=sys.stderr)
        return EXIT_USER_ERROR
    error = check_accelerate_config(args[0])
    if error:
        print(error, file=sys.stderr)
        return EXIT_USER_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
