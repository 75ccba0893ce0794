"""Train a policy with GRPO or Dr.GRPO from a YAML recipe.

python scripts/train.py recipes/tiny_drgrpo.yaml [--key value ...]
python scripts/train.py recipes/tiny_drgrpo.yaml --show_prompts 3   # print the first 3 prompts, then exit (no GPU)
python scripts/train.py recipes/tiny_drgrpo.yaml --explain         # the checks before the model, then the card
python scripts/train.py --help                                      # the keys by group (--help-all: every key)
accelerate launch --config_file accelerate_configs/zero3.yaml scripts/train.py recipes/qwen3_8b_drgrpo.yaml

A mistake in the recipe or command line prints one error with its fix; --traceback (or DRGRPO_DEBUG=1) shows where.
"""

import logging
import sys

from drgrpo.core.errors import run_main
from drgrpo.recipe.cli import parse_recipe, require_recipe
from drgrpo.recipe.preflight import explain_recipe
from drgrpo.setup.gpu_launch import check_launched_worker, ends_simple_launch_quietly


def main() -> None:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    argv = sys.argv[1:]
    require_recipe(argv)
    if "--explain" in argv:
        print(explain_recipe(argv))
        return
    if "--show_prompts" in argv or any(arg.startswith("--show_prompts=") for arg in argv):
        from drgrpo.data import preview_prompts

        # Inspecting a recipe needs no GPU and no weights, whatever the recipe's device keys say.
        script_args, training_args, model_args = parse_recipe(argv, preflight=True)
        if script_args.show_prompts:
            print(
                preview_prompts(
                    script_args,
                    model_name_or_path=model_args.model_name_or_path,
                    revision=model_args.model_revision,
                    seed=training_args.seed,
                    chat_template_kwargs=training_args.chat_template_kwargs,
                )
            )
            return
    # A multi-GPU launch (accelerate launch, torchrun) on a machine without GPUs: one line from rank 0, then it ends.
    check_launched_worker(argv)
    script_args, training_args, model_args = parse_recipe(argv)
    from drgrpo.run.training import train  # torch, TRL: imported once the recipe has passed its checks

    train(script_args, training_args, model_args)


if __name__ == "__main__":
    with ends_simple_launch_quietly():  # a bare `accelerate launch scripts/train.py ...`: one line, no traceback
        run_main(main)
