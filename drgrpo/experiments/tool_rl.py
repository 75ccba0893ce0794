"""`make tool-rl`: does tool-integrated RL teach SmolLM2 what its prompt alone does not (issue 45)?

The task is the probe's (`drgrpo.experiments.tool_probe`, docs/tools.md): the family in the window (5%-40% greedy with
the tool at B=4, below 5% without it) nearest the window's middle, `TASK`. Two arms train on the same prompts of it,
with the same budget, for each seed:

- `tool`: Dr.GRPO with the Python tool (`python_tool: true`, B=4), prompted as the probe's B=4 evaluation (the
  system line with the tool's description, the one-shot example of another kind solved by a program);
- `text`: the same Dr.GRPO without the tool, prompted as the probe's B=0 evaluation (the prompt minus the tool's
  description, the example worked in words).

Everything else is one recipe (`recipes/smollm2_135m_drgrpo_tool_rl.yaml`): steps, group size, lengths, learning
rate, seed, precision (`bf16: auto`). The two arms of a seed train side by side, one process and one torch thread
each (`drgrpo.experiments.side_by_side`, as `make compare` runs them on 2 cores). Held-out greedy accuracy at B=4 and
B=0, before (the untrained model, once) and after (each arm's model), by the probe's evaluation (`held_out_results`):
the same held-out set, prompts, budget and precision as the probe, so the "before" is the probe's number measured again.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from drgrpo.experiments.smollm2_demo import MODEL, cpu_seconds
from drgrpo.experiments.tool_probe import (
    WITH_TOOL_BUDGET,
    Problem,
    held_out_results,
    held_out_set,
    per_answer,
    percent,
    probe_recipe,
)

# The probe's choice (docs/tools.md, its second round): `What is 2282^2 + 5542^2?`, 22% with the tool, 0% without; in
# the window with chain2 (12%), and nearer its middle (`tool_probe.chosen_task`).
TASK = "square_sum"
ARMS = ("tool", "text")
BUDGETS = (WITH_TOOL_BUDGET, 0)  # held-out call budgets: B=4 prompted with the tool, B=0 without it
TRAIN_SEED = "train"  # the training problems' generator seed (the held-out set's is the probe's, 0)
# Measured on 2 cores of an AMD EPYC Zen 4 with native bf16 (docs/tools.md, issue 45): both arms' training side by side
# took 19.4-19.9 min for 15 steps (the slower arm), about 80 s a step; the four evaluations of a seed (B=4 and B=0 of
# each arm, 50 problems each) the rest of its 23 min, about 45 s an evaluation of 50 problems.
SECONDS_PER_STEP = 80
SECONDS_PER_PROBLEM = 0.9  # one greedy evaluation of one held-out problem


@dataclass
class ToolRLSettings:
    """What `make tool-rl` trains and evaluates, and where it writes."""

    output_dir: str = "outputs/tool-rl"
    recipe: str = "recipes/smollm2_135m_drgrpo_tool_rl.yaml"
    task: str = TASK
    seeds: tuple[int, ...] = (0, 1, 2)
    num_train: int = 2000
    num_test: int = 50  # the probe's held-out set
    max_new_tokens: int = 192  # held-out budget, the probe's (model and tool tokens)
    eval_batch_size: int = 50
    overrides: tuple[str, ...] = ()  # recipe overrides for both arms


def recipe_steps(recipe: str, overrides: tuple[str, ...] = ()) -> int:
    """The optimizer steps each arm trains: `--max_steps N` among the overrides, else the recipe's `max_steps`."""
    from drgrpo.recipe.file import command_line_values, read_recipe

    given = command_line_values(list(overrides)).get("max_steps")
    return int(given[0]) if given else int(read_recipe(recipe)["max_steps"])


def expected_minutes(steps: int, num_test: int) -> tuple[float, float]:
    """(minutes a seed, minutes of the evaluation before training) on the machine of `SECONDS_PER_STEP`: `steps` side
    by side, then four evaluations of `num_test` problems; before training, two."""
    evaluation = SECONDS_PER_PROBLEM * num_test
    return (steps * SECONDS_PER_STEP + 4 * evaluation) / 60, 2 * evaluation / 60


def announcement(seeds: int, steps: int, num_test: int, output_dir: str, native_bf16: bool) -> str:
    """The line `make tool-rl` starts with: its own time, from its steps and held-out problems (not the full run's)."""
    per_seed, before = expected_minutes(steps, num_test)
    slower = "" if native_bf16 else "; this CPU has no native bf16, so it trains in float32, about twice as long"
    return (
        f"make tool-rl: {seeds} seed(s) of {steps} step{'s' * (steps != 1)} and {num_test} held-out problems, about "
        f"{per_seed:.0f} min each (evaluation before training: {before:.0f} min more), as measured on 2 cores with "
        f"native bf16 (Zen 4){slower}; results in {output_dir}/results.md"
    )


