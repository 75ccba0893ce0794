"""What Dr.GRPO fixes, on a real model: the fixed-batch length-bias mechanism on SmolLM2-135M-Instruct's own answers,
then GRPO vs Dr.GRPO trained from the same start (recipes/smollm2_135m_long_{grpo,drgrpo}.yaml) on several seeds;
writes outputs/bias-real/{summary.md,summary.json,curves.png} (docs/bias.md). Prints its expected time first; rerun
after an interruption to continue (finished parts are kept). With `--max_minutes N` it stops at the first safe point
past N minutes and exits with status 75 ("rerun to continue"): on a shared machine, a loop such as
`until flock LOCK python scripts/bias_real.py --max_minutes 30; [ $? -ne 75 ]; do :; done` holds the lock at most
about N minutes at a time.

    python scripts/bias_real.py [--seeds 0 1 2] [--num_test 100] [--mechanism_batches 24] [--max_minutes 30]
        [--no-side_by_side]
        [-- --max_steps 80 ...]
"""

import argparse
import logging

from drgrpo.core.errors import run_main


def main() -> int | None:
    from drgrpo.experiments.bias.chat_mechanism import ChatMechanismSettings
    from drgrpo.experiments.bias.real_experiment import RealBiasSettings, run_real_bias
    from drgrpo.experiments.budget import OUT_OF_TIME_EXIT, OutOfTime

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=RealBiasSettings.output_dir)
    parser.add_argument("--seeds", nargs="+", type=int, default=list(RealBiasSettings.seeds))
    parser.add_argument("--num_test", type=int, default=RealBiasSettings.num_test, help="held-out problems")
    parser.add_argument("--mechanism_batches", type=int, default=ChatMechanismSettings.num_batches)
    parser.add_argument("--mechanism_prompts", type=int, default=ChatMechanismSettings.prompts_per_batch)
    parser.add_argument("--step_norm", type=float, default=ChatMechanismSettings.step_norm, help="mechanism update")
    parser.add_argument(
        "--parts",
        nargs="+",
        default=["mechanism", "runs"],
        choices=["mechanism", "runs"],
        help="one part alone (the report is written once both are done)",
    )
    parser.add_argument(
        "--side_by_side",
        action=argparse.BooleanOptionalAction,
        default=RealBiasSettings.side_by_side,
        help="each seed's two runs at once, the cores split between them (--no-side_by_side: one after the other)",
    )
    parser.add_argument("--max_minutes", type=float, help="stop at the first safe point past this; exit status 75")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="recipe overrides for every run, after --")
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    from drgrpo.setup.model_prep import prepare_model

    prepare_model("smollm2-135m-instruct")  # instant when `make smollm2` has run
    settings = RealBiasSettings(
        output_dir=args.output_dir,
        seeds=tuple(args.seeds),
        num_test=args.num_test,
        parts=tuple(args.parts),
        max_minutes=args.max_minutes,
        side_by_side=args.side_by_side,
        mechanism=ChatMechanismSettings(
            num_batches=args.mechanism_batches, prompts_per_batch=args.mechanism_prompts, step_norm=args.step_norm
        ),
        overrides=tuple(a for a in args.overrides if a != "--"),
    )
    try:
        summary = run_real_bias(settings)
    except OutOfTime as stop:
        print(f"Stopped: {stop}. Everything finished so far is kept in {settings.output_dir}; run the same command "
              "again to continue.", flush=True)  # fmt: skip
        return OUT_OF_TIME_EXIT
    if summary:
        print(open(f"{settings.output_dir}/summary.md").read())
    print(f"plot, summaries and runs: {settings.output_dir}/")


if __name__ == "__main__":
    run_main(main)
