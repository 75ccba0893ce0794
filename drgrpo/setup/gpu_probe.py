"""The GPU smoke test's first steps: which GPUs to pin, and whether torch can use them (with the reason when not).

`scripts/gpu_smoke.sh` runs `python -m drgrpo.setup.gpu_probe pins` (which GPU each step uses) and then `probe` in the
pinned environment. One visible GPU per one-process step, whatever the machine has: TRL refuses `nn.DataParallel`,
which a bare `python scripts/train.py` on a multi-GPU box would otherwise get. The 2-process ZeRO-3 step takes the
first two.

The probe names what is wrong instead of "no GPU": a CPU build of torch; a CUDA build whose driver is too old (CUDA
13 needs an NVIDIA driver of branch R580 or newer; on an older one `torch.cuda.is_available()` is simply False); no
GPU visible; a GPU without bf16.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from drgrpo.setup.install_check import MIN_DRIVER_BRANCH


def _nvidia_smi(*args: str) -> list[str] | None:
    """nvidia-smi's output lines, or None when it is missing or fails."""
    if shutil.which("nvidia-smi") is None:
        return None
    result = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
    return [line.strip() for line in result.stdout.splitlines() if line.strip()] if result.returncode == 0 else None


def gpu_count() -> int | None:
    """GPUs the driver lists (`nvidia-smi -L`), or None without nvidia-smi."""
    lines = _nvidia_smi("-L")
    return None if lines is None else sum(line.startswith("GPU ") for line in lines)


def driver_version() -> str | None:
    """The NVIDIA driver version (`nvidia-smi --query-gpu=driver_version`), or None."""
    lines = _nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader")
    return lines[0] if lines else None


@dataclass(frozen=True)
class Pins:
    """CUDA_VISIBLE_DEVICES for the one-process steps and for the 2-process step (None: fewer than 2 GPUs)."""

    single: str
    pair: str | None
    reason: str


def gpu_pins(visible: str | None, count: int | None) -> Pins:
    """One GPU for the one-process steps, two for the 2-process step, from the user's CUDA_VISIBLE_DEVICES (kept, and
    narrowed to its first entries) or else the GPUs nvidia-smi lists."""
    if visible is not None and visible.strip() not in ("", "-1"):
        devices = [device.strip() for device in visible.split(",") if device.strip()]
        source = f"CUDA_VISIBLE_DEVICES={visible}"
    else:
        devices = [str(index) for index in range(count or 0)]
        source = f"{count} GPU(s) listed by nvidia-smi" if count is not None else "nvidia-smi not found"
    if not devices:
        return Pins("", None, f"no GPU to pin ({source})")
    pair = ",".join(devices[:2]) if len(devices) >= 2 else None
    reason = f"{source}: one-process steps on CUDA_VISIBLE_DEVICES={devices[0]}" + (
        f", the 2-process ZeRO-3 step on {pair}" if pair else " (the 2-process step needs 2 GPUs)"
    )
    return Pins(devices[0], pair, reason)


def driver_problem(torch_cuda: str | None, driver: str | None) -> str | None:
    """Why a CUDA build of torch cannot use this driver, if it cannot: CUDA 13 needs branch R580 or newer."""
    if torch_cuda is None or driver is None:
        return None
    needed = MIN_DRIVER_BRANCH.get(int(torch_cuda.split(".")[0]))
    branch = int(driver.split(".")[0])
    if needed is None or branch >= needed:
        return None
    return (
        f"torch is built for CUDA {torch_cuda}, which needs an NVIDIA driver of branch R{needed} or newer; this "
        f"machine's driver is {driver}: upgrade the driver (docs/install.md)"
    )


def probe(device: str) -> tuple[bool, str]:
    """(usable, one line): torch's build, the visible GPU, bf16, the driver; in GPU mode the line ends with the
    CUDA_VISIBLE_DEVICES this process sees (the pin)."""
    import torch

    version = torch.__version__
    if device == "cpu":
        return True, f"CPU mode: torch {version}, float32, {torch.get_num_threads()} thread(s)"
    ok, line = _gpu_probe(torch)
    return ok, f"{line} [CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}]"


def _gpu_probe(torch) -> tuple[bool, str]:
    version = torch.__version__
    cuda = torch.version.cuda
    if cuda is None:
        return False, f'torch {version} is a CPU build: install the CUDA build (make install TORCH="torch==2.13.0")'
    driver = driver_version()
    problem = driver_problem(cuda, driver)
    if problem:
        return False, problem
    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f"CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "no CUDA_VISIBLE_DEVICES set"
        found = "no NVIDIA driver (nvidia-smi not found)" if driver is None else f"driver {driver}"
        return False, f"torch {version} (CUDA {cuda}) sees no GPU: {found}, {where}"
    name = torch.cuda.get_device_name(0)
    if not torch.cuda.is_bf16_supported():
        return False, f"{name} has no bf16: the GPU recipes and this smoke test train in bf16 (Ampere or newer)"
    count = torch.cuda.device_count()
    return True, f"torch {version} (CUDA {cuda}), driver {driver}, {count} visible GPU: {name}, bf16 supported"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("pins", help="print three lines: the one-process GPU, the 2-process pair (or empty), the reason")
    probe_parser = sub.add_parser("probe", help="check torch and the GPU; exit 1 with the reason")
    probe_parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    args = parser.parse_args(argv)
    if args.command == "pins":
        pins = gpu_pins(os.environ.get("CUDA_VISIBLE_DEVICES"), gpu_count())
        print(f"{pins.single}\n{pins.pair or ''}\n{pins.reason}")
        return 0
    ok, line = probe(args.device)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
