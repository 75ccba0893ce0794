"""The multi-turn loop: generate a turn for every open answer, cut it at its closing fence, run all of the turn's
programs in one batch, append their observations, repeat until every answer has ended.

It knows nothing of the generation backend: `generate(rows, budgets, owners)` is TRL's trainer
(`drgrpo.algorithm.rollout.generation`), the evaluator's backend or a scripted generator in the tests. `owners[i]` is
(answer index, turn index) of row i, or None for a padding row (the evaluator seeds each turn of each sample from
it; a turn the generator stopped early keeps its index when continued). It returns, per row, the ids it generated
(and their log-probs or None); it may stop a row anywhere at or after its cut (at the fence, eos or budget, or
later: the loop cuts), or before it (the loop then goes on from there).

Every call to `generate` has the same number of rows on every rank: `agree(n)` returns the largest number of open
answers of any rank (a collective, once per turn), and a rank with fewer pads its call with inactive rows (budget 0,
output thrown away). So all ranks make the same generation calls, with the same shapes, turn after turn, which
ZeRO-3's parameter gathering and vLLM's server mode need (a rank that skips a call deadlocks the others).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from drgrpo.algorithm.rollout.protocol import (
    BUDGET,
    EOS,
    FENCE,
    OPEN,
    TurnReader,
    TurnScan,
    cut_turn,
    has_answer,
    observation_ids,
    observation_text,
)

# How an answer ended: eos (it finished), token_budget (max_completion_length ran out, inside a program or not, or an
# observation would not fit), call_budget (a program past tool_max_calls), stalled (a generator returned no token).
ENDINGS = ("eos", "token_budget", "call_budget", "stalled")

Owner = tuple[int, int] | None
Generate = Callable[[list[list[int]], list[int], list[Owner]], list[tuple[list[int], list[float] | None]]]


@dataclass
class Turn:
    """One turn of an answer: the ids the policy generated, and the call its program made (if it made one)."""

    ids: list[int]
    text: str
    code: str | None = None
    observation_ids: list[int] = field(default_factory=list)
    observation: str | None = None
    status: str | None = None  # rewards.code.tool.CALL_STATUSES for a call that ran

    def as_record(self) -> dict:
        """What an evaluation's samples file keeps of the turn."""
        return {"text": self.text, "code": self.code, "observation": self.observation, "status": self.status}


@dataclass
class Answer:
    """One trajectory: the prompt, then turns of generated ids and observation ids, and how it ended."""

    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)  # the completion: generated ids and observation ids, in order
    mask: list[int] = field(default_factory=list)  # 1 for a generated id, 0 for an observation's
    logprobs: list[float] | None = None
    turns: list[Turn] = field(default_factory=list)
    end: str | None = None
    in_code: bool = False  # it ended (budget) inside an open program
    open_turn: TurnScan | None = None  # the scan of a turn the generator stopped early, to be continued

    @property
    def calls(self) -> int:
        return sum(turn.status is not None for turn in self.turns)

    def count(self, status: str) -> int:
        return sum(turn.status == status for turn in self.turns)

    @property
    def errors(self) -> int:
        """Programs that failed: an error or a timeout (a sandbox failure is the sandbox's, not the program's)."""
        return self.count("error") + self.count("timeout")

    @property
    def model_tokens(self) -> int:
        return sum(self.mask)

    @property
    def tool_tokens(self) -> int:
        return len(self.mask) - sum(self.mask)

    def model_ids(self) -> list[int]:
        """The generated ids alone (observations left out): what the rewards read, decoded."""
        return [token for token, kept in zip(self.ids, self.mask, strict=True) if kept]

    def is_void(self, marker: str) -> bool:
        """SimpleTIR's void turn: the answer ended (eos) and its last turn holds neither a program nor the answer."""
        return self.end == "eos" and not has_answer(self.turns[-1].text if self.turns else "", marker)

    def add_turn(
        self, ids: Sequence[int], logprobs: Sequence[float] | None, text: str, code: str | None, extend: bool = False
    ) -> Turn:
        """Append generated ids as a new turn, or (`extend`) as the rest of the last one, which stopped early."""
        if extend:
            turn = self.turns[-1]
            turn.ids += list(ids)
            turn.text += text
            turn.code = code
        else:
            turn = Turn(list(ids), text, code)
            self.turns.append(turn)
        self.ids += list(ids)
        self.mask += [1] * len(ids)
        if logprobs is not None:
            self.logprobs = (self.logprobs or []) + list(logprobs[: len(ids)])
        return turn

    def add_observation(self, turn: Turn, output: str, status: str, ids: Sequence[int]) -> None:
        turn.observation, turn.status, turn.observation_ids = output, status, list(ids)
        self.ids += turn.observation_ids
        self.mask += [0] * len(turn.observation_ids)
        if self.logprobs is not None:
            self.logprobs += [0.0] * len(turn.observation_ids)  # TRL's convention for tool tokens (masked anyway)


