"""`make probe-code`: the task of `make code-rl` chosen before any training, by a probe (issue 55).

The untrained SmolLM2-135M-Instruct, greedy, on a held-out set of each task family of `drgrpo.experiments.
code_families` (50 problems, each with its own tests), graded by the project's evaluator with the `code` reward in its
sandbox: a sample is right when its program passes every test, and an answer cut at the token budget counts wrong (as
`zero_reward_for_truncated` scores it in training). A family is a candidate when its pass rate lies in issue 55's
window, 5%-40%: the model writes some right programs (a group of 8 samples has something to learn from) and most
wrong. No family is changed after its numbers.

The prompt is the training recipe's (`recipes/smollm2_135m_drgrpo_code.yaml`): the model's chat template with its own
system line, one worked example of another kind of program (a word printed in capitals, which no family asks), then
the problem. Precision as training's (`bf16: auto`: bfloat16 on a CPU that computes it natively, else float32).

Besides the pass rate, each family's table row says what the untrained model's programs do (the classes of
`drgrpo.observe.code_metrics`, the same as training's `diag/code/` curves): a code block or not, whether it compiles,
passes some tests, all of them (cut or not), and the first failure's kind; a runtime error's exception is read by
running the program again on its tests (`exception_names`).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from drgrpo.experiments.code_families import ROUND_1, ROUND_2, held_out_set
from drgrpo.experiments.load import LoadSampler
from drgrpo.experiments.smollm2_demo import MODEL
from drgrpo.observe.code_metrics import answer_counts, answer_outcome, shares
from drgrpo.observe.metric_names import CODE_PREFIX

WINDOW = (0.05, 0.40)  # the untrained model's held-out pass rate must lie in it (both ends included)
RECIPE = "recipes/smollm2_135m_drgrpo_code.yaml"  # its prompt and code keys are the probe's
PROMPT_KEYS = ("prompt_template", "system_prompt", "chat_template_kwargs", "chat_examples", "extra_eos_tokens")
# The probe's rounds (docs/code-rl.md): the second chosen after the first's table (no family in the window), before
# any training.
ROUNDS = {1: ROUND_1, 2: ROUND_2}


def probe_recipe(base: dict) -> dict:
    """The evaluator's recipe keys of the probe: the training recipe's prompt and `code_*` keys, and `bf16: auto` (the
    precision the runs train in: bfloat16 where the CPU computes it natively, else float32)."""
    recipe = {key: base[key] for key in PROMPT_KEYS if base.get(key) is not None}
    recipe |= {key: value for key, value in base.items() if key.startswith("code_")}
    recipe["bf16"] = "auto"
    return recipe


def in_window(pass_rate: float, window: tuple[float, float] = WINDOW) -> bool:
    """Issue 55's rule: the untrained model's greedy held-out pass rate (a share, 0-1) within `window`, both ends
    included."""
    low, high = window
    return low <= pass_rate <= high


def chosen_task(results: Sequence[dict]) -> str | None:
    """The task `make code-rl` trains on, by a rule committed before the probe's first number: of the families in the
    window, the one whose pass rate is nearest the window's middle (22.5%: room to rise, and enough right programs
    in a group of 8 samples for the grade to teach from); a tie goes to the family probed first. None when no
    family is in the window (then a second round, and if none again no arms are trained: issue 55)."""
    middle = sum(WINDOW) / 2
    inside = [r for r in results if r["in_window"]]
    return min(inside, key=lambda r: abs(r["pass@1"] - middle))["family"] if inside else None


NO_BLOCK_FOR_FORMAT = 0.10  # `code_format` joins the rewards when at least this share of answers has no block


def needs_code_format(result: dict) -> bool:
    """Whether training adds the `code_format` reward (issue 55: "if the probe shows answers without a code block"),
    by a rule committed before the probe's first number: at least `NO_BLOCK_FOR_FORMAT` of the chosen family's
    greedy answers hold no block to run (a cut answer whose block never closed among them)."""
    return result["no_block"] >= NO_BLOCK_FOR_FORMAT


def exception_name(stderr: str) -> str:
    """The exception a Python traceback ends with (`NameError` of `NameError: name 'x' is not defined`), or `exit`
    for a program that failed without one (a non-zero `sys.exit`, a signal)."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    match = re.match(r"([A-Za-z_][\w.]*)(:|$)", lines[-1].strip()) if lines else None
    return match.group(1).rsplit(".", 1)[-1] if match else "exit"


