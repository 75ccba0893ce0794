"""`make probe-tools`: the task of tool-integrated RL chosen before any training, by a probe (issue 45).

The tool demo's products are solved by the untrained SmolLM2 96-99% of the time at B=4 once its one-shot example shows
the same kind of problem, so training has little to add. Issue 45 asks for a task on which the untrained model with
the tool scores between 5% and 40% (greedy, held-out, call budget B=4) and below 5% without it (B=0): the model
can use the tool, but has to learn when to call it, what program to write and how to read its output back into
`\\boxed{}`. This module generates several task families, a held-out set of each (a fixed seed), and evaluates the
untrained model on them through the project's evaluator (`drgrpo.evaluation.evaluate`, with the tool at B=4 and
without it at B=0); the table it prints decides the task. No family is changed after its numbers.

The families, and why each (every answer is an integer, computed here exactly, checkable exactly):
- `product`: a five-digit times a four-digit number (`What is 48213 * 7391?`). The demo's kind, larger: one line of
  Python, but far beyond what a 135M model multiplies in text. The reference point: without an example of its own
  kind, does the model still write the one line?
- `chain`: four operations in words, applied in order (`Start with 734. Multiply it by 28, then subtract 1519, ...`):
  several operations, two of them multiplications by two-digit numbers; the program must turn the words into
  arithmetic in the stated order (not by operator precedence), which a one-line copy of the question does not do.
- `modpow`: `What is the remainder when 37^1234 is divided by 97?`: modular arithmetic on a power no model expands
  in text. The program is one line (`pow(37, 1234, 97)`), but the question's `^` is XOR in Python: a program that
  copies the notation runs without error and prints a wrong number, what only the grade (RL) can correct.
- `list_sum`: the sum of the numbers of a generated list of twelve that are divisible by a small number: going over
  a list with a condition. A sum, not a count: a count of a dozen numbers takes a few values, and guessing the common
  one would score well over 5% without the tool; a sum is never guessed.
- `range_count`: how many integers from 1 to N (four digits) are divisible by a but not by b: counting with two
  conditions over a range with no list to copy; in text it needs inclusion-exclusion, in Python one comprehension.

The prompt (`probe_recipe`): a system line describing the tool, then a one-shot example of *another* kind of problem
(days between two dates, which no family asks), so the program that solves a family is not copied from the prompt.
Without the tool, the prompt minus the tool's description: the same system line without the tool's sentence, and the
same example worked in words instead of with a program. Held-out accuracy is greedy, a sample cut at the token budget
counts wrong (as `zero_reward_for_truncated` scores it in training), in the precision the arms will train in
(`bf16: auto`: bfloat16 on a CPU that computes it natively, else float32). The window is decided on the evaluator's
accuracy (its grader, the `accuracy` reward's verifier); the strict check (the boxed answer is a bare integer equal to
the gold, `smollm2_demo.strict_correct`) is printed beside it, as the demos do.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import yaml

from drgrpo.experiments.load import LoadSampler
from drgrpo.experiments.smollm2_demo import MODEL, strict_accuracy

SUFFIX = " Put your final answer in \\boxed{}."
WITH_TOOL_BUDGET = 4  # B: programs per answer with the tool
WINDOW = (0.05, 0.40)  # the untrained model's held-out accuracy with the tool must lie in it (both ends included)
TEXT_MAX = 0.05  # and without the tool below it

SYSTEM_LINE = "You are a helpful assistant."
TOOL_DESCRIPTION = (
    "You can run Python: write a program between ```python and ```, it is run, and what it prints comes back between "
    "```output and ```. You may run several programs."
)

# The one-shot example: days between two dates, a kind no family asks (`kind_markers` below checks it).
EXAMPLE_QUESTION = "How many days are there from March 14, 2021 to January 9, 2022?" + SUFFIX
EXAMPLE_ANSWER = (date(2022, 1, 9) - date(2021, 3, 14)).days  # 301
EXAMPLE_WITH_TOOL = (
    "```python\nfrom datetime import date\nprint((date(2022, 1, 9) - date(2021, 3, 14)).days)\n```\n"
    f"```output\n{EXAMPLE_ANSWER}\n```\nThe answer is \\boxed{{{EXAMPLE_ANSWER}}}."
)
EXAMPLE_IN_WORDS = (
    "From March 14 to March 31, 2021 there are 17 days. April to December add 30 + 31 + 30 + 31 + 31 + 30 + 31 + 30 + "
    f"31 = 275 days, and January 9, 2022 adds 9. In all 17 + 275 + 9 = {EXAMPLE_ANSWER}. "
    f"The answer is \\boxed{{{EXAMPLE_ANSWER}}}."
)


@dataclass(frozen=True)
class Problem:
    """One problem: the question (with the answer instruction) and its exact integer answer."""

    question: str
    answer: int

    def row(self) -> dict:
        return {"question": self.question, "answer": str(self.answer)}


# --- The families: each a function of its operands (exact answers, tested by hand) and a sampler of operands. ---


def product_problem(a: int, b: int) -> Problem:
    return Problem(f"What is {a} * {b}?" + SUFFIX, a * b)


def sample_product(rng: random.Random) -> Problem:
    return product_problem(rng.randint(10000, 99999), rng.randint(1000, 9999))


def chain_problem(start: int, steps: Sequence[tuple[str, int]]) -> Problem:
    """`steps`: ("multiply", k), ("add", k) or ("subtract", k), applied in order to `start`."""
    value, words = start, []
    for op, k in steps:
        if op == "multiply":
            value, word = value * k, f"multiply it by {k}"
        elif op == "add":
            value, word = value + k, f"add {k}"
        elif op == "subtract":
            value, word = value - k, f"subtract {k}"
        else:
            raise ValueError(f"unknown operation {op!r}")
        words.append(word)
    said = ", then ".join(words)
    return Problem(f"Start with {start}. {said[0].upper()}{said[1:]}. What number do you get?" + SUFFIX, value)


def sample_chain(rng: random.Random) -> Problem:
    """A start of 200-999, two multiplications by 12-99 and two additions or subtractions of 100-9999, in a random
    order; the value never goes negative (a subtraction takes at most half the value so far, at least 100)."""
    ops = ["multiply", "multiply", rng.choice(("add", "subtract")), rng.choice(("add", "subtract"))]
    rng.shuffle(ops)
    start = value = rng.randint(200, 999)
    steps = []
    for op in ops:
        if op == "multiply":
            k = rng.randint(12, 99)
            value *= k
        elif op == "add":
            k = rng.randint(100, 9999)
            value += k
        else:  # at most half the value so far (at least 100): with two at most, never below 0
            k = rng.randint(100, max(100, min(9999, value // 2)))
            value -= k
        steps.append((op, k))
    return chain_problem(start, steps)


def modpow_problem(base: int, exponent: int, modulus: int) -> Problem:
    return Problem(
        f"What is the remainder when {base}^{exponent} is divided by {modulus}?" + SUFFIX, pow(base, exponent, modulus)
    )


def sample_modpow(rng: random.Random) -> Problem:
    """A base of 3-99, an exponent of 100-9999, a modulus of 11-997 prime to the base (no power is 0 modulo it)."""
    while True:
        base, modulus = rng.randint(3, 99), rng.randint(11, 997)
        if math.gcd(base, modulus) == 1:
            return modpow_problem(base, rng.randint(100, 9999), modulus)


def list_sum_problem(numbers: Sequence[int], divisor: int) -> Problem:
    listed = ", ".join(str(n) for n in numbers)
    question = f"What is the sum of the numbers in the list {listed} that are divisible by {divisor}?"
    return Problem(question + SUFFIX, sum(n for n in numbers if n % divisor == 0))


def sample_list_sum(rng: random.Random) -> Problem:
    """Twelve numbers of 10-999, a divisor of 3-9, at least two numbers divisible by it (so the sum is not 0 or one of
    the listed numbers)."""
    divisor = rng.randint(3, 9)
    while True:
        numbers = [rng.randint(10, 999) for _ in range(12)]
        if sum(n % divisor == 0 for n in numbers) >= 2:
            return list_sum_problem(numbers, divisor)


def range_count_problem(limit: int, a: int, b: int) -> Problem:
    count = sum(1 for n in range(1, limit + 1) if n % a == 0 and n % b != 0)
    question = f"How many integers from 1 to {limit} are divisible by {a} but not by {b}?"
    return Problem(question + SUFFIX, count)


def sample_range_count(rng: random.Random) -> Problem:
    """A limit of 1000-9999 and two divisors of 3-13, the second not dividing the first (else the count is 0)."""
    while True:
        a, b = rng.sample(range(3, 14), 2)
        if a % b:
            return range_count_problem(rng.randint(1000, 9999), a, b)


# --- The second round: families between `product` (68% with the tool, above the window) and `chain` (0%), chosen
# after the first round's table and before any training (docs/tools.md, the probe's two rounds). ---


def chain2_problem(start: int, factor: int, op: str, k: int) -> Problem:
    """`chain` cut to two operations: a multiplication, then an addition or a subtraction."""
    return chain_problem(start, [("multiply", factor), (op, k)])


def sample_chain2(rng: random.Random) -> Problem:
    """A start of 200-999, times 12-99, then plus or minus 100-9999 (a subtraction at most half the product)."""
    start, factor = rng.randint(200, 999), rng.randint(12, 99)
    op = rng.choice(("add", "subtract"))
    k = rng.randint(100, 9999) if op == "add" else rng.randint(100, min(9999, start * factor // 2))
    return chain2_problem(start, factor, op, k)


def product_words_problem(a: int, b: int) -> Problem:
    return Problem(f"What is {a} multiplied by {b}?" + SUFFIX, a * b)


def sample_product_words(rng: random.Random) -> Problem:
    return product_words_problem(rng.randint(10000, 99999), rng.randint(1000, 9999))


def product3_problem(a: int, b: int, c: int) -> Problem:
    return Problem(f"What is {a} * {b} * {c}?" + SUFFIX, a * b * c)


def sample_product3(rng: random.Random) -> Problem:
    return product3_problem(rng.randint(100, 999), rng.randint(12, 99), rng.randint(1000, 9999))


def square_sum_problem(a: int, b: int) -> Problem:
    return Problem(f"What is {a}^2 + {b}^2?" + SUFFIX, a * a + b * b)


def sample_square_sum(rng: random.Random) -> Problem:
    return square_sum_problem(rng.randint(1000, 9999), rng.randint(1000, 9999))


def percent_of_problem(percent: int, hundreds: int) -> Problem:
    """`percent`% of `hundreds` * 100: an exact integer."""
    return Problem(f"What is {percent}% of {hundreds * 100}?" + SUFFIX, percent * hundreds)


def sample_percent_of(rng: random.Random) -> Problem:
    return percent_of_problem(rng.randint(11, 99), rng.randint(100, 999))


@dataclass(frozen=True)
class Family:
    """A task family: its name, its sampler, and what marks a question of its kind (to keep it out of the prompt)."""

    name: str
    sample: Callable[[random.Random], Problem]
    kind_markers: tuple[str, ...]  # regexes; a question of the family matches at least one


FAMILIES = {
    family.name: family
    for family in (
        Family("product", sample_product, (r"\d\s*\*\s*\d", r"\bproduct\b", r"\btimes\b")),
        Family("chain", sample_chain, (r"\bStart with\b", r"\bmultiply\b", r"\bsubtract\b")),
        Family("modpow", sample_modpow, (r"\^", r"\bremainder\b", r"\bmod(ulo)?\b", r"\bpow\(")),
        Family("list_sum", sample_list_sum, (r"\bdivisible\b", r"\bin the list\b", r"%")),
        Family("range_count", sample_range_count, (r"\bHow many integers\b", r"\bdivisible\b", r"%")),
        Family("chain2", sample_chain2, (r"\bStart with\b", r"\bmultiply\b")),
        Family("product_words", sample_product_words, (r"\bmultiplied by\b", r"\bproduct\b", r"\btimes\b")),
        Family("product3", sample_product3, (r"\d\s*\*\s*\d",)),
        Family("square_sum", sample_square_sum, (r"\^\s*2", r"\bsquared?\b")),
        Family("percent_of", sample_percent_of, (r"\d\s*%", r"\bpercent\b")),
    )
}
ROUNDS = {  # the probe's rounds (docs/tools.md): the second chosen after the first's table, before any training
    1: ("product", "chain", "modpow", "list_sum", "range_count"),
    2: ("chain2", "product_words", "product3", "square_sum", "percent_of"),
}


def held_out_set(family: str, count: int, seed: int | str = 0) -> list[Problem]:
    """`count` distinct problems of `family`, drawn from a generator seeded with (seed, family): the same set on every
    machine and run, and the first `count` of a larger set."""
    rng = random.Random(f"{seed}-{family}")
    problems: dict[str, Problem] = {}
    while len(problems) < count:
        problem = FAMILIES[family].sample(rng)
        problems.setdefault(problem.question, problem)
    return list(problems.values())


def matches_kind(text: str, family: str) -> bool:
    """Whether `text` reads as a question of `family`'s kind (one of its markers)."""
    return any(re.search(marker, text, flags=re.IGNORECASE) for marker in FAMILIES[family].kind_markers)


