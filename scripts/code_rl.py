"""`make code-rl`: Dr.GRPO with the sandboxed `code` reward on the task the probe chose (issue 55), SmolLM2-135M, 3
seeds; held-out greedy pass@1 and pass@8 at the training temperature, before and after training.

    python scripts/code_rl.py [--seeds 0 1 2] [--output_dir outputs/code-rl] [-- --max_steps 30 ...recipe overrides]

The seeds train one after the other, each on the machine's cores. Prepares the model first if the cache lacks it
(`make smollm2`); writes OUTPUT_DIR/summary.json, results.md, each seed's curves.png, samples.md and model, and every
evaluation sample. drgrpo/experiments/code_rl.py describes the protocol, docs/code-rl.md the results.
"""

import argparse
import logging

from drgrpo.core.errors import run_main

# Measured on 2 cores of an AMD EPYC Zen 2 in float32 (no native bf16), shared with other work (docs/code-rl.md):
# one seed's training and its two evaluations; the evaluation before training once, on top.
MINUTES_PER_SEED = 60
MINUTES_BEFORE = 25


def main() -> None:
    from drgrpo.experiments.code_families import FAMILIES
    from drgrpo.experiments.code_rl import CodeRLSettings

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=CodeRLSettings.output_dir)
    parser.add_argument("--recipe", default=CodeRLSettings.recipe, help="the training recipe")
    parser.add_argument("--task", default=CodeRLSettings.task, choices=list(FAMILIES), help="the probe's by default")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(CodeRLSettings.seeds))
    parser.add_argument("--num_test", type=int, default=CodeRLSettings.num_test, help="held-out problems")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="recipe overrides, after --")
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    print(
        f"make code-rl: {len(args.seeds)} seed(s), about {MINUTES_PER_SEED} min each and {MINUTES_BEFORE} min for the "
        "evaluation before training on 2 shared cores in float32 (less with native bf16 or quiet cores); results in "
        f"{args.output_dir}/results.md"
    )
    from drgrpo.experiments.code_rl import results_table, run_code_rl
    from drgrpo.experiments.smollm2_demo import MODEL
    from drgrpo.setup.model_prep import prepare_model

    prepare_model(MODEL)  # instant when `make smollm2` has run
    settings = CodeRLSettings(
        output_dir=args.output_dir,
        recipe=args.recipe,
        task=args.task,
        seeds=tuple(args.seeds),
        num_test=args.num_test,
        overrides=tuple(a for a in args.overrides if a != "--"),
    )
    print(results_table(run_code_rl(settings)))


if __name__ == "__main__":
    run_main(main)
