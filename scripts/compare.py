"""GRPO vs Dr.GRPO from the same start, same seed and data: train both recipes, evaluate both on held-out problems,
write OUTPUT_DIR/{curves.png,summary.md,summary.json}.

    python scripts/compare.py [--task smollm2|smollm2-long|tiny] [--output_dir outputs/compare] [--seed 42]
        [--seeds 0 1 2] [--side_by_side] [-- --max_steps 10 ...]

`--task smollm2` (`make compare`): SmolLM2-135M-Instruct, recipes/smollm2_135m_{grpo,drgrpo}.yaml, the real demo's
chat additions. `--task smollm2-long`: the same trained 60 steps with answers up to 128 tokens
(recipes/smollm2_135m_long_{grpo,drgrpo}.yaml), resumable. `--task tiny` (`make compare-tiny`): the tiny demo's warm
start, recipes/tiny_{grpo,drgrpo}.yaml. `--seeds`: one comparison per seed, in OUTPUT_DIR/seedN.
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
    parser.add_argument("--seeds", nargs="+", type=int, help="several seeds, one comparison each (OUTPUT_DIR/seedN)")
    parser.add_argument("--num_test", type=int, default=CompareSettings.num_test, help="smollm2: held-out problems")
    parser.add_argument("--data_seed", type=int, default=CompareSettings.data_seed, help="smollm2: the task split")
    parser.add_argument(
        "--side_by_side", action="store_true", help="train both runs at once, one process each, the cores split"
    )
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="recipe overrides for both runs, after --")
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    if args.task == "smollm2":
        from drgrpo.setup.model_prep import prepare_model

        prepare_model("smollm2-135m-instruct")  # instant when `make smollm2` has run
    output_dir = args.output_dir or {"smollm2": "outputs/compare", "tiny": "outputs/compare-tiny"}.get(
        args.task, f"outputs/compare-{args.task}"
    )
    for seed in args.seeds or [args.seed]:
        folder = f"{output_dir}/seed{seed}" if args.seeds else output_dir
        settings = CompareSettings(
            task=args.task,
            output_dir=folder,
            demo_dir=args.demo_dir,
            seed=seed,
            data_seed=args.data_seed,
            num_test=args.num_test,
            data_dir=f"{output_dir}/data" if args.seeds else None,  # every seed on the same problems
            baseline_dir=f"{output_dir}/eval/start" if args.seeds else None,  # and one evaluation of the start
            overrides=tuple(a for a in args.overrides if a != "--"),
            side_by_side=args.side_by_side,
        )
        summary = run_comparison(settings)
        print(open(f"{folder}/summary.md").read())
        print(f"plot, summary and runs: {folder}/ ({summary['total_seconds']:.0f} s)")


if __name__ == "__main__":
    run_main(main)
