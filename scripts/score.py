"""Score a jsonl of (completion, gold) rows with any reward specs: print the summary, what happened to the programs of
code rewards (timeouts, crashes, sandbox errors) and the rows scored None or failed, and write per-row results.
Check a verifier (and hunt reward hacking) before spending GPU hours.

python scripts/score.py --input samples.jsonl --reward_funcs accuracy boxed_format [--output scored.jsonl]
python scripts/score.py --input programs.jsonl --reward_funcs code code_format   # reads the tests column
"""

import json
import logging
import os
import sys
from pathlib import Path

from drgrpo.core.errors import RecipeError, run_main

USAGE = {
    "make": 'make score SCORE_INPUT=samples.jsonl [SCORE_REWARDS="accuracy boxed_format"] [ARGS="--output x.jsonl"]',
    "script": "python scripts/score.py --input samples.jsonl --reward_funcs accuracy [--output x.jsonl]",
}
PROGRAM_FAILURES = ("first: timeout", "first: crash", "first: output_limit")


def require_input(argv: list[str]) -> None:
    """One line with the usage when no input file is given (instead of argparse's usage of every option)."""
    if {"-h", "--help"} & set(argv) or any(arg == "--input" or arg.startswith("--input=") for arg in argv):
        return
    usage = USAGE["make"] if os.environ.get("MAKELEVEL") else USAGE["script"]
    raise RecipeError(
        f"No input file to score. Usage: {usage}; the file holds one JSON object per line with a completion and its "
        "gold answer (or, for code rewards, its tests). All options: python scripts/score.py --help."
    )


def main() -> None:
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    require_input(sys.argv[1:])
    from transformers import HfArgumentParser

    from rewards import RewardArguments, get_reward_funcs
    from rewards.scoring import (
        ScoreArguments,
        counter_line,
        default_answer_column,
        first_columns,
        flagged_rows,
        load_rows,
        score_rows,
        summarize,
        truncated_flags,
    )

    args, reward_args = HfArgumentParser((ScoreArguments, RewardArguments)).parse_args_into_dataclasses()
    answer_column = args.answer_column or default_answer_column(
        reward_args.reward_funcs, reward_args.tests_column, first_columns(args.input)
    )
    rows = load_rows(args.input, args.completion_column, answer_column)
    funcs = get_reward_funcs(reward_args.reward_funcs, reward_args, args.max_completion_length)
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    counters: dict = {}
    truncated = truncated_flags(rows, args.truncated_column, args.truncated_as_wrong)
    results = score_rows(
        rows,
        funcs,
        args.completion_column,
        answer_column,
        tokenizer,
        args.batch_size,
        counters,
        truncated,
        args.truncated_as_wrong,
    )
    names = [f.__name__ for f in funcs]
    output = Path(args.output or Path(args.input).with_suffix(".scored.jsonl"))
    with output.open("w") as f:
        for row, result in zip(rows, results, strict=True):
            f.write(json.dumps({**result, "answer": row[answer_column]}, ensure_ascii=False) + "\n")
    print(f"{len(rows)} rows from {args.input} (gold column {answer_column!r})")
    for name, stats in summarize(results, names).items():
        mean = "n/a" if stats["mean"] is None else f"{stats['mean']:.4f}"
        share = "n/a" if stats["share_1.0"] is None else f"{stats['share_1.0']:.2%}"
        print(f"{name}: mean {mean}, scored 1.0: {share}, None: {stats['none']}, failures: {stats['failures']}")
        if stats["truncated"]:
            rule = (
                "counted wrong" if args.truncated_as_wrong else "graded as they are; --truncated_as_wrong counts them 0"
            )
            print(f"  {stats['truncated']} truncated rows ({rule}): {stats['truncated_1.0']} scored 1.0")
    for name in names:
        line = counter_line(name, counters.get(name, {}))
        if line:
            print(line)

    def show(result: dict) -> None:
        row = rows[result["index"]]
        details = {n: (result[n], result[f"{n}_detail"]) for n in names}
        completion = str(row[args.completion_column])
        gold = str(row[answer_column])  # code tests can be long: show their start
        print(f"  row {result['index']}: gold={gold[:120]!r} {details} completion={completion[-120:]!r}")

    flagged = flagged_rows(results, names)
    print(f"{len(flagged)} rows scored None or failed" + (f" (first {args.show}):" if flagged else "."))
    for result in flagged[: args.show]:
        show(result)
    programs = [
        r
        for r in results
        if r not in flagged and any(word in str(r[f"{n}_detail"]) for n in names for word in PROGRAM_FAILURES)
    ]
    if programs:
        print(f"{len(programs)} rows whose program timed out or crashed first (scored as failed tests, not None):")
        for result in programs[: args.show]:
            show(result)
    print(f"per-row results: {output}")


if __name__ == "__main__":
    run_main(main)
