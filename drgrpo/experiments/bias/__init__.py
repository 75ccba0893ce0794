"""What Dr.GRPO fixes, measured (`make bias`, `make loss-weights`): GRPO's per-response length term, on a task where
the policy guesses the carry first and then sees whether it guessed right; and on a real model, SmolLM2-135M-Instruct
(`make bias-real`).

Modules, each importing only the ones listed before it:
- `loss_weights`: how much each token of a group is pushed under TRL's `grpo`, `dapo` and `dr_grpo` losses;
- `task`: the length-bias task (a carry guess, the working, the answer, then a tail);
- `warm_start`: the task files, the tiny model, and SFT on the sloppy teacher's tails;
- `mechanism`: fixed rollout batches, one update per loss, the exact change of the expected tail length;
- `report`: the per-run numbers, `summary.json`, `summary.md` and `curves.png`;
- `experiment`: the whole of `make bias`: warm start, mechanism, GRPO and Dr.GRPO trained on several seeds;
- `chat_mechanism`: the mechanism on a chat model's own answers (importance-weighted change of fresh answer lengths);
- `real_report`: `make bias-real`'s `summary.json`, `summary.md` and `curves.png`;
- `real_experiment`: the whole of `make bias-real`: the mechanism on SmolLM2, then GRPO vs Dr.GRPO on several seeds.
"""