def training_set(task: str, count: int, held_out: list[Problem]) -> list[Problem]:
    """`count` distinct problems of `task` from the training seed, none of them a held-out question."""
    unseen = {problem.question for problem in held_out}
    problems = [p for p in held_out_set(task, count + len(held_out), seed=TRAIN_SEED) if p.question not in unseen]
    return problems[:count]


def arm_recipe(arm: str, base: dict) -> dict:
    """The recipe of an arm: `base` (every training key both arms share) with the arm's prompt (the probe's, with or
    without the tool's description) and `python_tool` on for the tool arm only."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    recipe = dict(base)
    recipe.update(probe_recipe(arm == "tool", base))
    recipe["python_tool"] = arm == "tool"
    return recipe


@dataclass
class _SeedRuns:
    """What `train_side_by_side` needs of its settings: the recipes it trains and the folder of their logs."""

    recipes: tuple[str, ...]
    output_dir: str


def train_arm(recipe: str, runs: _SeedRuns, overrides: tuple[str, ...]) -> dict:
    """Train one arm's recipe (in a side-by-side process): its log history and training seconds."""
    from drgrpo.recipe.cli import parse_recipe
    from drgrpo.run.training import train

    script_args, training_args, model_args = parse_recipe([recipe, *overrides])
    start = time.perf_counter()
    trainer = train(script_args, training_args, model_args)
    return {"log_history": trainer.state.log_history, "train_seconds": round(time.perf_counter() - start, 1)}


def _write_yaml(path: Path, values: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(values, sort_keys=False, allow_unicode=True))
    return path


def run_tool_rl(settings: ToolRLSettings, report=print) -> dict:
    """Every stage; writes `summary.json`, `results.md` and each seed's `curves.png` under `settings.output_dir`."""
    from drgrpo.experiments.bias.experiment import machine_facts
    from drgrpo.experiments.side_by_side import train_side_by_side
    from drgrpo.observe.plotting import plot_runs
    from drgrpo.recipe.file import read_recipe

    out = Path(settings.output_dir)
    held_out = held_out_set(settings.task, settings.num_test)
    data = {"test": out / "data" / "test.jsonl", "train": out / "data" / "train.jsonl"}
    data["test"].parent.mkdir(parents=True, exist_ok=True)
    for split, problems in (("test", held_out), ("train", training_set(settings.task, settings.num_train, held_out))):
        data[split].write_text("".join(json.dumps(p.row()) + "\n" for p in problems))
    base = read_recipe(settings.recipe)
    prompts = {calls: _write_yaml(out / f"prompt-B{calls}.yaml", probe_recipe(calls > 0, base)) for calls in BUDGETS}
    facts = machine_facts()
    report(facts)

    def evaluate(model: str, folder: Path) -> dict:
        return held_out_results(
            model, data["test"], prompts, folder, settings.max_new_tokens, settings.eval_batch_size, overwrite=False
        )

    summary: dict = {"task": settings.task, "machine": facts, "recipe": settings.recipe, "seeds": {}}
    summary["before"] = evaluate(base.get("model_name_or_path", MODEL), out / "eval" / "before")
    report(f"before training: {format_results(summary['before'])}")
    for seed in settings.seeds:
        folder = out / f"seed{seed}"
        recipes = {}
        for arm in ARMS:
            values = arm_recipe(arm, base) | {
                "dataset_path": str(data["train"]),
                "output_dir": str(folder / arm / "model"),
                "seed": seed,
                "overwrite_output_dir": True,  # each run trains from the untrained model; only this folder is written
            }
            recipes[arm] = str(_write_yaml(folder / f"{arm}.yaml", values))
        start = time.perf_counter()
        trained = train_side_by_side(_SeedRuns(tuple(recipes.values()), str(folder)), settings.overrides, train_arm)
        runs = {arm: trained[recipes[arm]] for arm in ARMS}
        row = {"seconds": round(time.perf_counter() - start, 1)}
        for arm in ARMS:
            after = evaluate(str(folder / arm / "model"), folder / arm / "eval")
            row[arm] = {"after": after, "train_seconds": runs[arm]["train_seconds"]}
            row[arm]["steps"] = max((e.get("step", 0) for e in runs[arm]["log_history"]), default=0)
            report(f"seed {seed}, {arm} arm after training: {format_results(after)}")
        key = f"B{WITH_TOOL_BUDGET}"  # five held-out answers of the tool arm, before and after
        samples = before_after_samples(out / "eval" / "before" / key, folder / "tool" / "eval" / key)
        (folder / "samples.md").write_text(samples + "\n")
        plot_runs(
            {f"{arm} arm": runs[arm]["log_history"] for arm in ARMS},
            folder / "curves.png",
            title=f"SmolLM2-135M, {settings.task}, seed {seed}",
        )
        summary["seeds"][str(seed)] = row
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    summary["cpu_seconds"] = round(cpu_seconds(), 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "results.md").write_text(results_table(summary) + "\n")
    return summary


