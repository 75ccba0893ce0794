"""The length-bias task: a carry guess written first and checked by the policy's own working, the answer, then a tail.

A completion is `c{guess} {x}+{y}={x+y}, {answer};{tail}`: the guessed carry flag (`c1` carry, `c0` none), the ones
digits and their sum written out, the two-digit sum computed *with the guessed carry*, `;`, then `k` filler
characters and end-of-sequence. Problems are all two-digit additions (`10..99`), a natural mix of carry (45%) and
no-carry ones. The teacher guesses the flag at random (right with probability `1 - guess_error_rate`, whatever the
problem), always follows its guess in the answer, and writes its tail with `.` when the guess agrees with the ones sum
it wrote (`x+y >= 10` exactly when `c1`) and `:` when it does not, `k` uniform in `0..max_tail`. So the answer is
right exactly when the guess checks out, and *whether it does is readable from what was written*: `c1 3+4=7` or
`c0 7+8=15` is visibly wrong. The grader reads the last number (the sum), so the tail never changes the reward.

Why this shape: at a length decision with context `s`, the expected `dr_grpo` update of the tail length is
`E[A | s] * E[grad log pi] = 0`, while the `grpo` update is `E[A | s] * grad E[1/|o| | s]`, non-zero only where the
context predicts the advantage. The first design (every problem needed a carry; `c0` was wrong) let RL fix the visible
error within ~30 steps by writing `c1` always, after which the wrong answers left were invisible slips. Here no
constant flag is right: the policy must decide the carry from the ones digits at its *first* token, before it has
written them out, which the tiny model learns slowly, so visibly wrong answers stay in the batches for the run.
"""

from __future__ import annotations

import random

RIGHT_FILLER = "."
WRONG_FILLER = ":"
ANSWER_END = ";"


def tail_filler(guess_checks_out: bool) -> str:
    """The tail character after a guess the written ones sum confirms (`.`) or contradicts (`:`)."""
    return RIGHT_FILLER if guess_checks_out else WRONG_FILLER


def guessed_answer(a: int, b: int, guess: bool) -> str:
    """`c1 7+8=15, 85;`: the guessed flag, the ones digits and their sum, the sum with the guessed carry, and `;`.

    The comma keeps the grader from reading `=4 104` as the number 4104."""
    x, y = a % 10, b % 10
    tens = (a // 10 + b // 10 + int(guess)) * 10
    return f"c{int(guess)} {x}+{y}={x + y}, {tens + (x + y) % 10}{ANSWER_END}"


def tail_demonstrations(rows: list[dict], guess_error_rate: float, max_tail: int, seed: int = 0) -> list[dict]:
    """Prompt/completion pairs `c{guess} {x}+{y}={x+y}, {sum};{filler * k}`: the guess wrong with probability
    `guess_error_rate` whatever the problem, `k` uniform in `0..max_tail`, `.` after a guess that checks out."""
    if not 0.0 <= guess_error_rate <= 1.0:
        raise ValueError(f"guess_error_rate must be in [0, 1], got {guess_error_rate}.")
    if max_tail < 0:
        raise ValueError(f"max_tail must be >= 0, got {max_tail}.")
    rng = random.Random(seed)
    demos = []
    for row in rows:
        a, b = (int(x) for x in row["question"].rstrip("=").split("+"))
        carry = a % 10 + b % 10 >= 10
        guess = carry if rng.random() >= guess_error_rate else not carry
        tail = tail_filler(guess == carry) * rng.randint(0, max_tail)
        demos.append({"prompt": row["question"], "completion": guessed_answer(a, b, guess) + tail})
    return demos


def split_completion(completion: str) -> tuple[str, str]:
    """(answer part up to and including `;`, tail after it); a completion without `;` is all answer, no tail."""
    end = completion.find(ANSWER_END)
    if end < 0:
        return completion, ""
    return completion[: end + 1], completion[end + 1 :]


def guess_checks_out(completion: str) -> bool | None:
    """Whether the written flag agrees with the written ones sum (`c1 7+8=15` or `c0 3+4=7`: True), read from the
    text alone; None when the completion does not start `c{0|1} x+y=s,`."""
    if len(completion) < 3 or completion[0] != "c" or completion[1] not in "01" or completion[2] != " ":
        return None
    working, comma, _ = completion[3:].partition(",")
    left, _, total = working.partition("=")
    if not comma:
        return None
    if not total.isdigit() or "+" not in left:
        return None
    return (completion[1] == "1") == (int(total) >= 10)
