"""The rollout stage: who generates the completions and how. The CPU generation engine (a copy of the weights in the
generation dtype synced once per optimizer step, one sampler with per-row seeds that returns the sampled tokens'
log-probs; issue 40, docs/demo.md), and tool-integrated rollouts: the policy writes Python mid-answer, the code
sandbox runs it, the output goes back into the answer, and the trainer trains on the whole trajectory with the tool's
tokens masked (docs/tools.md).

May import: `drgrpo.core`, `rewards` (the sandbox and the Python tool, `rewards.code.tool`), `drgrpo.observe` (metric
names), and torch, transformers, TRL; nothing else of `drgrpo.algorithm`, whose subpackage it is. Used by the
config (the keys), the trainer (generation, the rewards' text), `drgrpo.run` (TRL's `rollout_func`) and
`drgrpo.evaluation` (the engine on a saved model, evaluation at a call budget).

Modules, each importing only the ones listed before it:
- `arguments`: `ToolArguments` (`python_tool`, `tool_*`) and `EngineArguments` (`generation_engine`), with checks;
- `protocol`: the inline protocol on token ids: a turn's text read in context, where its ```python block closes,
  the observation's text;
- `loop`: the multi-turn loop over any generator, with the same number of generation calls on every rank;
- `tool_metrics`: the per-step `diag/tool/` metrics;
- `sampler`: the one sampler of training and evaluation (vLLM's processing order, per-row seeds, an exact two-level
  inverse CDF, the sampled log-probs);
- `engine`: `GenerationEngine`, batched decoding with a KV cache, shared prompt prefill and rows leaving the batch;
- `lora_merge`: peft's LoRA adapters merged into the copy through peft's own merge path, or refused in one line;
- `weights`: `GenerationWeights`, the copy in the generation dtype, synced once per optimizer step;
- `trainer_engine`: the engine on a `GRPOTrainer` (TRL's unwrapping contexts, seeds, sync metrics);
- `generation`: one turn on the trainer's backend (the engine or transformers with a fence stop, or vLLM);
- `python_tool`: the tool and its sandbox from the recipe's keys;
- `trl_rollout`: TRL's `rollout_func`: the loop on the trainer, with `env_mask` and the rewards' text.
"""