def _reward(recipe: dict):
    """The `code` reward with the recipe's limits, scoring the share of tests passed (`fraction`: the outcome classes
    read how many passed and the first failure)."""
    from drgrpo.evaluation.code import code_settings
    from rewards.code import code_reward

    return code_reward(replace(code_settings(recipe), code_scoring="fraction"))


def exception_names(reward, programs: Sequence[str], tests: Sequence[str]) -> Counter:
    """The exception each program (each a runtime error's) raises first on its tests, run again in the sandbox."""
    from rewards.code.testcases import call_harness, parse_tests

    names: Counter = Counter()
    for program, value in zip(programs, tests, strict=True):
        cases = parse_tests(value)
        jobs = [call_harness(program, case)[:2] if case.fn_name else (program, case.input) for case in cases]
        failed = [r for r in reward.sandbox.run_many(jobs) if r.status in ("crash", "output_limit")]
        names[exception_name(failed[0].stderr.decode("utf-8", "replace")) if failed else "none on rerun"] += 1
    return names


def program_outcomes(rows: Sequence[dict], recipe: dict) -> dict:
    """What the programs of an evaluation's samples did: the `diag/code/` shares (without the `diag/code/` prefix),
    the exceptions of the runtime errors, and the mean tokens of an answer."""
    from rewards.code import extract_program
    from rewards.report import RewardReport

    reward = _reward(recipe)
    texts = [row["completion"] for row in rows]
    tests = [row["gold"] for row in rows]
    report = RewardReport(len(rows))
    scores = reward(texts, report=report, verification_info=tests)
    programs = [extract_program(text) for text in texts]
    counts = answer_counts(programs, scores, report.details)
    # NaN (nothing to measure: no program, so no length) is written as null, which JSON reads back equal.
    result = {name.removeprefix(CODE_PREFIX): None if v != v else v for name, v in shares(counts).items()}
    crashed = [
        (program, value)
        for program, value, detail in zip(programs, tests, report.details, strict=True)
        if answer_outcome(program, 0.0, detail) == "runtime_error"  # a program that does not compile is a syntax error
    ]
    errors = exception_names(reward, [p for p, _ in crashed], [t for _, t in crashed]) if crashed else Counter()
    result["exceptions"] = dict(errors.most_common())
    result["mean_tokens"] = sum(row["num_tokens"] for row in rows) / max(1, len(rows))
    return result


@dataclass
class ProbeSettings:
    """What `make probe-code` evaluates, and where it writes."""

    output_dir: str = "outputs/probe-code"
    model: str = MODEL
    recipe: str = RECIPE
    families: tuple[str, ...] = ROUNDS[1]
    num_test: int = 50
    seed: int = 0
    max_new_tokens: int = 128  # a program of these tasks is 10-40 tokens; the rest is room for the model's prose
    batch_size: int = 50
    overwrite: bool = False  # resume an interrupted probe (greedy samples are a function of the problem) unless set
    name: str = "probe"  # its table's files: NAME.json and NAME.md (a later round's beside the first's)
    sampled: int = 0  # also this many samples per problem at the recipe's temperature (0: greedy only)
    sampled_batch_size: int = 200


