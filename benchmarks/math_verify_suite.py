"""Agreement with Math-Verify's own regression suite: the `accuracy` reward's verdicts against the expected ones.

    python benchmarks/math_verify_suite.py [--mode math_verify] [--workers 2] [--show 30]

`benchmarks/data/math_verify_suite.jsonl` holds the 255 (gold, prediction, expected) cases of huggingface/Math-Verify
0.9.0's tests (test_all.py without the 4 `allow_set_relation_comp` cases, test_boxed.py, test_numina_cases.py,
test_open_thoughts.py; Apache-2.0, `benchmarks/data/MATH_VERIFY_LICENCE`), with the per-case float precision of the
15 `test_complex_math_expressions` cases. The reward grades every case with its fixed precision (6 decimals), as
training does; math-verify is shown both ways: as its tests call it (`compare_strings`, per-case precision) and at
the reward's 6 decimals. Prints agreements, false positives (expected 0, credited), and every disagreement.

To measure another version of the reward (e.g. before a change), put its checkout first on the path:
`PYTHONPATH=/path/to/old/checkout python benchmarks/math_verify_suite.py`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from rewards import get_grader

SUITE = Path(__file__).resolve().parent / "data" / "math_verify_suite.jsonl"


def load_suite(path: Path = SUITE) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def math_verify_verdict(gold: str, pred: str, precision: int) -> bool:
    """What Math-Verify's tests compute (`tests/test_all.py::compare_strings`): LaTeX (boxes first) and expressions."""
    configs = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    try:
        return bool(verify(parse(gold, configs), parse(pred, configs), float_rounding=precision))
    except Exception:  # noqa: BLE001 - a crash is a miss, as a failing test would be
        return False


def tally(verdicts: list[bool], rows: list[dict]) -> tuple[int, int]:
    """(agreements with the expected verdicts, false positives)."""
    agree = sum(v == bool(r["expected"]) for v, r in zip(verdicts, rows, strict=True))
    false_positives = sum(v and not r["expected"] for v, r in zip(verdicts, rows, strict=True))
    return agree, false_positives


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", default="math_verify", help="answer_extraction_mode of the reward")
    parser.add_argument("--workers", type=int, default=2, help="verifier processes (0: in this process)")
    parser.add_argument("--show", type=int, default=30, help="disagreements to print")
    args = parser.parse_args()
    rows = load_suite()
    results = get_grader(timeout=10.0, num_workers=args.workers, extraction_mode=args.mode).grade(
        [r["pred"] for r in rows], [r["gold"] for r in rows]
    )
    ours = [bool(r.verdict) for r in results]
    own_precision = [math_verify_verdict(r["gold"], r["pred"], r.get("precision", 6)) for r in rows]
    six_decimals = [math_verify_verdict(r["gold"], r["pred"], 6) for r in rows]
    print(f"{len(rows)} cases ({sum(not r['expected'] for r in rows)} expected 0), reward mode {args.mode}")
    for name, verdicts in [
        ("accuracy reward", ours),
        ("math-verify, as its tests call it", own_precision),
        ("math-verify at 6 decimals", six_decimals),
    ]:
        agree, false_positives = tally(verdicts, rows)
        print(f"{name:34s} agrees on {agree}/{len(rows)}, false positives {false_positives}")
    misses = [(r, res) for r, res, v in zip(rows, results, ours, strict=True) if v != bool(r["expected"])]
    for row, result in misses[: args.show]:
        print(
            f"  {row['source']}: expected {row['expected']}, reward {int(bool(result.verdict))} "
            f"(read {result.extracted!r}); gold {row['gold'][:60]!r} pred {row['pred'][-80:]!r}"
        )


if __name__ == "__main__":
    main()
