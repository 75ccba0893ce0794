"""Agreement with labels on real text: (completion, gold) pairs built from public benchmark files, graded by the
`accuracy` reward's grader under each answer-extraction mode.

    python benchmarks/grading_pairs.py --data /path/to/benchmark/files [--modes math_verify lenient boxed_only]

`--data` is a folder laid out as the project's reference copy of the benchmark files (gsm8k/test.jsonl,
math500/test.jsonl, train_lvl3to5.jsonl, qwen25math_eval/{minerva_math,olympiadbench}/test.jsonl); nothing here is
needed at run time or by the tests. Each reference solution is paired with its own gold (label 1) and with the next
problem's gold (label 0, left out when both golds are the same string). Sets, as in docs/grading.md:

- `gsm8k_hash`: GSM8K test solutions, ending `#### N`; `gsm8k_prose`: the same ending "So the answer is N.";
- `math_boxed`: MATH-500, Minerva-Math and the first 1,219 MATH train (levels 3-5) solutions, with their boxes;
- `math500_unboxed`: MATH-500 solutions with the final box removed (`\\boxed{X}` -> `X`);
- `olympiad`: OlympiadBench solutions (mostly unboxed), golds from `final_answer`.

Prints per set the pairs, disagreements with the labels and false positives (label 0, credited), and the time.
To measure another version of the reward, put its checkout first: `PYTHONPATH=/old/checkout python ...`.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import time
from pathlib import Path

from rewards import get_grader

_LAST_BOX = re.compile(r"\\boxed\{")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _gsm8k_gold(solution: str) -> str:
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def _unbox_last(text: str) -> str | None:
    """`text` with its last `\\boxed{X}` written as `X`; None if it has no closed box."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[:start] + text[start + len("\\boxed{") : i] + text[i + 1 :]
        i += 1
    return None


def _as_list(value) -> list:
    """A list field, stored as a list or as its Python repr."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return [value]
    return value if isinstance(value, list) else [value]


def _olympiad_gold(final_answer) -> str | None:
    from drgrpo.data.golds import list_answer

    return list_answer(_as_list(final_answer))


def _pairs(completions: list[str], golds: list[str | None]) -> list[tuple[str, str, int]]:
    """Each completion with its own gold (1) and the next problem's gold (0, unless it is the same string)."""
    pairs = []
    for i, (completion, gold) in enumerate(zip(completions, golds, strict=True)):
        if gold is None:
            continue
        pairs.append((completion, gold, 1))
        other = golds[(i + 1) % len(golds)]
        if other is not None and other.strip() != gold.strip():
            pairs.append((completion, other, 0))
    return pairs


def build_sets(data: Path) -> dict[str, list[tuple[str, str, int]]]:
    """The labelled (completion, gold, label) pairs of each set."""
    from drgrpo.data.golds import last_boxed

    gsm8k = _rows(data / "gsm8k/test.jsonl")
    hash_solutions = [r["answer"] for r in gsm8k]
    gsm8k_golds = [_gsm8k_gold(s) for s in hash_solutions]
    prose = [
        s.rsplit("####", 1)[0].rstrip() + f"\nSo the answer is {g}."
        for s, g in zip(hash_solutions, gsm8k_golds, strict=True)
    ]
    math500 = _rows(data / "math500/test.jsonl")
    minerva = _rows(data / "qwen25math_eval/minerva_math/test.jsonl")
    train = _rows(data / "train_lvl3to5.jsonl")[:1219]
    boxed_solutions = [r["solution"] for r in math500 + minerva + train]
    boxed_golds = [r["answer"] for r in math500] + [last_boxed(r["solution"]) for r in minerva]
    boxed_golds += [r["answer"] for r in train]
    unboxed = [(_unbox_last(r["solution"]), r["answer"]) for r in math500]
    unboxed = [(s, g) for s, g in unboxed if s is not None]
    olympiad = _rows(data / "qwen25math_eval/olympiadbench/test.jsonl")
    olympiad_solutions = []
    for row in olympiad:
        parts = _as_list(row["solution"])
        olympiad_solutions.append("\n\n".join(map(str, parts)))
    return {
        "gsm8k_hash": _pairs(hash_solutions, gsm8k_golds),
        "gsm8k_prose": _pairs(prose, gsm8k_golds),
        "math_boxed": _pairs(boxed_solutions, boxed_golds),
        "math500_unboxed": _pairs([s for s, _ in unboxed], [g for _, g in unboxed]),
        "olympiad": _pairs(olympiad_solutions, [_olympiad_gold(r["final_answer"]) for r in olympiad]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="folder holding the benchmark files (see above)")
    parser.add_argument("--modes", nargs="+", default=["math_verify"], help="answer_extraction_mode values to grade")
    parser.add_argument("--workers", type=int, default=2, help="verifier processes")
    parser.add_argument("--show", type=int, default=0, help="print this many disagreements per set and mode")
    args = parser.parse_args()
    sets = build_sets(Path(args.data))
    total = sum(map(len, sets.values()))
    print(f"{total} pairs: " + ", ".join(f"{name} {len(pairs)}" for name, pairs in sets.items()))
    for mode in args.modes:
        grader = get_grader(timeout=5.0, num_workers=args.workers, extraction_mode=mode)
        start = time.perf_counter()
        rows, wrong, false_pos = 0, 0, 0
        for name, pairs in sets.items():
            results = grader.grade([c for c, _, _ in pairs], [g for _, g, _ in pairs])
            misses = [(p, r) for p, r in zip(pairs, results, strict=True) if bool(r.verdict) != bool(p[2])]
            fps = sum(1 for p, _ in misses if not p[2])
            print(f"  {mode:11s} {name:16s} {len(pairs):6d} pairs  {len(misses):5d} disagreements  {fps:3d} false +")
            for (completion, gold, label), result in misses[: args.show]:
                print(f"      label {label} gold {gold[:50]!r} read {result.extracted!r} ... {completion[-100:]!r}")
            rows, wrong, false_pos = rows + len(pairs), wrong + len(misses), false_pos + fps
        seconds = time.perf_counter() - start
        print(f"  {mode:11s} {'all':16s} {rows:6d} pairs  {wrong:5d} disagreements  {false_pos:3d} false +", end="")
        print(f"  {seconds:.0f} s")


if __name__ == "__main__":
    main()
