"""Experiments the project runs end to end on CPU.

Modules, each importing only the ones listed before it:
- `arithmetic_task`: the real demo's chat additions, held out by operand pair;
- `smollm2_demo`: `make demo`, SmolLM2-135M-Instruct trained with Dr.GRPO and evaluated before and after.
"""