@dataclass(frozen=True)
class LoopSettings:
    """What the loop needs besides the generator and the tool."""

    max_calls: int
    max_tokens: int  # max_completion_length: generated and observation ids together
    eos_ids: tuple[int, ...]


class ToolRunner(Protocol):
    """The loop's view of the tool: programs in, (output text, status) out; `rewards.code.tool.PythonTool`."""

    def run_many(self, programs: Sequence[str]) -> list: ...


def _turn_index(answer: Answer) -> int:
    return len(answer.turns) - (answer.open_turn is not None)


def run_tool_loop(
    prompt_ids: Sequence[Sequence[int]],
    generate: Generate,
    tool: ToolRunner,
    tokenizer,
    settings: LoopSettings,
    reader: TurnReader | None = None,
    agree: Callable[[int], int] = lambda count: count,
) -> list[Answer]:
    """Every prompt's answer, with its turns. See the module docstring for `generate` and `agree`."""
    reader = reader or TurnReader(tokenizer)
    answers = [Answer(list(ids)) for ids in prompt_ids]
    while True:
        open_indices = [i for i, answer in enumerate(answers) if answer.end is None]
        active = [answers[i] for i in open_indices]
        width = agree(len(active))
        if width == 0:
            return answers
        if width < len(active):
            raise RuntimeError(f"agree() returned {width} rows for {len(active)} open answers; it must be the max.")
        filler = (active or answers)[0]
        rows = [a.prompt_ids + a.ids for a in active] + [filler.prompt_ids + filler.ids] * (width - len(active))
        budgets = [settings.max_tokens - len(a.ids) for a in active] + [0] * (width - len(active))
        # A turn the generator stopped early keeps its index: its next call continues it.
        owners: list[Owner] = [(i, _turn_index(answers[i])) for i in open_indices] + [None] * (width - len(active))
        outputs = generate(rows, budgets, owners)
        calls = []
        for answer, budget, (ids, logprobs) in zip(active, budgets[: len(active)], outputs[: len(active)], strict=True):
            extend = answer.open_turn is not None
            # A new turn reads on from the ids before it (the prompt's or the last observation's tail).
            scan = answer.open_turn or reader.scan(answer.prompt_ids + answer.ids)
            read = len(scan.text)
            cut = cut_turn(ids, scan, settings.eos_ids, budget)
            kept = list(ids[: cut.length])
            if cut.reason == OPEN and not kept:
                scan.finish()  # stalled: the answer ends here
            # The turn's text, for the observation's leading newline and the records: the text the scan read, in
            # context (the rewards' decode of these ids); it is never tokenized again.
            text = scan.text[read:]
            turn = answer.add_turn(kept, logprobs, text, cut.code, extend=extend)
            answer.open_turn = scan if cut.reason == OPEN and kept else None
            if cut.reason == FENCE:
                if answer.calls >= settings.max_calls:
                    answer.end = "call_budget"
                else:
                    calls.append((answer, turn))
            elif cut.reason == EOS:
                answer.end = "eos"
            elif cut.reason == BUDGET:
                answer.end, answer.in_code = "token_budget", cut.in_code
            elif cut.reason == OPEN and not kept:
                answer.end = "stalled"  # the generator gave nothing and would again: never loop forever
        if not calls:
            continue
        results = tool.run_many([turn.code for _, turn in calls])  # every program of the turn in one batch
        for (answer, turn), result in zip(calls, results, strict=True):
            text = observation_text(result.output, turn.text)
            ids = observation_ids(tokenizer, text)  # plain text: a printed <|im_end|> is not the eos token
            if len(answer.ids) + len(ids) >= settings.max_tokens:
                # No room for the observation and a token after it: the answer ends here, cut by the token budget.
                turn.status = result.status
                turn.observation = result.output
                answer.end = "token_budget"
                continue
            answer.add_observation(turn, result.output, result.status, ids)
