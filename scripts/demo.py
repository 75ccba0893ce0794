"""`make demo`: SmolLM2-135M-Instruct learns additions with Dr.GRPO on CPU; prints held-out accuracy before -> after.

    python scripts/demo.py [--seed 0] [--output_dir outputs/demo] [-- --max_steps 20 ...recipe overrides]

Prepares the model first if the cache lacks it (`make smollm2`); writes OUTPUT_DIR/summary.json, curves.png, the
evaluation samples and the trained model. The tiny random-weight demo is `make demo-tiny` (scripts/demo_tiny.py).
"""

import argparse
import logging

from drgrpo.core.errors import parse_with_overrides, run_main


def main() -> None:
    from drgrpo.experiments.smollm2_demo import MODEL, SmolDemoSettings

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=SmolDemoSettings.output_dir)
    parser.add_argument("--recipe", default=SmolDemoSettings.recipe)
    parser.add_argument("--seed", type=int, default=SmolDemoSettings.seed, help="task split and training seed")
    parser.add_argument("--num_test", type=int, default=SmolDemoSettings.num_test, help="held-out problems")
    parser.add_argument(
        "--truncated_as_wrong",
        type=lambda value: value.lower() in ("true", "1", "yes"),
        default=SmolDemoSettings.truncated_as_wrong,
        help="count held-out samples cut at the budget wrong, as the paper and training do (default true)",
    )
    parser.add_argument("rl_overrides", nargs=argparse.REMAINDER, help="recipe overrides for training, after --")
    args = parse_with_overrides(parser)  # an option before `--` that is a recipe key: a one-line fix
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    logging.getLogger("drgrpo").setLevel(logging.INFO)  # the run's own lines (algorithm, data, resume), not libraries'
    from drgrpo.experiments.smollm2_demo import format_summary, run_smol_demo
    from drgrpo.setup.model_prep import prepare_model

    prepare_model(MODEL)  # instant when `make smollm2` has run
    settings = SmolDemoSettings(
        output_dir=args.output_dir,
        recipe=args.recipe,
        seed=args.seed,
        num_test=args.num_test,
        truncated_as_wrong=args.truncated_as_wrong,
        rl_overrides=tuple(a for a in args.rl_overrides if a != "--"),
    )
    summary = run_smol_demo(settings)
    print(format_summary(summary, settings.output_dir))


if __name__ == "__main__":
    run_main(main)
