"""What every layer uses: the user-error machinery, the checkpoint folders of a run, which model a name means (LoRA
adapters too), torch's thread count, whether the CPU computes bf16 natively, and the control characters kept off a
terminal.

May import: the standard library only (torch, transformers, peft and huggingface_hub lazily, inside functions).
Everything else in `drgrpo/` and `rewards/` may import this package.

Modules, each importing only the ones listed before it:
- `noise`: filters for two library messages no user can act on (DeepSpeed's CPU fallback, transformers'
  gradient-checkpointing renames), installed when `drgrpo` is imported;
- `errors`: `RecipeError` and friends, and `run_main`, which prints a user error as one line with its fix;
- `file_checks`: whether a saved file reads back whole (a safetensors header, a torch archive's zip directory, JSON);
- `checkpoints`: the `checkpoint-N` folders of an output directory, the newest complete one to resume from;
- `durable`: a folder saved whole or not at all (staged, fsynced, renamed into place);
- `disk`: a full disk said as one line naming the folder, the bytes free and the fix;
- `models`: which model a name means (prepared short names, local folders, hub ids), checked before loading, and
  loading from the cache first;
- `adapters`: LoRA adapter folders loaded, merged and recorded with a portable base name, as models;
- `threads`: torch's thread count from the cores other processes leave free, re-chosen as that changes;
- `cpu_bf16`: whether the CPU computes bf16 natively (its flags), and what a recipe's `bf16: auto` resolves to;
- `heap`: freed memory returned to the system between the stages of a run (glibc's `malloc_trim`);
- `control_chars`: C0/C1 control characters stripped from the tool's observations, escaped in the console's
  completions table;
- `deepspeed_cpu`: DeepSpeed without a GPU kept from compiling an operator training never uses.
"""
