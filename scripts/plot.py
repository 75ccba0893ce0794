"""Training curves of one or more runs, overlaid: reward / pass rate, correct vs incorrect length, zero-variance
groups, entropy, KL, clip fraction, truncation, learning rate and, on python_tool runs, three tool panels, from each
run's trainer_state.json. Only the panels some run logged are drawn; the script says which it left out and why.

    python scripts/plot.py RUN_DIR [RUN_DIR ...] [--labels A B ...] [--output outputs/plots/curves.png]
"""

import argparse

from drgrpo.core.errors import UsageError, run_main
from drgrpo.observe.plotting import (
    KL_LABELS,
    absent_notes,
    kl_shown,
    load_log_history,
    logged_panels,
    plot_runs,
    run_labels,
)


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
        raise UsageError(f"--labels has {len(labels)} names for {len(args.runs)} runs: give one label per run.")
    try:
        histories = {label: load_log_history(run) for label, run in zip(labels, args.runs, strict=True)}
    except (FileNotFoundError, ValueError) as error:  # one line naming the run (a usage line would only repeat it)
        raise UsageError(str(error)) from None
    panels = logged_panels(histories)  # none: plot_runs raises a one-line error naming the runs
    print(f"wrote {plot_runs(histories, args.output, title=args.title, smooth=args.smooth)}: {len(panels)} panels")
    for note in absent_notes(histories):
        print(note)
    if any(key in KL_LABELS for panel in panels for key, _ in panel.series):  # the KL panel is drawn: whose KL
        for label, history in histories.items():
            print(f"{label}: the KL panel shows {kl_shown(history)}")


if __name__ == "__main__":
    run_main(main)
