"""Build the tiny random-weight Qwen3 model and tokenizer used by the demo and the tests.

python scripts/make_tiny_model.py outputs/tiny-model [--seed 0] [--untied]   # --untied: its own lm_head weight
"""

import argparse

from drgrpo.core.errors import run_main
from drgrpo.experiments.tiny import build_tiny_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--untied", action="store_true", help="an lm_head weight of its own, as Qwen3-8B has")
    args = parser.parse_args()
    print(build_tiny_model(args.output_dir, seed=args.seed, tie_word_embeddings=not args.untied))


if __name__ == "__main__":
    run_main(main)
