"""Print the per-sample advantage table for one group of rewards, as one checks it by hand.

python scripts/advantages.py 1 0 1 1 0 0 1 0 [--std_ddof 0 --epsilon 1e-8]
make advantages REWARDS="0.9 0.2 0.5 0.7 0.1 0.3 0.8 0.4"
"""

import argparse

from drgrpo.algorithm.advantages import advantage_table
from drgrpo.core.errors import run_main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rewards", nargs="+", type=float, help="the rewards of one group (G >= 1 values)")
    parser.add_argument("--std_ddof", type=int, default=1, help="1: sample std (TRL, verl); 0: population std")
    parser.add_argument("--epsilon", type=float, default=1e-4, help="1e-4 (TRL), 1e-6 (verl), 1e-8 (reference)")
    args = parser.parse_args()
    print(advantage_table(args.rewards, std_ddof=args.std_ddof, epsilon=args.epsilon))


if __name__ == "__main__":
    run_main(main)
