"""The length-bias task: carry additions with a visible carry flag and the answer first, then a free-length tail.

A completion is `c{flag} {answer};{tail}`: the carry flag (`c1` carried, `c0` dropped), the sum, `;`, then `k`
filler characters and end-of-sequence. The sloppy teacher (`drgrpo.tasks.sloppy_sum`) drops the carry with
probability `carry_error_rate`; it writes its tail with `.` after `c1` and `:` after `c0`, `k` uniform in
`0..max_tail`. Every problem needs a carry, so `c0` answers are wrong. The grader reads the last number (the sum),
so the tail never changes the reward.

Why this shape (issue 13): at a length decision with context `s`, the expected `dr_grpo` update of the tail length is
`E[A | s] * E[grad log pi] = 0`, while the `grpo` update is `E[A | s] * grad E[1/|o| | s]`, non-zero only where the
context predicts the advantage. Here the tail comes *after* the answer, and its character repeats the flag that decides
correctness, so `E[A | s] < 0` in `:` tails and `> 0` in `.` tails, and the tiny model can tell the two apart (with
one shared filler character its tail length barely depended on the answer, and nothing moved).
"""

from __future__ import annotations

import random

from drgrpo.tasks import sloppy_sum

RIGHT_FILLER = "."
WRONG_FILLER = ":"
ANSWER_END = ";"


def tail_filler(carried: bool) -> str:
    """The tail character after a carried (`.`) or a dropped (`:`) carry."""
    return RIGHT_FILLER if carried else WRONG_FILLER


def flagged_answer(a: int, b: int, carried: bool) -> str:
    """`c1 85;` or `c0 75;`: the flag, the (sloppy) sum and the end-of-answer mark, before the tail."""
    return f"c{int(carried)} {sloppy_sum(a, b, not carried)}{ANSWER_END}"


def tail_demonstrations(rows: list[dict], carry_error_rate: float, max_tail: int, seed: int = 0) -> list[dict]:
    """Prompt/completion pairs `c{flag} {sum};{filler * k}`: the carry dropped with probability `carry_error_rate`,
    `k` uniform in `0..max_tail`, the filler `.` after a carried sum and `:` after a dropped one."""
    if not 0.0 <= carry_error_rate <= 1.0:
        raise ValueError(f"carry_error_rate must be in [0, 1], got {carry_error_rate}.")
    if max_tail < 0:
        raise ValueError(f"max_tail must be >= 0, got {max_tail}.")
    rng = random.Random(seed)
    demos = []
    for row in rows:
        a, b = (int(x) for x in row["question"].rstrip("=").split("+"))
        carried = rng.random() >= carry_error_rate
        tail = tail_filler(carried) * rng.randint(0, max_tail)
        demos.append({"prompt": row["question"], "completion": flagged_answer(a, b, carried) + tail})
    return demos


def split_completion(completion: str) -> tuple[str, str]:
    """(answer part up to and including `;`, tail after it); a completion without `;` is all answer, no tail."""
    end = completion.find(ANSWER_END)
    if end < 0:
        return completion, ""
    return completion[: end + 1], completion[end + 1 :]


def carried_flag(completion: str) -> bool | None:
    """The flag a completion wrote (`c1` True, `c0` False), or None when it does not start with one."""
    if len(completion) >= 2 and completion[0] == "c" and completion[1] in "01":
        return completion[1] == "1"
    return None
