"""Training curves of one or more runs, overlaid: reward / pass rate, correct vs incorrect length, zero-variance
groups, entropy, KL, clip fraction, truncation and learning rate, from each run's trainer_state.json.

    python scripts/plot.py RUN_DIR [RUN_DIR ...] [--labels A B ...] [--output outputs/plots/curves.png]
"""

import argparse

from drgrpo.core.errors import run_main
from drgrpo.observe.plotting import kl_shown, load_log_history, plot_runs, run_labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="training output_dir(s), or trainer_state.json file(s)")
    parser.add_argument("--labels", nargs="+", help="legend label per run (default: the folder names)")
    parser.add_argument("--output", default="outputs/plots/curves.png", help="PNG file to write")
    parser.add_argument("--title", default=None, help="figure title (default: the labels)")
    parser.add_argument("--smooth", type=int, default=None, help="moving-average window, in logs (1: raw)")
    args = parser.parse_args()
    labels = args.labels or run_labels(args.runs)
    if len(labels) != len(args.runs):
        parser.error(f"--labels has {len(labels)} names for {len(args.runs)} runs.")
    try:
        histories = {label: load_log_history(run) for label, run in zip(labels, args.runs, strict=True)}
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    print(f"wrote {plot_runs(histories, args.output, title=args.title, smooth=args.smooth)}")
    for label, history in histories.items():
        print(f"{label}: the KL panel shows {kl_shown(history)}")


if __name__ == "__main__":
    run_main(main)
