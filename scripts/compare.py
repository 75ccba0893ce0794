"""GRPO vs Dr.GRPO on the tiny CPU task: train recipes/tiny_grpo.yaml and recipes/tiny_drgrpo.yaml with the same seed,
model and data, evaluate both on held-out problems, write outputs/compare/{curves.png,summary.md,summary.json}.

    python scripts/compare.py [--output_dir outputs/compare] [--seed 42] [-- --max_steps 30 ...overrides for both]
"""

import argparse
import logging

from drgrpo.core.errors import run_main
from drgrpo.experiments.comparison import CompareSettings, run_comparison


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=CompareSettings.output_dir)
    parser.add_argument("--demo_dir", default=CompareSettings.demo_dir, help="the demo's model/data (built if missing)")
    parser.add_argument("--seed", type=int, default=CompareSettings.seed)
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="recipe overrides for both runs, after --")
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    settings = CompareSettings(
        output_dir=args.output_dir,
        demo_dir=args.demo_dir,
        seed=args.seed,
        overrides=tuple(a for a in args.overrides if a != "--"),
    )
    summary = run_comparison(settings)
    print(open(f"{settings.output_dir}/summary.md").read())
    print(f"plot, summary and runs: {settings.output_dir}/ ({summary['total_seconds']:.0f} s)")


if __name__ == "__main__":
    run_main(main)