def probe_recipe(with_tool: bool, base: dict | None = None) -> dict:
    """The evaluator's recipe keys of the probe's prompt: with the tool, the system line with the tool's description
    and the example solved by a program; without it, the prompt minus the tool's description (the system line alone,
    the example worked in words). `base`: the tool keys (`tool_output_chars`, `tool_timeout`, ...) of a recipe."""
    recipe = {key: value for key, value in (base or {}).items() if key.startswith(("tool_", "code_"))}
    recipe.pop("tool_max_calls", None)
    recipe.update(
        prompt_template="chat",
        system_prompt=f"{SYSTEM_LINE} {TOOL_DESCRIPTION}" if with_tool else SYSTEM_LINE,
        chat_examples=[{"question": EXAMPLE_QUESTION, "answer": EXAMPLE_WITH_TOOL if with_tool else EXAMPLE_IN_WORDS}],
        bf16="auto",  # the precision the arms train in (issue 45): bfloat16 where the CPU computes it natively
    )
    return recipe


def in_window(
    with_tool: float, without_tool: float, window: tuple[float, float] = WINDOW, text_max: float = TEXT_MAX
) -> bool:
    """Issue 45's rule: held-out accuracy with the tool (B=4) within `window`, both ends included, and without the
    tool (B=0) below `text_max` (accuracies as shares, 0-1)."""
    low, high = window
    return low <= with_tool <= high and without_tool < text_max


