"""Check a recipe for a world size before spending GPU hours: batch arithmetic, context, memory, vLLM/ZeRO-3 settings.

python scripts/plan.py recipes/qwen3_8b_drgrpo.yaml                       # the world size its header states
python scripts/plan.py recipes/qwen3_8b_drgrpo.yaml --num_processes 16    # the same recipe on 2 nodes
python scripts/plan.py RECIPE --accelerate_config accelerate_configs/zero3.yaml [--gpu_memory_gib 141]
python scripts/plan.py RECIPE -- --per_device_train_batch_size 8          # recipe overrides after `--`
python scripts/plan.py recipes/qwen3_8b_drgrpo_vllm_server.yaml --vllm_serve_args   # `trl vllm-serve` arguments

Needs no GPU and no weights. Exits 1 when the recipe has an error (each printed with its fix).
"""

import argparse
import gc
import shlex
import sys

from drgrpo.core.errors import RecipeError, run_main
from drgrpo.planning import DEFAULT_GPU_MEMORY_GIB, format_report, plan_recipe
from drgrpo.planning.slurm import vllm_serve_args
from drgrpo.recipe.file import read_recipe


def main() -> int:
    # The plan builds the model on the meta device (every module, LoRA's adapters too) and exits: the cyclic garbage
    # collector would only walk those objects again and again (about 1 s of an 8 s plan), and nothing outlives the run.
    gc.disable()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", help="recipe YAML file")
    parser.add_argument("--num_processes", type=int, help="training processes (default: the recipe header's)")
    parser.add_argument("--accelerate_config", help="the accelerate config the run will be launched with")
    parser.add_argument("--gpu_memory_gib", type=float, default=DEFAULT_GPU_MEMORY_GIB, help="memory of one GPU")
    parser.add_argument(
        "--vllm_serve_args", action="store_true", help="print the `trl vllm-serve` arguments for the recipe and exit"
    )
    argv = sys.argv[1:]
    overrides = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if args.num_processes is not None and args.num_processes < 1:
        raise RecipeError(f"--num_processes must be 1 or more (training processes), got {args.num_processes}.")
    read_recipe(args.recipe)  # a wrong path or bad YAML: one line naming the file
    if args.vllm_serve_args:
        print(shlex.join(vllm_serve_args(args.recipe, overrides)))
        return 0
    report = plan_recipe(
        args.recipe,
        num_processes=args.num_processes,
        accelerate_config=args.accelerate_config,
        gpu_memory_gib=args.gpu_memory_gib,
        overrides=overrides,
    )
    print(format_report(report))
    return 0 if report.ok else 1


if __name__ == "__main__":
    run_main(main)
