"""Experiments on CPU: the demo, GRPO vs Dr.GRPO compared, and the length-bias experiment (`bias/`), with the tiny
task and the tiny model they train.

May import: every other package of `drgrpo/` and `rewards/` (they run recipes end to end); nothing imports it but
`scripts/` and tests.

Modules, each importing only the ones listed before it:
- `tasks`: the demo's verifiable task (two-digit additions, train and held-out splits);
- `tiny`: a tiny Qwen3-architecture model with a character-level tokenizer, built from a seed;
- `demo`: `make demo`: warm start, Dr.GRPO, held-out accuracy before and after;
- `comparison`: `make compare`: GRPO vs Dr.GRPO from the same warm start;
- `bias`: `make bias`: what Dr.GRPO fixes, measured (a subpackage).
"""
