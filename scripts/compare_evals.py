"""Put several evaluations side by side: one markdown table, models as rows and benchmarks as columns. A model
evaluated on a benchmark with several settings (N=1 greedy, N=4 sampled) gets a row per setting, labelled with them.

python scripts/compare_evals.py outputs/eval                      # every summary.json under the folder
python scripts/compare_evals.py outputs/eval/a outputs/eval/b --metric maj@8 --paper
"""

from __future__ import annotations

import argparse
import sys

from drgrpo.core.errors import run_main
from drgrpo.evaluation import PAPER_RESULTS, comparison_table, find_summaries


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="Evaluation folders, parents of them, or summary.json files.")
    parser.add_argument("--metric", default="pass@1", help="Summary metric to show: pass@1, pass@k, maj@n.")
    parser.add_argument(
        "--paper",
        action="store_true",
        help="Add the Dr.GRPO paper's Oat-Zero rows (greedy pass@1, Table 4; labelled so whatever --metric).",
    )
    args = parser.parse_args(argv)
    table = comparison_table(find_summaries(args.paths), args.metric, PAPER_RESULTS if args.paper else None)
    print(table, end="")
    return table


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