def held_out_results(
    model: str, data: Path, prompt: Path, out: Path, max_new_tokens: int, batch_size: int, overwrite: bool, **sampling
) -> dict:
    """Held-out evaluation of `model` on `data` with the probe's prompt by the project's evaluator (greedy unless
    `sampling` says `n` and `temperature`), a cut answer wrong; samples in `out`; the summary's pass rates and what
    the programs did (of the first sample of each problem)."""
    from drgrpo.evaluation import evaluate
    from drgrpo.evaluation.saved_samples import read_samples
    from drgrpo.recipe.file import read_recipe

    start = time.perf_counter()
    summary = evaluate(
        model_path=model,
        data_file=str(data),
        question_column="question",
        answer_column="verification_info",
        answer_format="code_tests",
        recipe=str(prompt),
        max_new_tokens=max_new_tokens,
        output_dir=str(out),
        batch_size=batch_size,
        overwrite=overwrite,
        progress=False,
        truncated_as_wrong=True,
        **sampling,
    )
    rows = read_samples(out / "samples.jsonl")
    n = sampling.get("n", 1)
    result = {key: summary[key] for key in summary if key.startswith("pass@")}
    result["truncated"] = summary["truncation_rate"]
    result["samples"] = len(rows)
    result |= program_outcomes(rows, read_recipe(prompt)) if n == 1 else {}
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def evaluate_family(settings: ProbeSettings, family: str, prompt: Path, data: Path) -> dict:
    """Greedy held-out evaluation of `family` by the project's evaluator, and what its programs did; with
    `settings.sampled`, also that many samples per problem at the training temperature (`sampled_signal`)."""
    out = Path(settings.output_dir) / "eval" / family
    result = {"family": family, "problems": settings.num_test}
    result |= held_out_results(
        settings.model, data, prompt, out, settings.max_new_tokens, settings.batch_size, settings.overwrite
    )
    result["in_window"] = in_window(result["pass@1"])
    if settings.sampled:
        from drgrpo.evaluation.saved_samples import read_samples
        from drgrpo.recipe.file import read_recipe

        folder = Path(settings.output_dir) / "eval-sampled" / family
        n, temperature = settings.sampled, float(read_recipe(settings.recipe).get("temperature", 1.0))
        sampled = held_out_results(
            settings.model, data, prompt, folder, settings.max_new_tokens, settings.sampled_batch_size,
            settings.overwrite, n=n, temperature=temperature,
        )  # fmt: skip
        rows = read_samples(folder / "samples.jsonl")
        result["sampled"] = sampled | {"n": n, "temperature": temperature} | sampled_signal(rows, read_recipe(prompt))
    return result


def sampled_signal(rows: Sequence[dict], recipe: dict) -> dict:
    """What a Dr.GRPO step would see in these samples, the problem's samples as its group: the `code` reward of each
    (the share of tests passed; a truncated answer 0, as `zero_reward_for_truncated` scores it), its mean, the groups
    whose rewards are not all equal (a step learns from these alone) and the groups with an answer passing every
    test. Descriptive: the window is decided on greedy pass@1."""
    from rewards.report import RewardReport

    reward = _reward(recipe)
    scores = reward(
        [r["completion"] for r in rows], report=RewardReport(len(rows)), verification_info=[r["gold"] for r in rows]
    )
    groups: dict[int, list[float]] = {}
    for row, score in zip(rows, scores, strict=True):
        groups.setdefault(row["problem_index"], []).append(0.0 if row["truncated"] else score or 0.0)
    values = [v for group in groups.values() for v in group]
    return {
        "mean_reward": sum(values) / max(1, len(values)),
        "groups_with_signal": sum(len(set(group)) > 1 for group in groups.values()) / max(1, len(groups)),
        "groups_with_a_full_pass": sum(1.0 in group for group in groups.values()) / max(1, len(groups)),
    }


