"""Print how hard each token of one group is pushed under TRL 1.16's grpo, dapo and dr_grpo losses, and how much
advantage a question gets with and without std scaling (the two biases Dr.GRPO removes).

python scripts/loss_weights.py --rewards 1 0 0 1 0 0 0 1 --lengths 12 30 8 25 14 6 28 9 [--max_completion_length 32]
make loss-weights REWARDS="1 0 0 1 0 0 0 1" LENGTHS="12 30 8 25 14 6 28 9"
"""

import argparse

from drgrpo.experiments.bias.loss_weights import advantage_mass_table, group_loss_weights, loss_weight_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rewards", nargs="+", type=float, required=True, help="the rewards of one group")
    parser.add_argument("--lengths", nargs="+", type=int, required=True, help="each completion's length in tokens")
    parser.add_argument("--max_completion_length", type=int, default=32, help="dr_grpo's constant C (>= every length)")
    parser.add_argument("--std_ddof", type=int, default=1, help="1: sample std (TRL, verl); 0: population std")
    parser.add_argument("--epsilon", type=float, default=1e-4, help="1e-4 (TRL), 1e-6 (verl), 1e-8 (reference)")
    parser.add_argument("--group_size", type=int, default=8, help="G of the advantage-mass table")
    args = parser.parse_args()
    result = group_loss_weights(
        args.rewards, args.lengths, args.max_completion_length, std_ddof=args.std_ddof, epsilon=args.epsilon
    )
    print(loss_weight_table(result))
    print()
    print(advantage_mass_table(args.group_size, std_ddof=args.std_ddof, epsilon=args.epsilon))


if __name__ == "__main__":
    main()
