"""Train a policy with GRPO or Dr.GRPO from a YAML recipe.

python scripts/train.py recipes/tiny_drgrpo.yaml [--key value ...]
python scripts/train.py recipes/tiny_drgrpo.yaml --show_prompts 3   # print the first 3 prompts, then exit
python scripts/train.py recipes/tiny_drgrpo.yaml --explain   # print the GRPO family card, then exit (no model load)
accelerate launch --config_file accelerate_configs/zero3.yaml scripts/train.py recipes/qwen3_8b_drgrpo.yaml
"""

import logging
import sys

from drgrpo.cli import explain_recipe, parse_recipe
from drgrpo.data import preview_prompts
from drgrpo.training import train


def main() -> None:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    if "--explain" in sys.argv[1:]:
        print(explain_recipe(sys.argv[1:]))
        return
    script_args, training_args, model_args = parse_recipe(sys.argv[1:])
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
    train(script_args, training_args, model_args)


if __name__ == "__main__":
    main()