def write_problems(path: Path, problems: Sequence) -> Path:
    """The problems as a jsonl data file (`CodeProblem.row`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(p.row()) + "\n" for p in problems))
    return path


def run_probe(settings: ProbeSettings, report: Callable[[str], None] = print) -> dict:
    """Every family's held-out set evaluated, `NAME.json` and `NAME.md` under `output_dir` (`settings.name`); each
    family's row is reported as it finishes."""
    from drgrpo.experiments.bias.experiment import machine_facts  # torch and TRL: imported when the probe runs
    from drgrpo.recipe.file import read_recipe

    out = Path(settings.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    prompt = out / "prompt.yaml"
    prompt.write_text(yaml.safe_dump(probe_recipe(read_recipe(settings.recipe)), sort_keys=False, allow_unicode=True))
    facts = machine_facts()
    report(facts)
    results, start = [], time.perf_counter()
    with LoadSampler() as load:
        for family in settings.families:
            data = write_problems(
                out / "data" / f"{family}.jsonl", held_out_set(family, settings.num_test, settings.seed)
            )
            results.append(evaluate_family(settings, family, prompt, data))
            report(format_row(results[-1]))
    probe = {
        "model": settings.model,
        "machine": facts,
        "seconds": round(time.perf_counter() - start, 1),
        "load_average_mean": load.mean,
        "num_test": settings.num_test,
        "seed": settings.seed,
        "max_new_tokens": settings.max_new_tokens,
        "window": list(WINDOW),
        "families": results,
        "in_window": [r["family"] for r in results if r["in_window"]],
        "chosen": chosen_task(results),
    }
    chosen = next((r for r in results if r["family"] == probe["chosen"]), None)
    probe["code_format"] = needs_code_format(chosen) if chosen else None
    (out / f"{settings.name}.json").write_text(json.dumps(probe, indent=2) + "\n")
    (out / f"{settings.name}.md").write_text(format_table(probe) + "\n")
    return probe


def percent(value: float | None, decimals: int = 0) -> str:
    """A share (0-1) as a percentage, whole by default; "-" for None or NaN (nothing to measure)."""
    return "-" if value is None or value != value else f"{100 * value:.{decimals}f}%"


HEADER = (
    "| family | pass@1 | in window | code block | compiles | passes some tests | passes all (cut or not) | truncated | "
    "first failure: no block / syntax / runtime / timeout / wrong output | program lines | runtime errors |"
)


def format_row(result: dict) -> str:
    """One family's row of the table."""
    kinds = " / ".join(percent(result[k]) for k in ("no_block", "syntax_error", "runtime_error", "timeout"))
    lines = result["program_lines"]
    errors = ", ".join(f"{name} {count}" for name, count in result["exceptions"].items()) or "-"
    return (
        f"| {result['family']} | {percent(result['pass@1'])} | {'yes' if result['in_window'] else 'no'} | "
        f"{percent(result['block'])} | {percent(result['runnable'])} | {percent(result['some_tests'])} | "
        f"{percent(result['all_tests'])} | {percent(result['truncated'])} | {kinds} / "
        f"{percent(result['wrong_output'])} | {'-' if lines is None else f'{lines:.1f}'} | {errors} |"
    )


def sampled_lines(results: Sequence[dict]) -> list[str]:
    """The sampled evaluation's table, for the families that have one (none: no lines)."""
    rows = [r for r in results if r.get("sampled")]
    if not rows:
        return []
    n, temperature = rows[0]["sampled"]["n"], rows[0]["sampled"]["temperature"]
    lines = [
        "",
        f"{n} samples per problem at temperature {temperature:g}, each problem's {n} a group (descriptive: the window "
        "reads greedy pass@1)",
        f"| family | pass@1 sampled | pass@{n} | truncated | mean code reward | groups with signal | groups with a "
        "full pass |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sampled = r["sampled"]
        lines.append(
            f"| {r['family']} | {percent(sampled['pass@1'], 1)} | {percent(sampled[f'pass@{n}'])} | "
            f"{percent(sampled['truncated'])} | {sampled['mean_reward']:.3f} | "
            f"{percent(sampled['groups_with_signal'])} | {percent(sampled['groups_with_a_full_pass'])} |"
        )
    return lines


def format_table(probe: dict) -> str:
    """The probe's table and the lines around it."""
    inside = ", ".join(probe["in_window"]) or "none"
    lines = [
        f"{probe['model']}, greedy, {probe['num_test']} held-out problems per family, up to {probe['max_new_tokens']} "
        "tokens; pass@1: every test passed, a truncated answer wrong",
        HEADER,
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(format_row(result) for result in probe["families"]),
        *sampled_lines(probe["families"]),
        f"window: {100 * WINDOW[0]:.0f}%-{100 * WINDOW[1]:.0f}%; in the window: {inside}; the task (nearest the "
        f"window's middle): {probe.get('chosen') or 'none'}"
        + (f"; code_format added: {'yes' if probe['code_format'] else 'no'}" if probe.get("chosen") else ""),
        f"{probe['machine']}; this command {probe['seconds'] / 60:.1f} min (samples saved by an earlier one are read, "
        f"not generated again), load average {probe['load_average_mean']} on the mean",
    ]
    return "\n".join(lines)
