"""Set-up checks: does a GPU install resolve to a supported stack, and what the GPU smoke test measured.

May import: the standard library and `packaging` only (it runs before, or without, the rest of the stack).

Modules, each importing only the ones listed before it:
- `install_check`: `make check-install`: pip's resolver in dry-run, then vLLM, torch, transformers and TRL checked;
- `smoke`: the steps/s and tokens/s of `scripts/gpu_smoke.sh`'s runs.
"""
