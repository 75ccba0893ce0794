"""Whether this CPU computes bfloat16 natively, read from its feature flags: what `bf16: auto` decides on a CPU.

bf16 autocast on a CPU runs the matmuls in bfloat16 (oneDNN). With the instructions for it, AVX512-BF16
(`avx512_bf16` in `/proc/cpuinfo`: AMD Zen 4+, Intel Cooper Lake and Sapphire Rapids+), AMX (`amx_bf16`) or ARM's
BF16 extension (`bf16` in `/proc/cpuinfo`'s Features; `hw.optional.arm.FEAT_BF16` on Apple M2+), SmolLM2-135M's
forward + backward ran 2.7x faster than float32 (issue 29's table). Without them torch emulates bf16 with float32
instructions and is *slower* than float32: on an AVX2-only AMD EPYC (Zen 2), one 896 x 576 by 576 x 1536 matmul took
594 ms in bf16 and 63 ms in float32 (9.4x slower; 1 thread, load ~5). So `auto` turns bf16 on only where a flag says
the hardware has it, and says which flag it looked for where it does not.

`cpu_bf16_support` is a pure function of the flags (tested with and without each); `this_cpu_bf16` reads them once.
`resolve_bf16` turns a recipe's `bf16` value (`auto`, unset, true, false) into the bool TRL and transformers take.
"""

from __future__ import annotations

import functools
import platform
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

X86_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
ARM_BF16_FLAGS = ("bf16",)
X86_MACHINES = frozenset({"x86_64", "amd64", "i386", "i686"})
ARM_MACHINES = frozenset({"aarch64", "arm64", "armv8l", "armv9l"})
AUTO = "auto"
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


@dataclass(frozen=True)
class CpuBf16:
    """Whether the CPU computes bf16 natively, and why, in words a log line can quote."""

    supported: bool
    reason: str


def bf16_flags_for(machine: str) -> tuple[str, ...]:
    """The CPU flags that mean native bf16 on `machine` (`platform.machine()`); () where none is known."""
    machine = machine.lower()
    if machine in X86_MACHINES:
        return X86_BF16_FLAGS
    if machine in ARM_MACHINES:
        return ARM_BF16_FLAGS
    return ()


def cpu_bf16_support(flags: Iterable[str], machine: str) -> CpuBf16:
    """Native bf16 from the CPU's feature flags (`/proc/cpuinfo`'s `flags` / `Features` words) and its machine name.

    x86_64 with `avx512_bf16` or `amx_bf16` -> supported; aarch64 with `bf16` -> supported; otherwise not, with a
    reason naming the flags looked for (or the unknown machine)."""
    wanted = bf16_flags_for(machine)
    if not wanted:
        return CpuBf16(False, f"no bf16 CPU flag is known for machine {machine!r}")
    present = set(flags)
    found = [flag for flag in wanted if flag in present]
    if found:
        return CpuBf16(True, f"this CPU has {found[0]}")
    return CpuBf16(
        False,
        f"this CPU has no {' or '.join(wanted)} flag, so bf16 would be emulated, several times slower than float32",
    )


def read_cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> tuple[frozenset[str], str]:
    """(the CPU's feature flags, `platform.machine()`): Linux reads `cpuinfo`'s first `flags` (x86) or `Features`
    (ARM) line; macOS asks sysctl for FEAT_BF16; elsewhere no flags."""
    machine = platform.machine()
    try:
        with open(cpuinfo) as file:
            for line in file:
                key, _, value = line.partition(":")
                if key.strip().lower() in ("flags", "features"):
                    return frozenset(value.split()), machine
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            done = subprocess.run(
                ["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True, text=True, timeout=5, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return frozenset(), machine
        return (frozenset({"bf16"}) if done.stdout.strip() == "1" else frozenset()), machine
    return frozenset(), machine


@functools.cache
def this_cpu_bf16() -> CpuBf16:
    """`cpu_bf16_support` for the CPU this process runs on (read once)."""
    return cpu_bf16_support(*read_cpu_flags())


def parse_bf16(value: object) -> bool | str | None:
    """A recipe's or command line's `bf16` value: True, False, "auto", or None (unset); anything else is an error."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text == AUTO:
        return AUTO
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"bf16={value!r}: set true, false or auto (bf16 where the GPU or the CPU computes it natively).")


def resolve_bf16(value: object, *, use_cpu: bool, fp16: bool, gpu_bf16: bool, cpu: CpuBf16) -> tuple[bool, str]:
    """(bf16 on or off, why): what a recipe's `bf16` means on this machine.

    - true / false: as set (true on a CPU without native bf16 runs, emulated, and the reason says so);
    - `auto` or unset: off with fp16; on a CPU run (`use_cpu`) on exactly where `cpu.supported`; elsewhere on where
      the GPU has bf16 (TRL's default), off where there is no bf16 GPU (a GPU recipe parsed on a CPU node).
    """
    choice = parse_bf16(value)
    if isinstance(choice, bool):
        if choice and use_cpu and not cpu.supported:
            return True, f"bf16: true as set, but {cpu.reason}"
        return choice, f"bf16: {str(choice).lower()} as set"
    asked = "bf16: auto" if choice == AUTO else "bf16 unset (auto)"
    if fp16:
        return False, f"{asked}, fp16 is on"
    if use_cpu:
        return cpu.supported, f"{asked}, {cpu.reason}"
    if gpu_bf16:
        return True, f"{asked}, the GPU supports bf16"
    return False, f"{asked}, no GPU with bf16 and use_cpu is off"
