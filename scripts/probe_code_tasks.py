"""`make probe-code`: which task should code RL train on? The untrained SmolLM2-135M-Instruct, greedy, on a held-out
set of each family of small programming tasks (each problem with its own tests, run by the `code` reward in its
sandbox); one table, and the families in issue 55's window (a pass rate of 5%-40%). `--round 2`: the second round's
families (its table in DIR/probe-round2.md).

    python scripts/probe_code_tasks.py [--num_test 50] [--round 1 | --families sum_plus ...] [--output_dir DIR]

Prepares the model first if the cache lacks it (`make smollm2`); writes DIR/probe.json, probe.md (a later round:
probe-roundN.json, .md), the held-out sets
(data/), the prompt (prompt.yaml: the training recipe's) and every sample (eval/). An interrupted probe resumes: rerun
the same command. DIR: outputs/probe-code by default. drgrpo/experiments/code_families.py names the families and why
each; docs/code-rl.md has the results.
"""

import argparse
import logging

from drgrpo.core.errors import run_main


def main() -> None:
    from drgrpo.experiments.code_families import FAMILIES
    from drgrpo.experiments.code_probe import ROUNDS, ProbeSettings

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=ProbeSettings.output_dir)
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--families", nargs="+", choices=list(FAMILIES), help="the first round's by default")
    chosen.add_argument("--round", type=int, choices=list(ROUNDS), help="the families of one round of the probe")
    parser.add_argument("--recipe", default=ProbeSettings.recipe, help="the training recipe: its prompt and code keys")
    parser.add_argument("--num_test", type=int, default=ProbeSettings.num_test, help="held-out problems per family")
    parser.add_argument("--seed", type=int, default=ProbeSettings.seed, help="the held-out sets' seed")
    parser.add_argument("--max_new_tokens", type=int, default=ProbeSettings.max_new_tokens, help="tokens per answer")
    parser.add_argument("--batch_size", type=int, default=ProbeSettings.batch_size, help="samples per engine call")
    parser.add_argument("--overwrite", action="store_true", help="start over instead of resuming an earlier probe")
    parser.add_argument(
        "--sampled", type=int, default=0, help="also N samples per problem at the recipe's temperature (descriptive)"
    )
    parser.add_argument("--name", default=None, help="the table's files, NAME.json and NAME.md (default: the round's)")
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    from drgrpo.experiments.code_probe import format_table, run_probe
    from drgrpo.setup.model_prep import prepare_model

    prepare_model(ProbeSettings.model)  # instant when `make smollm2` has run
    settings = ProbeSettings(
        output_dir=args.output_dir,
        recipe=args.recipe,
        families=tuple(args.families or ROUNDS[args.round or 1]),
        num_test=args.num_test,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        overwrite=args.overwrite,
        name=args.name or (f"probe-round{args.round}" if args.round and args.round > 1 else "probe"),
        sampled=args.sampled,
    )
    print(format_table(run_probe(settings)))


if __name__ == "__main__":
    run_main(main)
