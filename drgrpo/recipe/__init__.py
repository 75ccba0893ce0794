"""A recipe: a YAML file plus `--key value` overrides, parsed into (script, trainer, model) arguments, with every
mistake as one line that names the key and the fix; pre-flight parsing for any world size; the verl converter.

May import: everything below it (`drgrpo.core`, `rewards`, `drgrpo.data`, `drgrpo.observe`, `drgrpo.algorithm`,
`drgrpo.run`). `drgrpo.planning`, `drgrpo.experiments` and `scripts/` parse recipes through it.

Modules, each importing only the ones listed before it:
- `file`: the cheap checks (the file exists, is YAML, is a mapping) and the header comment, before torch loads;
- `batch_rules`: whole-number batch settings that satisfy every batch rule at a world size (pure);
- `config_errors`: TRL's and transformers' config errors said again in the recipe's keys, with a fix;
- `parser`: `RecipeParser`, TRL's `TrlParser` with grouped `--help` and one-line errors;
- `cli`: `recipe_values`, the one reader of a recipe and its command line, and `parse_recipe`, the whole parse;
- `preflight`: a recipe parsed for any target world size (`--explain`, `--show_prompts`, the planner);
- `launch_script`: a verl launch script's words as bash passes them (variables and `$((...))` expanded);
- `verl_config`: a verl config file as verl reads it, verl's keys and defaults, and verl's own checks;
- `verl_recipe`: the converted recipe, and the keys verl counts differently (data files, save/test frequency,
  eval batch, Dr.GRPO opt-ins);
- `verl`: a verl PPO-trainer config converted into a recipe.
"""