def chosen_task(results: Sequence[dict]) -> str | None:
    """The task the arms train on, by a rule written before the second round's numbers: of the families in the
    window, the one whose accuracy with the tool is nearest the window's middle (22.5%: room to rise, and enough
    right answers in a group for the grade to teach from); a tie goes to the family probed first. None when no
    family is in the window (then no arms are trained: issue 45)."""
    middle = sum(WINDOW) / 2
    inside = [r for r in results if r["in_window"]]
    return min(inside, key=lambda r: abs(r[f"B{WITH_TOOL_BUDGET}"]["accuracy"] - middle))["family"] if inside else None


def box_equals_output(rows: Sequence[dict]) -> float | None:
    """Share of the answers that ran a program whose final box holds exactly the last program's output (None when no
    answer ran one): training's `diag/tool/box_is_last_output`, on the evaluator's rows."""
    from drgrpo.algorithm.rollout.tool_metrics import box_is_last_output

    ran = [row for row in rows if row.get("tool_calls")]
    same = sum(
        box_is_last_output(
            row.get("completion") or "",
            [t["observation"] for t in row.get("turns", []) if t.get("observation") is not None],
        )
        for row in ran
    )
    return same / len(ran) if ran else None


@dataclass
class ProbeSettings:
    """What `make probe-tools` evaluates, and where it writes."""

    output_dir: str = "outputs/probe-tools"
    model: str = MODEL
    base_recipe: str = "recipes/smollm2_135m_drgrpo_tools.yaml"  # its tool keys (output chars, timeout, code_*)
    families: tuple[str, ...] = tuple(FAMILIES)
    num_test: int = 100
    seed: int = 0
    max_new_tokens: int = 192  # the model's and the tool's tokens together
    batch_size: int = 50
    overwrite: bool = False  # resume an interrupted probe (every sample is a function of its seed) unless set


