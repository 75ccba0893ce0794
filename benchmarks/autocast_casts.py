"""How often bf16 autocast casts the float32 weights during `generate`: a profile (issue 40 asked which of two texts was
true: "one autocast context around generate saves nothing, one cast per call" or "a cast per decode step").

SmolLM2-135M-Instruct, prepared by accelerate with `mixed_precision="bf16"` on CPU exactly as `trainer.train()`
prepares it (accelerate wraps the model's forward in `torch.autocast`), then `generate` of N new tokens, counted
with torch's profiler: the `aten::_to_copy` calls on the LM head's weight (49152 x 576) and on the 30 MLP up/gate
weights (1536 x 576), (a) with accelerate's per-forward autocast only (TRL's generation path before issue 40), and
(b) inside one outer `torch.autocast` context around `generate`.

    python benchmarks/autocast_casts.py [--tokens 4 8]

Autocast caches a cast weight only while the outermost autocast context is open (torch clears the cache on its
exit), so (a) casts every weight at every forward, i.e. at every generated token, and (b) once per call.
"""

from __future__ import annotations

import argparse
import contextlib

import torch


def count_casts(model, ids: torch.Tensor, tokens: int, outer: bool) -> tuple[int, int]:
    """(casts of the LM head weight, casts of the MLP up/gate weights) during one `generate` of `tokens` tokens."""
    from torch.profiler import ProfilerActivity, profile

    context = torch.autocast("cpu", dtype=torch.bfloat16) if outer else contextlib.nullcontext()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof, torch.no_grad(), context:
        model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=tokens,
            min_new_tokens=tokens, pad_token_id=model.generation_config.pad_token_id,
        )  # fmt: skip
    casts = [e for e in prof.key_averages(group_by_input_shape=True) if e.key == "aten::_to_copy"]
    head = model.get_output_embeddings().weight.shape
    up = model.model.layers[0].mlp.up_proj.weight.shape

    def counted(shape) -> int:
        return sum(e.count for e in casts if e.input_shapes and e.input_shapes[0] == list(shape))

    return counted(head), counted(up)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=[4, 8])
    args = parser.parse_args()
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM

    from drgrpo.core.models import resolve_model

    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    model = accelerator.prepare_model(
        AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-135m-instruct"), dtype=torch.float32)
    )
    ids = torch.randint(100, 4000, (4, 20), generator=torch.Generator().manual_seed(0))
    print("| autocast | new tokens | casts of the LM head weight | casts of the 30 up/gate weights |")
    print("|---|---:|---:|---:|")
    for outer in (False, True):
        for tokens in args.tokens:
            head, up = count_casts(model, ids, tokens, outer)
            where = "one outer context around generate" if outer else "accelerate's, per forward (TRL's path)"
            print(f"| {where} | {tokens} | {head} | {up} |")


if __name__ == "__main__":
    main()
