"""The inline tool protocol (ToRA / SimpleTIR style), on token ids: where a turn's program closes, what it was, and
the observation text that follows it.

A turn is the tokens the policy generates between two observations. It calls the tool by writing

    ```python
    print(4821 * 317)
    ```

and the turn ends at the token that completes the closing fence (a line starting with three backticks after an
opening ```python / ```py / ```python3 line). The cut is made on the generated ids, token by token: the trained ids
are exactly the ids generated (up to that token) plus the observation's ids, never a decode-and-re-tokenize of the
policy's own text. The fence is searched in the turn's text as it reads inside the whole sequence, byte for byte the
text the rewards and the evaluation decode (`IncrementalText`: incremental decoding from the few ids before the turn),
so the program that runs is the one the rewards read. A token is never decoded alone: SentencePiece tokenizers
(Llama, Mistral) drop a lone token's leading space and split characters across byte tokens, so `import os` would run
as `importos`. The same scan (`TurnScan`) runs inside generation (a stopping criterion) and after it (the cut), so
both agree by construction; `check_turn_reading` refuses, at start-up, a tokenizer whose text cannot be read this way.

The observation is ```output\\n<text>\\n```\\n, preceded by a newline when the turn's last token did not end one, and
it is tokenized as plain text (`observation_ids`): a program cannot print its way to a control token.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

# ```python / ```py / ```python3, up to 4 spaces or tabs, then the end of the line: at most 15 characters.
OPENING = re.compile(r"```(?:python3|python|py)[ \t]{0,4}\n")
OPENING_MAX_CHARS = 15
CLOSING = "\n```"

# Why a turn ended, as `cut_turn` reports it.
FENCE, EOS, BUDGET, OPEN = "fence", "eos", "budget", "open"


# The ids before a turn that its reading starts from (the prompt's or the observation's tail): enough for the turn's
# first token to read as inside the whole sequence (its leading space, a character split across byte tokens).
CONTEXT_IDS = 6
RUN_IDS = 64  # how far back the context may reach further, not to start inside a run of byte pieces
REPLACEMENT = "\ufffd"  # what a decode shows for a character whose bytes are not all there yet
# A byte-fallback token (SentencePiece: Llama, Mistral, Gemma): its decoder turns a run of them that is not valid
# UTF-8 into U+FFFD for every byte, so a byte already read can still change until a token of another kind follows.
BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")


class TurnReader:
    """Reads turns' text from their token ids with one tokenizer: `scan(context)` starts a turn after `context` (the
    ids before it). Decodes as the rewards do (`skip_special_tokens=True`); a single id's text is cached, since it is
    the window most reads start from, and so is whether an id is a byte-fallback piece."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._single: dict[int, str] = {}
        self._byte: dict[int, bool] = {}

    def decode(self, ids: Sequence[int]) -> str:
        if len(ids) == 1:
            text = self._single.get(ids[0])
            if text is None:
                text = self._single[ids[0]] = self.tokenizer.decode(list(ids), skip_special_tokens=True)
            return text
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def is_byte_piece(self, token_id: int) -> bool:
        byte = self._byte.get(token_id)
        if byte is None:
            convert = getattr(self.tokenizer, "convert_ids_to_tokens", None)
            piece = convert(token_id) if convert is not None else None
            byte = self._byte[token_id] = isinstance(piece, str) and BYTE_PIECE.fullmatch(piece) is not None
        return byte

    def scan(self, context: Sequence[int] = ()) -> TurnScan:
        """A new turn's scan, its text read as it follows `context` (its last `CONTEXT_IDS` ids are enough)."""
        return TurnScan(IncrementalText(self, context))


class IncrementalText:
    """The text of token ids fed one at a time, as it reads inside the whole sequence: incremental detokenization with
    a prefix and a read offset (vLLM's and TGI's `detokenize_incrementally`).

    A token's text is decode(window + token) minus decode(window), the window being the ids read last (at first the
    tail of `context`, never starting inside a run of byte pieces), so a SentencePiece piece keeps its leading space;
    text that ends in U+FFFD (a character whose bytes are split across tokens) is held back until the character is
    complete, and so is a run of byte-fallback pieces until a piece of another kind ends it (`BYTE_PIECE`). The window
    then moves past what was read: each token costs a decode of a few ids, however long the turn.
    """

    def __init__(self, reader: TurnReader, context: Sequence[int] = ()) -> None:
        self.reader = reader
        start, floor = max(0, len(context) - CONTEXT_IDS), max(0, len(context) - CONTEXT_IDS - RUN_IDS)
        while start > floor and reader.is_byte_piece(context[start]) and reader.is_byte_piece(context[start - 1]):
            start -= 1
        self._ids = [int(token) for token in context[start:]]
        self._read = len(self._ids)  # ids before it are read (the window); ids after it are held back
        self._window_text: str | None = None  # decode of the window, once computed

    def feed(self, token_id: int) -> str:
        """Add one id; the text it completes ("" while a character is incomplete or it decodes to nothing)."""
        self._ids.append(int(token_id))
        return self._advance(final=False)

    def flush(self) -> str:
        """The text held back, as the whole decode shows it (U+FFFD for an incomplete character): where a turn ends
        for good (eos, budget)."""
        return self._advance(final=True) if self._read < len(self._ids) else ""

    def _advance(self, final: bool) -> str:
        if self._window_text is None:
            self._window_text = self.reader.decode(self._ids[: self._read])
        text = self.reader.decode(self._ids)
        if not final and (
            len(text) <= len(self._window_text)
            or text.endswith(REPLACEMENT)
            or self.reader.is_byte_piece(self._ids[-1])
        ):
            return ""
        new = text[len(self._window_text) :]
        del self._ids[: self._read]  # the ids just read are the next window
        self._read, self._window_text = len(self._ids), None
        return new


