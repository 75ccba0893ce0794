"""Experiments on CPU: the demos, GRPO vs Dr.GRPO compared, and the length-bias experiment (`bias/`), with the tasks
and the tiny model they train.

May import: every other package of `drgrpo/` and `rewards/` (they run recipes end to end); nothing imports it but
`scripts/`, `benchmarks/` and tests.

Modules, each importing only the ones listed before it:
- `tasks`: the tiny demo's verifiable task (two-digit additions, train and held-out splits);
- `arithmetic_task`: the real demo's chat additions (`What is 17 + 21? ...`), held out by operand pair;
- `tiny`: a tiny Qwen3-architecture model with a character-level tokenizer, built from a seed;
- `load`: the load average while something runs, and a resumed run's wall time over its commands;
- `budget`: a wall-clock budget for one command of a long experiment (stop at a safe point, rerun to continue);
- `demo`: `make demo-tiny`: warm start, Dr.GRPO, held-out accuracy before and after, on the tiny model;
- `smollm2_demo`: `make demo`: SmolLM2-135M-Instruct trained with Dr.GRPO, evaluated before and after;
- `product_task`: the tool demo's products of a four- and a three-digit number, held out by operands;
- `tools_demo`: `make demo-tools`: SmolLM2 trained with the Python tool, evaluated at call budgets 0 and 4;
- `side_by_side`: the runs of one comparison trained at once, one spawned process each, the cores split between them;
- `comparison`: `make compare` (SmolLM2, and its long task) and `make compare-tiny`: GRPO vs Dr.GRPO from the same
  start;
- `bias`: `make bias` and `make bias-real`: what Dr.GRPO fixes, measured (a subpackage);
- `tool_probe`: `make probe-tools`: task families for tool-integrated RL, the untrained SmolLM2 at B=4 and B=0 on each;
- `tool_rl`: `make tool-rl`: tool-integrated vs text-only Dr.GRPO on the probe's task, side by side, per seed;
- `code_families`: families of small programming tasks, each problem with its own generated tests (issue 55);
- `code_probe`: `make probe-code`: the untrained SmolLM2 on each family, graded by the `code` reward in its sandbox;
- `code_rl`: `make code-rl`: Dr.GRPO with the `code` reward on the probe's task, per seed, held-out before and after.
"""
