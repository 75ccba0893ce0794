"""GRPO vs Dr.GRPO from the same start, same seed and data: train both recipes, evaluate both on held-out problems,
write OUTPUT_DIR/{curves.png,summary.md,summary.json}.

    python scripts/compare.py [--task smollm2|tiny] [--output_dir outputs/compare] [--seed 42] [-- --max_steps 10 ...]

`--task smollm2` (`make compare`): SmolLM2-135M-Instruct, recipes/smollm2_135m_{grpo,drgrpo}.yaml, the real demo's
chat additions. `--task tiny` (`make compare-tiny`): the tiny demo's warm start, recipes/tiny_{grpo,drgrpo}.yaml.
"""

import argparse
import logging

from drgrpo.core.errors import run_main


def main() -> None:
    from drgrpo.experiments.comparison import RECIPES, CompareSettings, run_comparison

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default=CompareSettings.task, choices=sorted(RECIPES))
    parser.add_argument("--output_dir", default=None, help="default: outputs/compare (smollm2), outputs/compare-tiny")
    parser.add_argument(
        "--demo_dir", default=CompareSettings.demo_dir, help="tiny: the demo's model/data (built if missing)"
    )
    parser.add_argument("--seed", type=int, default=CompareSettings.seed, help="training seed of both runs")
    parser.add_argument("--data_seed", type=int, default=CompareSettings.data_seed, help="smollm2: the task split")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="recipe overrides for both runs, after --")
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    if args.task == "smollm2":
        from drgrpo.setup.model_prep import prepare_model

        prepare_model("smollm2-135m-instruct")  # instant when `make smollm2` has run
    settings = CompareSettings(
        task=args.task,
        output_dir=args.output_dir or ("outputs/compare" if args.task == "smollm2" else "outputs/compare-tiny"),
        demo_dir=args.demo_dir,
        seed=args.seed,
        data_seed=args.data_seed,
        overrides=tuple(a for a in args.overrides if a != "--"),
    )
    summary = run_comparison(settings)
    print(open(f"{settings.output_dir}/summary.md").read())
    print(f"plot, summary and runs: {settings.output_dir}/ ({summary['total_seconds']:.0f} s)")


if __name__ == "__main__":
    run_main(main)