class FenceScanner:
    """Fed a turn's text one token's worth at a time; says at which token a ```python block closed, and holds its code.

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


class TurnScan:
    """One turn read token by token: its text (`IncrementalText`) fed to its fence scan. The stopping criterion runs
    it during generation and `cut_turn` after it; a turn the generator stopped early is continued with the same one."""

    def __init__(self, reading: IncrementalText) -> None:
        self.reading = reading
        self.fence = FenceScanner()

    @property
    def text(self) -> str:
        """The turn's text read so far: the rewards' decode of its ids, in context."""
        return self.fence.text

    @property
    def code(self) -> str | None:
        return self.fence.code

    @property
    def in_code(self) -> bool:
        return self.fence.in_code

    def feed(self, token_id: int) -> bool:
        """Read one generated id; True when it completes the closing fence."""
        return self.fence.feed(self.reading.feed(token_id))

    def finish(self) -> None:
        """The turn ended for good (eos, budget): its text takes what was held back (an incomplete character)."""
        held = self.reading.flush()
        if held and self.fence.code is None:
            self.fence.feed(held)


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


def cut_turn(ids: Sequence[int], scan: TurnScan, eos_ids: Sequence[int], budget: int) -> TurnCut:
    """The first place where a turn ends in `ids`: the token completing a closing fence or an eos token (both
    kept), or `budget` tokens. The scan a stopping criterion runs during generation, run again on what came out.

    `scan` holds the turn read so far: a new one from `TurnReader.scan`, or that of a turn the generator stopped early
    (OPEN), which `ids` continue. Its `text` is then the turn's text up to the cut.
    """
    eos = set(eos_ids)
    for index, token in enumerate(ids):
        if index >= budget:
            return _ended(scan, TurnCut(index, BUDGET, in_code=scan.in_code))
        if token in eos:
            return _ended(scan, TurnCut(index + 1, EOS))
        if scan.feed(int(token)):
            return TurnCut(index + 1, FENCE, scan.code)
    if len(ids) >= budget:
        return _ended(scan, TurnCut(len(ids), BUDGET, in_code=scan.in_code))
    return TurnCut(len(ids), OPEN, in_code=scan.in_code)


def _ended(scan: TurnScan, cut: TurnCut) -> TurnCut:
    scan.finish()
    return cut


# A tokenizer's text is read back token by token on these (a program with spaces, indentation, a tab and a multi-byte
# character, prose, an observation): each at its start and after each of its newlines, where turns start.
PROBE_TEXTS = (
    "Let me check with Python.\n```python\nimport os\nprint(os.sep)\n```\n",
    '```python\ndef area(r):\n    return 3.14159 * r ** 2\n\nfor r in (1, 2):\n\tprint(f"{r}: {area(r):.2f}")\n```',
    'print("€ 日本 ü")  # 3 × 4 → 12 , isn\'t it ?\n```output\n  12  \n```\nSo the answer is \\boxed{12}.',
)


def check_turn_reading(tokenizer: Any) -> None:
    """Refuse, at start-up, a tokenizer whose turns cannot be read token by token (`IncrementalText`) as its whole
    decode reads them: the program the tool runs would not be the one the rewards read. One line, naming it."""
    reader = TurnReader(tokenizer)
    for text in PROBE_TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        whole = reader.decode(ids)
        starts = [0] + [k for k in range(1, len(ids)) if reader.decode(ids[:k]).endswith("\n")]
        for start in starts:
            before = reader.decode(ids[:start]) if start else ""
            if not whole.startswith(before):
                _refuse(tokenizer, before, whole[: len(before)])
            scan = reader.scan(ids[:start])
            read = "".join(scan.reading.feed(token) for token in ids[start:]) + scan.reading.flush()
            if read != whole[len(before) :]:
                _refuse(tokenizer, read, whole[len(before) :])


def _refuse(tokenizer: Any, read: str, decoded: str) -> NoReturn:
    at = next((i for i, (a, b) in enumerate(zip(read, decoded, strict=False)) if a != b), min(len(read), len(decoded)))
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    raise ValueError(
        f"Tokenizer {name!r} cannot be used with the Python tool: read token by token (incremental decoding, as the "
        f"tool reads a turn's program), its text gives {read[max(0, at - 12) : at + 12]!r} where its whole decode has "
        f"{decoded[max(0, at - 12) : at + 12]!r}; use a tokenizer whose decode of a sequence starts with the decode "
        "of each prefix (e.g. clean_up_tokenization_spaces false), or run without the tool (python_tool false, "
        "--tool_max_calls 0)."
    )


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
