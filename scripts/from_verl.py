"""Convert a verl PPO-trainer config into a recipe.

python scripts/from_verl.py VERL_CONFIG.yaml [-o recipes/my_recipe.yaml]   # verl's Hydra YAML
python scripts/from_verl.py run_verl_drgrpo.sh -o recipes/my_recipe.yaml     # the key=value overrides of a launch

A launch script's shell variables are expanded as bash would (`$HOME`, `${NNODES:-1}`, `$((1024 * 4))`, the script's
own assignments), and the ones taken from the environment are listed; a variable that is set nowhere, in the data
paths, the model or a batch key, refuses the conversion in one line naming it (--allow_lossy or not). A recipe left
without a dataset says so, on stderr and in its header.

Prints the recipe (or writes it with -o) and lists on stderr every verl key it could not map, with the reason; the
same list is in the recipe's header. Writes nothing, and exits 2, when verl itself would refuse the config (batch
sizes that do not divide, a mini-batch above the batch, one completion per prompt, an estimator that needs a critic)
or when a key cannot be carried over faithfully (a misspelt or unknown key, a loss or KL with no counterpart here):
one `error:` line each, every problem in one run. --allow_lossy writes the recipe anyway, with those keys listed as
not faithful.

Before writing, the recipe goes through `scripts/plan.py`'s checks at the verl world size: a recipe TRL would refuse
to start (an eval batch of partial groups, vLLM settings that do not fit) is not written, one `error:` line per
problem with its fix (exit 2); what depends on this machine's files or the GPUs (a model the planner cannot size,
memory) is a `warning:` line. verl counts save_freq / test_freq / total_training_steps / warm-up in rollouts, a recipe
in optimizer steps: they are scaled by the optimizer steps per rollout (said in the recipe). Several
data.train_files become a dataset_mixture without weights (verl concatenates them).
"""

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

from drgrpo.core.errors import EXIT_USER_ERROR, run_main
from drgrpo.recipe.verl import Conversion, convert_verl, format_recipe
from drgrpo.recipe.verl_config import read_verl_source


def _sentence(text: str) -> str:
    return text if text.endswith((".", "?")) else text + "."


# Planner findings about this machine or the GPUs (a model folder not here, memory), not about the converted keys.
MACHINE_DEPENDENT = {"model_name_or_path", "memory"}


def plan_problems(text: str, conversion: Conversion) -> tuple[list[str], list[str]]:
    """`scripts/plan.py`'s errors for the converted recipe at verl's world size: (refusals, warnings), one line each
    with its fix. A recipe without data or model is planned with stand-ins for them (its header says it has none)."""
    overrides = ["--dataset_path", "stand-in.jsonl"] if conversion.no_data else []
    no_model = "model_name_or_path" not in conversion.recipe
    overrides += ["--model_name_or_path", "stand-in"] if no_model else []
    # stdout may be the recipe: what torch, TRL and transformers print while loading goes to stderr.
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(sys.stderr):
        from drgrpo.planning import plan_recipe  # torch and TRL: only once the conversion itself has passed

        recipe = Path(folder) / "converted.yaml"
        recipe.write_text(text)
        report = plan_recipe(recipe, num_processes=conversion.world_size, overrides=overrides)
    refusals, warnings = [], []
    for finding in report.errors:
        if no_model and finding.key == "model_name_or_path":
            continue  # the stand-in's; the missing model itself is a warning of main()
        line = f"[{finding.key}] {finding.message} Fix: {finding.fix}"
        (warnings if finding.key in MACHINE_DEPENDENT else refusals).append(line)
    return refusals, warnings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", help="verl Hydra YAML, or a shell script with verl key=value overrides")
    parser.add_argument("-o", "--output", help="recipe file to write (default: print to stdout)")
    parser.add_argument(
        "--allow_lossy",
        action="store_true",
        help="write the recipe even when some keys cannot be carried over faithfully (listed in its header as such)",
    )
    args = parser.parse_args()
    source = read_verl_source(args.config)  # a launch script's $VARIABLES expanded as bash would
    conversion = convert_verl(source.flat, source=args.config)
    conversion.expanded = source.from_environment
    # Every problem at once: verl's own refusals, the keys that would not be faithful, the planner's refusals (when the
    # recipe can be planned: nothing unset, nothing verl refuses), each one `error:` line, then one line of what next.
    errors, why_not = [], []
    for name, keys in sorted(conversion.unset.items()):  # refused even with --allow_lossy: no data, model, batch size
        errors.append(
            f"error: {args.config}: ${name} is not set, and {', '.join(keys)} need{'s' * (len(keys) == 1)} it (bash "
            f"expands it before verl sees the value): set it ({name}=... python scripts/from_verl.py {args.config}) "
            "or write the value out; nothing written."
        )
    errors += [f"error: {args.config}: {_sentence(problem)}" for problem in conversion.invalid]
    if conversion.invalid:
        why_not.append(("verl refuses this config too", "fix it and convert again"))
    if conversion.lossy and not args.allow_lossy:
        errors += [f"error: {args.config}: {key}: {_sentence(why)}" for key, why in sorted(conversion.lossy.items())]
        why_not.append(
            (
                "the recipe would not train what verl trains",
                "fix the verl config, or pass --allow_lossy to write it with these keys listed as not faithful",
            )
        )
    text, plan_warnings = None, []
    if not conversion.unset and not conversion.invalid:
        text = format_recipe(conversion, args.config)
        refusals, plan_warnings = plan_problems(text, conversion)
        errors += [f"error: {args.config}: the recipe would not start: {line}" for line in refusals]
        if refusals:
            why_not.append(
                (
                    f"scripts/plan.py refuses the converted recipe at verl's world size {conversion.world_size}",
                    "change the verl config as each fix says (in verl's keys) and convert again",
                )
            )
    if errors:
        for line in errors:
            print(line, file=sys.stderr)
        if len(why_not) == 1:
            print(f"nothing written: {why_not[0][0]}; {why_not[0][1]}.", file=sys.stderr)
        elif why_not:
            print(
                f"nothing written: {', '.join(reason for reason, _ in why_not)}; fix each as its line says and convert "
                "again.",
                file=sys.stderr,
            )
        return EXIT_USER_ERROR
    for name, value in sorted(source.from_environment.items()):
        print(f"expanded ${name}={value} from the environment, as bash would (in the recipe's header)", file=sys.stderr)
    if source.from_script:
        print(f"expanded the script's own variables: {', '.join(sorted(source.from_script))}", file=sys.stderr)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output} ({len(conversion.recipe)} keys)", file=sys.stderr)
    else:
        print(text, end="")
    for key, why in sorted(conversion.lossy.items()):
        print(f"warning: not faithful (--allow_lossy): {key}: {why}", file=sys.stderr)
    if conversion.no_data:
        print(f"warning: no dataset: {conversion.no_data}.", file=sys.stderr)
    if "model_name_or_path" not in conversion.recipe:
        print(
            "warning: no model: the verl config sets no actor_rollout_ref.model.path; set model_name_or_path in the "
            "recipe before training.",
            file=sys.stderr,
        )
    for line in plan_warnings:
        print(f"warning: scripts/plan.py (check on the training machine): {line}", file=sys.stderr)
    for key, reason in sorted(conversion.unmapped.items()):
        print(f"not carried over: {key}: {reason}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