def before_after_samples(before: Path, after: Path, count: int = 5) -> str:
    """The first `count` held-out problems (not chosen by outcome), each answered before and after training: the
    transcript (the model's text with the tool's outputs) and the verdict, from two evaluations' `samples.jsonl`."""
    from drgrpo.evaluation.saved_samples import read_samples

    pairs = zip(read_samples(before / "samples.jsonl"), read_samples(after / "samples.jsonl"), strict=True)
    lines = []
    for first, second in list(pairs)[:count]:
        assert first["question"] == second["question"], "the two evaluations hold other problems"
        lines.append(f"**{first['question']}** (gold {first['gold']})")
        for stage, row in (("before", first), ("after", second)):
            verdict = "right" if row["correct"] else "wrong"
            text = (row.get("transcript") or row["completion"]).strip()
            lines += [f"{stage} ({verdict}):", "", "````text", text, "````", ""]  # 4: the text holds ``` fences
    return "\n".join(lines)


def format_results(result: dict) -> str:
    """One evaluation's line: accuracy at each budget, and what the programs did at B=4."""
    b4, b0 = result[f"B{WITH_TOOL_BUDGET}"], result["B0"]
    return (
        f"B={WITH_TOOL_BUDGET} {percent(b4['accuracy'])}, B=0 {percent(b0['accuracy'])}; at B={WITH_TOOL_BUDGET}: "
        f"programs per answer {per_answer(b4['calls_per_answer'])}, without error "
        f"{percent(b4['programs_without_error'])}, box = last output {percent(b4['box_equals_output'])}, truncated "
        f"{percent(b4['truncated'])}"
    )


def seed_verdict(before: dict, row: dict) -> dict:
    """Issue 45's goals for one seed, in points: the tool arm's rise at B=4 over the untrained model (goal >= 20),
    and the tool arm at B=4 against the text arm at B=0, both after training (goal >= 15)."""
    key = f"B{WITH_TOOL_BUDGET}"
    tool_after, text_after = row["tool"]["after"][key]["accuracy"], row["text"]["after"]["B0"]["accuracy"]
    rise = 100 * (tool_after - before[key]["accuracy"])
    lead = 100 * (tool_after - text_after)
    return {"tool_rise_points": round(rise, 1), "tool_over_text_points": round(lead, 1), "rise_met": rise >= 20,
            "lead_met": lead >= 15}  # fmt: skip


def results_table(summary: dict) -> str:
    """The comparison table: per seed, each arm before -> after at both budgets, the goals, the training time."""
    before, key = summary["before"], f"B{WITH_TOOL_BUDGET}"
    lines = [
        f"task {summary['task']}; {summary['machine']}",
        "| seed | tool arm B=4 | tool arm B=0 | text arm B=0 | text arm B=4 | tool rise (goal >= 20) | tool - text "
        "(goal >= 15) | training tool / text |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for seed, row in summary["seeds"].items():
        verdict = seed_verdict(before, row)
        tool, text = row["tool"]["after"], row["text"]["after"]
        lines.append(
            f"| {seed} | {percent(before[key]['accuracy'])} -> {percent(tool[key]['accuracy'])} | "
            f"{percent(before['B0']['accuracy'])} -> {percent(tool['B0']['accuracy'])} | "
            f"{percent(before['B0']['accuracy'])} -> {percent(text['B0']['accuracy'])} | "
            f"{percent(before[key]['accuracy'])} -> {percent(text[key]['accuracy'])} | "
            f"{verdict['tool_rise_points']:+.0f} ({'met' if verdict['rise_met'] else 'missed'}) | "
            f"{verdict['tool_over_text_points']:+.0f} ({'met' if verdict['lead_met'] else 'missed'}) | "
            f"{row['tool']['train_seconds'] / 60:.1f} / {row['text']['train_seconds'] / 60:.1f} min "
            f"({row['tool']['steps']} steps) |"
        )
    return "\n".join(lines)
