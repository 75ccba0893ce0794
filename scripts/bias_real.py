"""What Dr.GRPO fixes, on a real model: the fixed-batch length-bias mechanism on SmolLM2-135M-Instruct's own answers,
then GRPO vs Dr.GRPO trained from the same start (recipes/smollm2_135m_long_{grpo,drgrpo}.yaml) on several seeds;
writes outputs/bias-real/{summary.md,summary.json,curves.png} (docs/bias.md). Prints its expected time first; rerun
after an interruption to continue (finished parts are kept).

    python scripts/bias_real.py [--seeds 0 1 2] [--num_test 100] [--mechanism_batches 30] [-- --max_steps 80 ...]
"""

import argparse
import logging

from drgrpo.core.errors import run_main


def main() -> None:
    from drgrpo.experiments.bias.chat_mechanism import ChatMechanismSettings
    from drgrpo.experiments.bias.real_experiment import RealBiasSettings, run_real_bias

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=RealBiasSettings.output_dir)
    parser.add_argument("--seeds", nargs="+", type=int, default=list(RealBiasSettings.seeds))
    parser.add_argument("--num_test", type=int, default=RealBiasSettings.num_test, help="held-out problems")
    parser.add_argument("--mechanism_batches", type=int, default=ChatMechanismSettings.num_batches)
    parser.add_argument("--mechanism_prompts", type=int, default=ChatMechanismSettings.prompts_per_batch)
    parser.add_argument("--step_norm", type=float, default=ChatMechanismSettings.step_norm, help="mechanism update")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="recipe overrides for every run, after --")
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    from drgrpo.setup.model_prep import prepare_model

    prepare_model("smollm2-135m-instruct")  # instant when `make smollm2` has run
    settings = RealBiasSettings(
        output_dir=args.output_dir,
        seeds=tuple(args.seeds),
        num_test=args.num_test,
        mechanism=ChatMechanismSettings(
            num_batches=args.mechanism_batches, prompts_per_batch=args.mechanism_prompts, step_norm=args.step_norm
        ),
        overrides=tuple(a for a in args.overrides if a != "--"),
    )
    run_real_bias(settings)
    print(open(f"{settings.output_dir}/summary.md").read())
    print(f"plot, summaries and runs: {settings.output_dir}/")


if __name__ == "__main__":
    run_main(main)
