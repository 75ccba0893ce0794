"""Build a prepared model into the model cache once (`make smollm2`); prints its folder.

    python scripts/prepare_model.py [smollm2-135m-instruct] [--force]

The folder is `$DRGRPO_MODEL_CACHE/<name>` (default ~/.cache/drgrpo/models/<name>); recipes name it by its short name.
"""

import argparse
import logging

from drgrpo.core.errors import run_main


def main() -> None:
    from drgrpo.core.models import PREPARED_MODELS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", nargs="?", default="smollm2-135m-instruct", choices=sorted(PREPARED_MODELS))
    parser.add_argument("--force", action="store_true", help="rebuild even when the cache holds a complete folder")
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    from drgrpo.setup.model_prep import prepare_model

    print(prepare_model(args.name, force=args.force))


if __name__ == "__main__":
    run_main(main)
