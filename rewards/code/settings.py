"""`CodeRewardArguments`: the recipe keys of the code rewards (`code`, `code_format`); part of `RewardArguments`."""

from __future__ import annotations

from dataclasses import dataclass, field

CODE_SCORINGS = ("fraction", "all")


@dataclass
class CodeRewardArguments:
    """How the `code` reward finds, runs and judges a completion's program (see docs/code-rewards.md)."""

    tests_column: str = field(
        default="verification_info",
        metadata={
            "help": "Dataset column with each problem's test cases: open-r1/PrimeIntellect verification_info "
            "({language, test_cases: [{type, input, output}]}), APPS/TACO ({inputs, outputs, fn_name?}) or a list of "
            "{input, output}; a dict or its JSON string. The data pipeline passes it to the rewards as it is."
        },
    )
    code_language: str = field(
        default="python",
        metadata={"help": "Language of the program: the last ```<code_language> block of the completion is run."},
    )
    code_scoring: str = field(
        default="fraction",
        metadata={"help": "'fraction': the share of test cases passed; 'all': 1.0 only if every test case passes."},
    )
    code_timeout: float = field(
        default=5.0,
        metadata={
            "help": "CPU seconds per test case (of every process the program starts, waited for or not), so that "
            "other completions' programs taking the CPU make it slower, not wrong; the wall-clock limit is twice "
            "this. Past either the program's processes are killed and the test fails (rewards/code/timeouts)."
        },
    )
    code_memory_mb: int = field(
        default=512,
        metadata={
            "help": "Address-space limit of each process of a program, in MiB; where the sandbox's runners get a "
            "memory cgroup, also the memory of all its processes together (memfds and shared memory included; its "
            "/tmp and 64 MiB for the runner on top)."
        },
    )
    code_max_processes: int = field(
        default=16,
        metadata={
            "help": "Processes and threads a program may have at once (the program included). Worst-case memory "
            "of the sandbox is code_num_workers x code_max_processes x code_memory_mb without a memory cgroup "
            "(docs/code-rewards.md)."
        },
    )
    code_max_open_files: int = field(default=64, metadata={"help": "Open file descriptors per process."})
    code_max_output_kb: int = field(
        default=1024,
        metadata={"help": "Standard output kept per test, in KiB; a program printing more is killed and fails."},
    )
    code_max_file_mb: int = field(default=16, metadata={"help": "Largest file a program may write, in MiB."})
    code_max_files: int = field(
        default=10_000,
        metadata={
            "help": "Files and folders a program may create in its working folder (the inodes of its tmpfs, about "
            "1 KiB of kernel memory each), at most 100000."
        },
    )
    code_num_workers: int | None = field(
        default=None,
        metadata={
            "help": "Programs run at once (test cases of one completion run in parallel too). None: the CPU cores "
            "available to this rank (cores / LOCAL_WORLD_SIZE, at most 8)."
        },
    )
    code_float_tolerance: float = field(
        default=1e-6,
        metadata={
            "help": "Numbers with a decimal point or exponent match within this absolute-or-relative error "
            "(|a - b| <= tol * max(1, |b|)); integers and words must match exactly."
        },
    )
    code_check_timeout: float = field(
        default=10.0,
        metadata={
            "help": "Seconds the trainer may spend comparing one completion's outputs with its tests (every test "
            "together, a code_checker's calls included). Comparing is linear in what the program printed; this "
            "bounds a step whatever it printed: past it the rest of that completion's tests fail "
            "(rewards/code/check_timeouts)."
        },
    )
    code_checker: str | None = field(
        default=None,
        metadata={
            "help": "Custom output checker for problems with several right answers: 'package.module:function' or "
            "'path/to/file.py:function', called as fn(input, expected, output) -> bool. Runs in the trainer "
            "(trusted code), after the program ran in the sandbox."
        },
    )
    code_python: str | None = field(
        default=None,
        metadata={
            "help": "Interpreter that runs the programs. None: this Python's base installation, stdlib only (run "
            "with -I -S), made reachable inside the sandbox."
        },
    )
    code_allow_network_fallback: bool = field(
        default=False,
        metadata={
            "help": "Where the kernel forbids user/network namespaces, run programs anyway (root trainers only) "
            "with weaker isolation: no private network, pid namespace or file system; sockets refused by seccomp, "
            "files restricted by Landlock where the kernel has it. A warning says once what it does not stop. "
            "False: the code reward refuses to start there."
        },
    )

    def check_code_settings(self) -> None:
        """Raise a `ValueError` naming a code setting that cannot work."""
        if self.code_scoring not in CODE_SCORINGS:
            raise ValueError(f"code_scoring={self.code_scoring!r}: choose one of {', '.join(CODE_SCORINGS)}.")
        positive = ("code_timeout", "code_check_timeout", "code_memory_mb", "code_max_processes", "code_max_open_files")
        for key in (*positive, "code_max_files"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key} must be positive, got {getattr(self, key)}.")
        if self.code_max_files > 100_000:
            raise ValueError(f"code_max_files={self.code_max_files}: at most 100000 (each costs kernel memory).")
        if self.code_memory_mb < 64:
            raise ValueError(f"code_memory_mb={self.code_memory_mb}: the interpreter alone needs ~30 MiB; use 64+.")
        if self.code_float_tolerance < 0:
            raise ValueError(f"code_float_tolerance must be >= 0, got {self.code_float_tolerance}.")
