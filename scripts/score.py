"""Score a jsonl of (completion, gold) rows with any reward specs: print the summary and the rows scored None or
failed, and write per-row results. Check a verifier (and hunt reward hacking) before spending GPU hours.

python scripts/score.py --input samples.jsonl --reward_funcs accuracy boxed_format [--output scored.jsonl]
"""

import json
import logging
from pathlib import Path

from transformers import HfArgumentParser

from drgrpo.core.errors import run_main
from rewards import RewardArguments, get_reward_funcs
from rewards.scoring import ScoreArguments, flagged_rows, load_rows, score_rows, summarize, truncated_flags


def main() -> None:
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    args, reward_args = HfArgumentParser((ScoreArguments, RewardArguments)).parse_args_into_dataclasses()
    rows = load_rows(args.input, args.completion_column, args.answer_column)
    funcs = get_reward_funcs(reward_args.reward_funcs, reward_args, args.max_completion_length)
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    truncated = truncated_flags(rows, args.truncated_column, args.truncated_as_wrong)
    results = score_rows(
        rows,
        funcs,
        args.completion_column,
        args.answer_column,
        tokenizer,
        args.batch_size,
        truncated,
        args.truncated_as_wrong,
    )
    names = [f.__name__ for f in funcs]
    output = Path(args.output or Path(args.input).with_suffix(".scored.jsonl"))
    with output.open("w") as f:
        for row, result in zip(rows, results, strict=True):
            f.write(json.dumps({**result, "answer": row[args.answer_column]}, ensure_ascii=False) + "\n")
    print(f"{len(rows)} rows from {args.input}")
    for name, stats in summarize(results, names).items():
        mean = "n/a" if stats["mean"] is None else f"{stats['mean']:.4f}"
        share = "n/a" if stats["share_1.0"] is None else f"{stats['share_1.0']:.2%}"
        print(f"{name}: mean {mean}, scored 1.0: {share}, None: {stats['none']}, failures: {stats['failures']}")
        if stats["truncated"]:
            rule = (
                "counted wrong" if args.truncated_as_wrong else "graded as they are; --truncated_as_wrong counts them 0"
            )
            print(f"  {stats['truncated']} truncated rows ({rule}): {stats['truncated_1.0']} scored 1.0")
    flagged = flagged_rows(results, names)
    print(f"{len(flagged)} rows scored None or failed" + (f" (first {args.show}):" if flagged else "."))
    for result in flagged[: args.show]:
        row = rows[result["index"]]
        details = {n: (result[n], result[f"{n}_detail"]) for n in names}
        completion = str(row[args.completion_column])
        gold = str(row[args.answer_column])  # code tests can be long: show their start
        print(f"  row {result['index']}: gold={gold[:120]!r} {details} completion={completion[-120:]!r}")
    print(f"per-row results: {output}")


if __name__ == "__main__":
    run_main(main)
