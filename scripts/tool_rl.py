"""`make tool-rl`: tool-integrated Dr.GRPO against text-only Dr.GRPO on the task the probe chose (issue 45),
SmolLM2-135M, 3 seeds; held-out greedy accuracy with the tool (B=4) and without it (B=0), before and after training.

    python scripts/tool_rl.py [--seeds 0 1 2] [--output_dir outputs/tool-rl] [-- --max_steps 30 ...recipe overrides]

The two arms of a seed train side by side (one process and torch thread each). Prepares the model first if the cache
lacks it (`make smollm2`); writes OUTPUT_DIR/summary.json, results.md, each seed's curves.png, both arms' models and
every evaluation sample's turns. drgrpo/experiments/tool_rl.py describes the protocol, docs/tools.md the results.
"""

import argparse
import logging

from drgrpo.core.errors import run_main


def main() -> None:
    from drgrpo.experiments.tool_rl import ToolRLSettings

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=ToolRLSettings.output_dir)
    parser.add_argument("--recipe", default=ToolRLSettings.recipe, help="the keys both arms share")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(ToolRLSettings.seeds))
    parser.add_argument("--num_test", type=int, default=ToolRLSettings.num_test, help="held-out problems")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="recipe overrides for both arms, after --")
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    from drgrpo.core.cpu_bf16 import this_cpu_bf16
    from drgrpo.experiments.tool_rl import announcement, recipe_steps

    overrides = tuple(a for a in args.overrides if a != "--")
    steps = recipe_steps(args.recipe, overrides)  # what this command trains, not what the full run does
    print(announcement(len(args.seeds), steps, args.num_test, args.output_dir, this_cpu_bf16().supported))
    from drgrpo.experiments.smollm2_demo import MODEL
    from drgrpo.experiments.tool_rl import results_table, run_tool_rl
    from drgrpo.setup.model_prep import prepare_model

    prepare_model(MODEL)  # instant when `make smollm2` has run
    settings = ToolRLSettings(
        output_dir=args.output_dir,
        recipe=args.recipe,
        seeds=tuple(args.seeds),
        num_test=args.num_test,
        overrides=overrides,
    )
    print(results_table(run_tool_rl(settings)))


if __name__ == "__main__":
    run_main(main)
