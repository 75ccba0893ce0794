"""The tiny CPU demo (`make demo-tiny`): build a tiny model, warm-start it, train it with Dr.GRPO, print held-out
accuracy before -> after.

python scripts/demo_tiny.py [--output_dir outputs/demo-tiny] [--seed 0] [-- --max_steps 200 ...recipe overrides]
"""

import argparse
import logging

from drgrpo.core.errors import parse_with_overrides, run_main
from drgrpo.experiments.demo import DemoSettings, format_table, run_demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=DemoSettings.output_dir)
    parser.add_argument("--seed", type=int, default=DemoSettings.seed)
    parser.add_argument("--sft_steps", type=int, default=DemoSettings.sft_steps)
    parser.add_argument("--sft_examples", type=int, default=DemoSettings.sft_examples)
    parser.add_argument("rl_overrides", nargs=argparse.REMAINDER, help="recipe overrides for the RL stage, after --")
    args = parse_with_overrides(parser)  # an option before `--` that is a recipe key: a one-line fix
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    overrides = tuple(a for a in args.rl_overrides if a != "--")
    settings = DemoSettings(
        output_dir=args.output_dir,
        seed=args.seed,
        sft_steps=args.sft_steps,
        sft_examples=args.sft_examples,
        rl_overrides=overrides,
    )
    metrics = run_demo(settings)
    print(format_table(metrics))
    print(f"metrics, models and logs: {settings.output_dir}/")


if __name__ == "__main__":
    run_main(main)