def held_out_results(
    model: str, data: Path, recipes: dict[int, Path], out: Path, max_new_tokens: int, batch_size: int, overwrite: bool
) -> dict:
    """Greedy held-out evaluation of `model` on `data` at each call budget of `recipes` (B=4 with the tool's prompt,
    B=0 with the prompt minus the tool) by the project's evaluator, a cut answer wrong; samples under `out`/B<calls>."""
    from drgrpo.evaluation import evaluate
    from drgrpo.evaluation.saved_samples import read_samples

    result: dict = {}
    for calls, recipe in recipes.items():
        start = time.perf_counter()
        folder = out / f"B{calls}"
        # Samples an earlier, interrupted command saved here are read, not generated again: counted, to say so.
        saved = 0 if overwrite else len(read_samples(folder / "samples.jsonl"))
        summary = evaluate(
            model_path=model,
            data_file=str(data),
            recipe=str(recipe),
            temperature=0.0,
            max_new_tokens=max_new_tokens,
            output_dir=str(folder),
            batch_size=batch_size,
            overwrite=overwrite,
            progress=False,
            tool_max_calls=calls,
            truncated_as_wrong=True,
        )
        rows = read_samples(folder / "samples.jsonl")
        result[f"B{calls}"] = {
            "accuracy": summary["pass@1"],
            "strict_accuracy": strict_accuracy(folder / "samples.jsonl", truncated_as_wrong=True),
            "truncated": summary["truncation_rate"],
            "calls_per_answer": summary.get("tool_calls_per_sample"),
            # Of the programs that ran (None when none did: the evaluator's rates are 0 then, not 100% clean).
            "programs_without_error": (
                1 - summary["tool_error_rate"] - summary["tool_timeout_rate"]
                if summary.get("tool_calls_per_sample")
                else None
            ),
            "answers_with_program": sum(bool(r.get("tool_calls")) for r in rows) / max(1, len(rows)),
            "box_equals_output": box_equals_output(rows) if calls else None,
            "seconds": round(time.perf_counter() - start, 1),
            "samples": len(rows),
            "samples_read": min(saved, len(rows)),
        }
    return result


