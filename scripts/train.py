"""Train a policy with GRPO or Dr.GRPO from a YAML recipe.

python scripts/train.py recipes/tiny_drgrpo.yaml [--key value ...]
accelerate launch --config_file accelerate_configs/zero3.yaml scripts/train.py recipes/qwen3_8b_drgrpo.yaml
"""

import logging
import sys

from drgrpo.cli import parse_recipe
from drgrpo.training import train


def main() -> None:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    script_args, training_args, model_args = parse_recipe(sys.argv[1:])
    train(script_args, training_args, model_args)


if __name__ == "__main__":
    main()
