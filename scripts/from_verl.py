"""Convert a verl PPO-trainer config into a recipe.

python scripts/from_verl.py VERL_CONFIG.yaml [-o recipes/my_recipe.yaml]   # verl's Hydra YAML
python scripts/from_verl.py run_verl_drgrpo.sh -o recipes/my_recipe.yaml     # the key=value overrides of a launch

Prints the recipe (or writes it with -o) and lists on stderr every verl key it could not map, with the reason; the
same list is in the recipe's header. Writes nothing, and exits 2, when verl itself would refuse the config (batch
sizes that do not divide, a mini-batch above the batch, one completion per prompt, an estimator that needs a critic)
or when a key cannot be carried over faithfully (a misspelt or unknown key, a loss or KL with no counterpart here):
one `error:` line each. --allow_lossy writes the recipe anyway, with those keys listed as not faithful. Check the
result with `python scripts/plan.py RECIPE`.
"""

import argparse
import sys
from pathlib import Path

from drgrpo.core.errors import EXIT_USER_ERROR, run_main
from drgrpo.recipe.verl import convert_verl, format_recipe
from drgrpo.recipe.verl_config import read_verl_config


def _sentence(text: str) -> str:
    return text if text.endswith((".", "?")) else text + "."


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
    conversion = convert_verl(read_verl_config(args.config), source=args.config)
    if conversion.invalid:
        for problem in conversion.invalid:
            print(f"error: {args.config}: {_sentence(problem)}", file=sys.stderr)
        print("nothing written: verl refuses this config too; fix it and convert again.", file=sys.stderr)
        return EXIT_USER_ERROR
    if conversion.lossy and not args.allow_lossy:
        for key, why in sorted(conversion.lossy.items()):
            print(f"error: {args.config}: {key}: {_sentence(why)}", file=sys.stderr)
        print(
            "nothing written: the recipe would not train what verl trains; fix the verl config, or pass --allow_lossy "
            "to write it with these keys listed as not faithful.",
            file=sys.stderr,
        )
        return EXIT_USER_ERROR
    text = format_recipe(conversion, args.config)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output} ({len(conversion.recipe)} keys)", file=sys.stderr)
    else:
        print(text, end="")
    for key, why in sorted(conversion.lossy.items()):
        print(f"warning: not faithful (--allow_lossy): {key}: {why}", file=sys.stderr)
    for key, reason in sorted(conversion.unmapped.items()):
        print(f"not carried over: {key}: {reason}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