def evaluate_family(settings: ProbeSettings, family: str, recipes: dict[int, Path], data: Path) -> dict:
    """Greedy held-out evaluation of `family` at B=4 (with the tool) and B=0 (without), by the project's evaluator."""
    out = Path(settings.output_dir) / "eval" / family
    result = {"family": family, "problems": settings.num_test}
    result |= held_out_results(
        settings.model, data, recipes, out, settings.max_new_tokens, settings.batch_size, settings.overwrite
    )
    b4, b0 = result[f"B{WITH_TOOL_BUDGET}"], result["B0"]
    result["in_window"] = in_window(b4["accuracy"], b0["accuracy"])
    return result


def run_probe(settings: ProbeSettings, report: Callable[[str], None] = print) -> dict:
    """Every family's held-out set, both evaluations, `probe.json` and `probe.md` under `output_dir`; each family's
    row is reported as it finishes."""
    from drgrpo.experiments.bias.experiment import machine_facts  # torch and TRL: imported when the probe runs
    from drgrpo.recipe.file import read_recipe

    out = Path(settings.output_dir)
    (out / "data").mkdir(parents=True, exist_ok=True)
    base = read_recipe(settings.base_recipe)
    recipes = {}
    for calls in (WITH_TOOL_BUDGET, 0):
        recipes[calls] = out / f"prompt-B{calls}.yaml"
        recipes[calls].write_text(yaml.safe_dump(probe_recipe(calls > 0, base), sort_keys=False, allow_unicode=True))
    facts = machine_facts()
    report(facts)
    results, start = [], time.perf_counter()
    with LoadSampler() as load:
        for family in settings.families:
            data = out / "data" / f"{family}.jsonl"
            data.write_text(
                "".join(json.dumps(p.row()) + "\n" for p in held_out_set(family, settings.num_test, settings.seed))
            )
            results.append(evaluate_family(settings, family, recipes, data))
            report(format_row(results[-1]))
    probe = {
        "model": settings.model,
        "machine": facts,
        "seconds": round(time.perf_counter() - start, 1),
        "load_average_mean": load.mean,
        "num_test": settings.num_test,
        "seed": settings.seed,
        "max_new_tokens": settings.max_new_tokens,
        "window": {"with_tool_B4": list(WINDOW), "without_tool_below": TEXT_MAX},
        "families": results,
        "in_window": [r["family"] for r in results if r["in_window"]],
        "chosen": chosen_task(results),
    }
    (out / "probe.json").write_text(json.dumps(probe, indent=2) + "\n")
    (out / "probe.md").write_text(format_table(probe) + "\n")
    return probe


