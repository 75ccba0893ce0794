"""`make demo-tools`: SmolLM2-135M-Instruct learns to multiply with the Python tool (Dr.GRPO on CPU); prints held-out
accuracy before -> after, without the tool (B=0) and with it (B=4).

    python scripts/demo_tools.py [--seed 0] [--output_dir outputs/demo-tools] [-- --max_steps 20 ...recipe overrides]

Prepares the model first if the cache lacks it (`make smollm2`); writes OUTPUT_DIR/summary.json, curves.png, the
evaluation samples (every turn) and the trained model. docs/tools.md describes the protocol.
"""

import argparse
import logging

from drgrpo.core.errors import run_main


def main() -> None:
    from drgrpo.experiments.tools_demo import ToolDemoSettings

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=ToolDemoSettings.output_dir)
    parser.add_argument("--recipe", default=ToolDemoSettings.recipe)
    parser.add_argument("--seed", type=int, default=ToolDemoSettings.seed, help="task split and training seed")
    parser.add_argument("--num_test", type=int, default=ToolDemoSettings.num_test, help="held-out problems")
    parser.add_argument("rl_overrides", nargs=argparse.REMAINDER, help="recipe overrides for training, after --")
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    from drgrpo.experiments.smollm2_demo import MODEL
    from drgrpo.experiments.tools_demo import format_summary, run_tools_demo
    from drgrpo.setup.model_prep import prepare_model

    prepare_model(MODEL)  # instant when `make smollm2` has run
    settings = ToolDemoSettings(
        output_dir=args.output_dir,
        recipe=args.recipe,
        seed=args.seed,
        num_test=args.num_test,
        rl_overrides=tuple(a for a in args.rl_overrides if a != "--"),
    )
    summary = run_tools_demo(settings)
    print(format_summary(summary, settings.output_dir))


if __name__ == "__main__":
    run_main(main)
