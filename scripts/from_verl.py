"""Convert a verl PPO-trainer config into a recipe.

python scripts/from_verl.py VERL_CONFIG.yaml [-o recipes/my_recipe.yaml]   # verl's Hydra YAML
python scripts/from_verl.py run_verl_drgrpo.sh -o recipes/my_recipe.yaml     # the key=value overrides of a launch

Prints the recipe (or writes it with -o) and lists on stderr every verl key it could not map, with the reason; the
same list is in the recipe's header. Check the result with `python scripts/plan.py RECIPE`.
"""

import argparse
import sys
from pathlib import Path

from drgrpo.core.errors import run_main
from drgrpo.recipe.verl import convert_verl, format_recipe, read_verl_config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", help="verl Hydra YAML, or a shell script with verl key=value overrides")
    parser.add_argument("-o", "--output", help="recipe file to write (default: print to stdout)")
    args = parser.parse_args()
    conversion = convert_verl(read_verl_config(args.config))
    text = format_recipe(conversion, args.config)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output} ({len(conversion.recipe)} keys)", file=sys.stderr)
    else:
        print(text, end="")
    for key, reason in sorted(conversion.unmapped.items()):
        print(f"not carried over: {key}: {reason}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