def percent(value: float | None) -> str:
    """A share (0-1) as a whole percentage; "-" for None (nothing to measure)."""
    return "-" if value is None else f"{100 * value:.0f}%"


def per_answer(value: float | None) -> str:
    """Programs per answer to two decimals; "-" for None (no program could run: B=0)."""
    return "-" if value is None else f"{value:.2f}"


HEADER = (
    "| family | with tool, B=4 (strict) | without tool, B=0 (strict) | in window | programs per answer (B=4) | "
    "programs without error | box = last output | truncated B=4 / B=0 |"
)


def format_row(result: dict) -> str:
    """One family's row of the table: the evaluator's accuracy, the strict check's in parentheses."""
    b4, b0 = result[f"B{WITH_TOOL_BUDGET}"], result["B0"]
    return (
        f"| {result['family']} | {percent(b4['accuracy'])} ({percent(b4['strict_accuracy'])}) | "
        f"{percent(b0['accuracy'])} ({percent(b0['strict_accuracy'])}) | {'yes' if result['in_window'] else 'no'} | "
        f"{per_answer(b4['calls_per_answer'])} | "
        f"{percent(b4['programs_without_error'])} | {percent(b4['box_equals_output'])} | "
        f"{percent(b4['truncated'])} / {percent(b0['truncated'])} |"
    )


def format_table(probe: dict) -> str:
    """The probe's table and the lines around it."""
    chosen = ", ".join(probe["in_window"]) or "none"
    lines = [
        f"{probe['model']}, greedy, {probe['num_test']} held-out problems per family, up to {probe['max_new_tokens']} "
        f"tokens; the evaluator's accuracy (the strict check's in parentheses), a truncated answer wrong",
        HEADER,
        "|---|---|---|---|---|---|---|---|",
        *(format_row(result) for result in probe["families"]),
        f"window: {100 * WINDOW[0]:.0f}%-{100 * WINDOW[1]:.0f}% with the tool (B={WITH_TOOL_BUDGET}) and below "
        f"{100 * TEXT_MAX:.0f}% without (B=0); in the window: {chosen}; the task (nearest the window's middle): "
        f"{probe.get('chosen') or 'none'}",
        f"{probe['machine']}; this command {probe['seconds'] / 60:.1f} min{samples_read(probe)}, load average "
        f"{probe['load_average_mean']} on the mean",
    ]
    return "\n".join(lines)


def samples_read(probe: dict) -> str:
    """' (N of M samples read from an earlier command's, not generated again)' when this command resumed, else ''."""
    budgets = [budget for result in probe["families"] for key, budget in result.items() if key.startswith("B")]
    read, total = sum(b.get("samples_read", 0) for b in budgets), sum(b.get("samples", 0) for b in budgets)
    return f" ({read} of {total} samples read from an earlier command's, not generated again)" if read else ""
