"""`make probe-tools`: which task should tool-integrated RL train on? The untrained SmolLM2-135M-Instruct, greedy, on a
held-out set of each task family, with the Python tool (call budget B=4) and without it (B=0); one table, and the
families in issue 45's window (5%-40% with the tool, below 5% without).

    python scripts/probe_tool_tasks.py [--num_test 100] [--round 2 | --families product chain ...] [--output_dir DIR]

Prepares the model first if the cache lacks it (`make smollm2`); writes DIR/probe.json, probe.md, the held-out
sets (data/), the two prompts (prompt-B4.yaml, prompt-B0.yaml) and every sample's turns (eval/). An interrupted probe
resumes: rerun the same command. DIR: outputs/probe-tools by default. drgrpo/experiments/tool_probe.py names the
families and why each.
"""

import argparse
import logging

from drgrpo.core.errors import run_main


def main() -> None:
    from drgrpo.experiments.tool_probe import FAMILIES, ROUNDS, ProbeSettings

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=ProbeSettings.output_dir)
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--families", nargs="+", choices=list(FAMILIES), help="every family by default")
    chosen.add_argument("--round", type=int, choices=list(ROUNDS), help="the families of one round of the probe")
    parser.add_argument("--num_test", type=int, default=ProbeSettings.num_test, help="held-out problems per family")
    parser.add_argument("--seed", type=int, default=ProbeSettings.seed, help="the held-out sets' seed")
    parser.add_argument(
        "--max_new_tokens", type=int, default=ProbeSettings.max_new_tokens, help="tokens per answer, model and tool"
    )
    parser.add_argument("--batch_size", type=int, default=ProbeSettings.batch_size, help="samples per engine call")
    parser.add_argument("--overwrite", action="store_true", help="start over instead of resuming an earlier probe")
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    from drgrpo.experiments.tool_probe import format_table, run_probe
    from drgrpo.setup.model_prep import prepare_model

    prepare_model(ProbeSettings.model)  # instant when `make smollm2` has run
    settings = ProbeSettings(
        output_dir=args.output_dir,
        families=tuple(args.families or (ROUNDS[args.round] if args.round else FAMILIES)),
        num_test=args.num_test,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        overwrite=args.overwrite,
    )
    print(format_table(run_probe(settings)))


if __name__ == "__main__":
    run_main(main)
