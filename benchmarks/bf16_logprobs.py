"""How far bf16 autocast moves SmolLM2-135M-Instruct's log-probabilities of the same completions from float32 ones.

Completions of the demo's prompts are sampled once (float32, the recipe's temperature and budget), then scored twice by
one model, float32 weights both times: in float32, and under `torch.autocast("cpu", dtype=torch.bfloat16)`, as bf16
training scores them. Printed: the mean and max absolute per-token difference, the same for each completion's summed
log-probability (what a sequence-level ratio sees), and exp of the per-token difference as a ratio's distance from
1 (what the clipped surrogate's pi_theta/pi_old would read if the two precisions were mixed).

    python benchmarks/bf16_logprobs.py [--prompts 4] [--num_generations 4] [--threads 1]

On a CPU without native bf16 it still runs (emulated, slowly); the numbers do not depend on the CPU's speed.
"""

from __future__ import annotations

import argparse
import os
import time

import torch


def per_token_logps(model, input_ids, attention_mask, completion_ids, bf16: bool) -> torch.Tensor:
    """Log-probs of `completion_ids` (the last columns of `input_ids`), float32 or under bf16 autocast."""
    width = completion_ids.size(1)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -width - 1 : -1]
    return logits.float().log_softmax(-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--num_generations", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    import json
    import tempfile
    from pathlib import Path

    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from drgrpo.core.cpu_bf16 import this_cpu_bf16
    from drgrpo.core.models import resolve_model
    from drgrpo.data.templates import render_prompt_text
    from drgrpo.experiments.arithmetic_task import write_chat_addition_task
    from drgrpo.recipe.cli import parse_recipe

    _, config, model_args = parse_recipe(["recipes/smollm2_135m_drgrpo.yaml"])
    path = resolve_model(model_args.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with tempfile.TemporaryDirectory() as tmp:
        train = write_chat_addition_task(Path(tmp), seed=0)["train"].read_text().splitlines()[: args.prompts]
    questions = [json.loads(line)["question"] for line in train]
    prompts = [
        render_prompt_text(q, "chat", tokenizer=tokenizer) for q in questions for _ in range(args.num_generations)
    ]
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    generation = GenerationConfig(max_new_tokens=config.max_completion_length, do_sample=True,
                                  temperature=config.temperature, top_k=0, top_p=1.0,
                                  pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    start = time.perf_counter()
    with torch.no_grad():
        sequences = model.generate(**batch, generation_config=generation)
    completion_ids = sequences[:, batch["input_ids"].size(1) :]
    is_eos = completion_ids == tokenizer.eos_token_id
    ended = is_eos.any(1)
    stop = torch.where(ended, is_eos.int().argmax(1), torch.full_like(ended, completion_ids.size(1), dtype=torch.long))
    mask = torch.arange(completion_ids.size(1)) <= stop.unsqueeze(1)  # the eos token counts, as in TRL's mask
    attention_mask = torch.cat([batch["attention_mask"], mask.long()], dim=1)
    print(f"sampled {len(prompts)} completions ({int(mask.sum())} tokens) in {time.perf_counter() - start:.0f} s; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip

    exact = per_token_logps(model, sequences, attention_mask, completion_ids, bf16=False)
    start = time.perf_counter()
    half = per_token_logps(model, sequences, attention_mask, completion_ids, bf16=True)
    seconds = time.perf_counter() - start
    token = (half - exact).abs()[mask]
    sequence = ((half - exact) * mask).sum(1).abs()
    print(f"CPU: {this_cpu_bf16().reason}; the bf16 scoring took {seconds:.0f} s")
    print(f"per token |bf16 - float32| log-prob: mean {token.mean():.4f}, max {token.max():.4f} "
          f"({token.numel()} tokens; float32 log-probs average {exact[mask].mean():.3f})")  # fmt: skip
    print(f"per completion |sum of differences|: mean {sequence.mean():.4f}, max {sequence.max():.4f}")
    print(f"exp(difference) as a ratio: max |ratio - 1| {(token.exp() - 1).abs().max():.4f} per token "
          f"(PPO's clip range is 0.2)")  # fmt: skip


if __name__ == "__main__":
    main()
