"""DeepSpeed on a CPU without the C++ operator it would compile for nothing.

When DeepSpeed initialises its communication on a machine without a GPU (every ZeRO-3 run on CPU: the tests' two
gloo processes, `scripts/gpu_smoke.sh` in CPU mode), it JIT-compiles `deepspeed_shm_comm`, a shared-memory all-reduce,
with g++ into ~/.cache/torch_extensions: ~100 s on 2 cores (two compilers), at the first run of every virtual
environment and again whenever another environment built it there last (the build folder is shared). Only DeepSpeed's
inference all-reduce (`inference_all_reduce`, tensor-parallel inference) uses it; ZeRO's training collectives go
through torch.distributed. DeepSpeed builds it only where `deepspeed.ops.__compatible_ops__` (a lazily probed table
that only its communication setup reads) marks it compatible, so `skip_shm_comm_op` marks it not, before DeepSpeed
starts (from `DrGRPOConfig.__post_init__`, ahead of the device set-up). A GPU run is untouched.
"""

from __future__ import annotations

SHM_COMM_OP = "deepspeed_shm_comm"


def deepspeed_requested(deepspeed_config: object) -> bool:
    """Whether this process will run DeepSpeed: a `deepspeed` config given to the trainer's arguments, or
    `accelerate launch` with a DeepSpeed config (it sets ACCELERATE_USE_DEEPSPEED)."""
    from accelerate.utils import parse_flag_from_env

    return bool(deepspeed_config) or parse_flag_from_env("ACCELERATE_USE_DEEPSPEED")


def skip_shm_comm_op(deepspeed_config: object = None) -> bool:
    """Mark DeepSpeed's shared-memory all-reduce operator unbuildable when DeepSpeed will run without a GPU (module
    docstring); True where it did. Its compatibility table is set without probing: the probe itself runs compilers."""
    if not deepspeed_requested(deepspeed_config):
        return False
    import torch

    if torch.cuda.is_available():
        return False
    try:
        import deepspeed.ops
    except ImportError:
        return False  # DeepSpeed itself will say it is missing
    vars(deepspeed.ops).setdefault("__compatible_ops__", {})[SHM_COMM_OP] = False  # set before any probe
    return True
