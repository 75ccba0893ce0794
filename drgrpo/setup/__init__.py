"""Set-up checks: does a GPU install resolve to a supported stack, an offline wheelhouse, and the GPU smoke test.

May import: the standard library and `packaging` at module level (these run before, or without, the rest of the
stack); torch and transformers only inside the smoke test's functions that load a model.

Modules, each importing only the ones listed before it:
- `install_check`: `make check-install`: pip's resolver in dry-run, then vLLM, torch, transformers and TRL checked,
  and the CUDA builds of torch, torchvision and vLLM against each other;
- `wheelhouse`: `make wheelhouse`: every file `make install` needs, for a given Python and platform, in one folder;
- `gpu_probe`: the smoke test's GPU pins and its probe of torch's CUDA build, the driver and bf16;
- `smoke`: what `scripts/gpu_smoke.sh` checks in each run (loss, bf16/ZeRO-3 engaged, the reloaded model) and the
  steps/s and tokens/s it reports.
"""
