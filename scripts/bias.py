"""What Dr.GRPO fixes, measured: the fixed-batch length-bias experiment, then GRPO vs Dr.GRPO trained from the same
warm start (recipes/tiny_bias_grpo.yaml, recipes/tiny_bias_drgrpo.yaml) on several seeds; writes
outputs/bias/{curves.png,summary.md,summary.json} (docs/bias.md).

    python scripts/bias.py [--seeds 0 1 2 3] [--output_dir outputs/bias] [-- --max_steps 50 ...overrides for all runs]
"""

import argparse
import logging

from drgrpo.core.errors import parse_with_overrides, run_main


def main() -> None:
    # The options' defaults are the settings' own (None here): the arguments are read before the experiment's torch
    # and TRL imports, so a mistyped option is answered at once.
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir")
    parser.add_argument("--seeds", nargs="+", type=int)
    parser.add_argument("--sft_steps", type=int, help="warm-start SFT steps")
    parser.add_argument("--mechanism_batches", type=int)
    parser.add_argument("--step_norm", type=float, help="mechanism update size")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="recipe overrides for every run, after --")
    args = parse_with_overrides(parser)  # an option before `--` that is a recipe key: a one-line fix
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    from drgrpo.experiments.bias.experiment import BiasSettings, run_bias
    from drgrpo.experiments.bias.mechanism import MechanismSettings

    def given(**values):
        return {key: value for key, value in values.items() if value is not None}

    settings = BiasSettings(
        **given(output_dir=args.output_dir, seeds=tuple(args.seeds) if args.seeds else None, sft_steps=args.sft_steps),
        mechanism=MechanismSettings(**given(num_batches=args.mechanism_batches, step_norm=args.step_norm)),
        overrides=tuple(a for a in args.overrides if a != "--"),
    )
    run_bias(settings)
    print(open(f"{settings.output_dir}/summary.md").read())
    print(f"plot, summaries and runs: {settings.output_dir}/")


if __name__ == "__main__":
    run_main(main)
