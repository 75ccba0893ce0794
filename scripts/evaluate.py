"""Evaluate a checkpoint on a math benchmark: pass@1, pass@k and maj@k with the training verifier.

    python scripts/evaluate.py --model_name_or_path outputs/demo/model --benchmark math500 --n 8 --temperature 1.0
    python scripts/evaluate.py --model_name_or_path M --data test.jsonl --question_column q --answer_column a

Rerunning the same command resumes: samples already in OUTPUT_DIR/samples.jsonl are not generated again. The default
OUTPUT_DIR, outputs/eval/<model>/<benchmark>[-<settings>], names the settings that differ from the defaults (--n 8
--temperature 1.0: math500-n8-t1.0), so other settings never land in the same folder.
All options: `python scripts/evaluate.py --help` (fields of `drgrpo.evaluation.EvalArguments`).
"""

from __future__ import annotations

import logging
import sys

from transformers import HfArgumentParser

from drgrpo.core.errors import run_main
from drgrpo.evaluation import EvalArguments, run_evaluation, summary_markdown


def main(argv: list[str] | None = None) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    (args,) = HfArgumentParser(EvalArguments).parse_args_into_dataclasses(args=argv, look_for_args_file=False)
    summary = run_evaluation(args)
    print(summary_markdown(summary))
    print(f"Wrote samples.jsonl, summary.json and summary.md to {summary['output_dir']}")
    return summary


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
