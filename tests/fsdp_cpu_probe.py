"""Test helper: run `scripts/train.py` unchanged under accelerate's FSDP plugin on CPU (gloo).

accelerate selects FSDP only for GPU-like distributed types (`AcceleratorState.__init__`), so on a CPU machine an
FSDP plugin is ignored and the run is plain DDP. This helper lifts exactly that check: when `ACCELERATE_USE_FSDP` is
set and the state came out as multi-CPU (gloo), the state becomes FSDP with the plugin accelerate built from the
`FSDP_*` environment, as it would on GPUs. Everything else (`train()`, TRL, accelerate's FSDP wrapping, its float32
upcast, the gathered save) is the real code. FSDP2 (`fully_shard`) runs on CPU; FSDP1 cannot, its compute device
must be CUDA-like (`torch.distributed.fsdp._init_utils._get_compute_device`).

    ACCELERATE_USE_FSDP=true FSDP_VERSION=2 ... python tests/fsdp_cpu_probe.py RECIPE.yaml --key value ...
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from accelerate import state as accelerate_state
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

ROOT = Path(__file__).resolve().parents[1]
_accelerator_state_init = accelerate_state.AcceleratorState.__init__


def _fsdp_on_cpu(self, *args, **kwargs) -> None:
    _accelerator_state_init(self, *args, **kwargs)
    if os.environ.get("ACCELERATE_USE_FSDP") == "true" and self.distributed_type == DistributedType.MULTI_CPU:
        plugin = kwargs.get("fsdp_plugin") or FullyShardedDataParallelPlugin()
        if self._mixed_precision != "no":
            plugin.set_mixed_precision(self._mixed_precision)
        self.fsdp_plugin = plugin
        self.distributed_type = DistributedType.FSDP


if __name__ == "__main__":
    accelerate_state.AcceleratorState.__init__ = _fsdp_on_cpu
    sys.argv = [str(ROOT / "scripts" / "train.py"), *sys.argv[1:]]
    runpy.run_path(sys.argv[0], run_name="__main__")
