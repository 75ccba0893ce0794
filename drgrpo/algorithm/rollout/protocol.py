"""The inline tool protocol (ToRA / SimpleTIR style), on token ids: where a turn's program closes, what it was, and
the observation text that follows it.

A turn is the tokens the policy generates between two observations. It calls the tool by writing

    ```python
    print(4821 * 317)
    ```

and the turn ends at the token that completes the closing fence (a line starting with three backticks after an
opening ```python / ```py / ```python3 line). The cut is made on the generated ids, token by token: the trained ids
are exactly the ids generated (up to that token) plus the observation's ids, never a decode-and-re-tokenize of the
policy's own text. Each token's text is read once from the tokenizer (`TokenPieces`) to find the fence, so the same
scan runs inside generation (a stopping criterion) and after it (the cut), and both agree by construction.

The observation is ```output\\n<text>\\n```\\n, preceded by a newline when the turn's last token did not end one, and
it is tokenized as plain text (`observation_ids`): a program cannot print its way to a control token.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# ```python / ```py / ```python3, up to 4 spaces or tabs, then the end of the line: at most 15 characters.
OPENING = re.compile(r"```(?:python3|python|py)[ \t]{0,4}\n")
OPENING_MAX_CHARS = 15
CLOSING = "\n```"

# Why a turn ended, as `cut_turn` reports it.
FENCE, EOS, BUDGET, OPEN = "fence", "eos", "budget", "open"


class TokenPieces:
    """The text of single token ids (`tokenizer.decode([id])`), each decoded once and cached.

    Only backticks, letters and newlines matter to the fence, and a single token decodes them as they read in the
    whole text (a token holding part of a multi-byte character decodes to a replacement character, never to one of
    those).
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        piece = self._cache.get(token_id)
        if piece is None:
            piece = self._cache[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=True)
        return piece


class FenceScanner:
    """Fed a turn's token texts one at a time; says at which token a ```python block closed, and holds its code.

    Incremental: each `feed` searches only the new text (plus the few characters a fence may straddle), so a turn of
    n tokens costs O(n) however long it gets.
    """

    def __init__(self) -> None:
        self.text = ""
        self.body_start: int | None = None  # where the code starts, once an opening line is complete
        self.code: str | None = None  # the program, once the closing fence is complete

    @property
    def in_code(self) -> bool:
        """An opening line was written and its block is not closed yet."""
        return self.body_start is not None and self.code is None

    def feed(self, piece: str) -> bool:
        """Add one token's text; True when this token completes the closing fence (and `code` is then set)."""
        if self.code is not None:
            raise RuntimeError("FenceScanner: the block is already closed; a new turn needs a new scanner.")
        start = len(self.text)
        self.text += piece
        if self.body_start is None:
            match = OPENING.search(self.text, max(0, start - OPENING_MAX_CHARS))
            if match is None:
                return False
            self.body_start = match.end()
            start = self.body_start
        # The closing fence's newline may be the opening line's own (an empty program) or any later one.
        at = self.text.find(CLOSING, max(self.body_start - 1, start - len(CLOSING)))
        if at < 0:
            return False
        self.code = self.text[self.body_start : at + 1] if at >= self.body_start else ""
        return True


@dataclass(frozen=True)
class TurnCut:
    """Where a generated turn ends: `length` of its ids are kept; `reason` is FENCE (its program closed: run it),
    EOS (the answer ended), BUDGET (the token budget ran out) or OPEN (the generator stopped without any of these:
    generation goes on from here); `code` is the program for FENCE; `in_code` says the turn stopped inside an open
    block."""

    length: int
    reason: str
    code: str | None = None
    in_code: bool = False


def cut_turn(
    ids: Sequence[int],
    pieces: TokenPieces,
    eos_ids: Sequence[int],
    budget: int,
    scanner: FenceScanner | None = None,
) -> TurnCut:
    """The first place where a turn ends in `ids`: the token completing a closing fence or an eos token (both
    kept), or `budget` tokens. The scan a stopping criterion runs during generation, run again on what came out.

    `scanner` continues a turn the generator stopped early (OPEN): it holds the text of that turn so far.
    """
    scanner = scanner if scanner is not None else FenceScanner()
    eos = set(eos_ids)
    for index, token in enumerate(ids):
        if index >= budget:
            return TurnCut(index, BUDGET, in_code=scanner.in_code)
        if token in eos:
            return TurnCut(index + 1, EOS)
        if scanner.feed(pieces(int(token))):
            return TurnCut(index + 1, FENCE, scanner.code)
    if len(ids) >= budget:
        return TurnCut(len(ids), BUDGET, in_code=scanner.in_code)
    return TurnCut(len(ids), OPEN, in_code=scanner.in_code)


def observation_text(output: str, turn_text: str) -> str:
    """The observation appended after a turn whose text is `turn_text`: ```output, the tool's output, ```."""
    lead = "" if turn_text.endswith("\n") else "\n"
    return f"{lead}```output\n{output}\n```\n"


def observation_ids(tokenizer: Any, text: str) -> list[int]:
    """The observation's ids: its text tokenized as plain text. The text of a control token that a program prints
    (`<|im_end|>`, `<|im_start|>user`) becomes ordinary characters, never the token itself, so the tool's output
    cannot end the answer, open a turn of another role, or stand for the policy's eos in the trained ids."""
    return tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)


def has_answer(text: str, marker: str) -> bool:
    """Whether a turn's text gives the final answer (holds `marker`, e.g. `\\boxed{`)."""
    return marker in text
