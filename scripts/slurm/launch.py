"""One node's part of a Slurm job (called by scripts/slurm/train.slurm through srun; logic in drgrpo/planning/slurm.py).

launch.py plan RECIPE [--accelerate_config C] [-- overrides]    check the recipe at this job's world size
launch.py nodes --training | --server                           the job's training nodes / its vLLM server node
launch.py train RECIPE [--accelerate_config C] [-- overrides]   exec `accelerate launch` for this node
launch.py vllm RECIPE [-- overrides]                            exec `trl vllm-serve` (on the server node)

With DRY_RUN=1, `train` and `vllm` print the command instead of running it.
"""

import argparse
import os
import shlex
import sys
from pathlib import Path

from drgrpo.core.errors import run_main
from drgrpo.planning import format_report, plan_recipe
from drgrpo.planning.slurm import slurm_job, train_command, vllm_server_command


def _tool(name: str) -> str:
    """The virtual environment's copy of a console script (next to this Python), else the one on PATH."""
    local = Path(sys.executable).with_name(name)
    return str(local) if local.exists() else name


def _run(command: list[str]) -> int:
    if os.environ.get("DRY_RUN", "0") not in ("", "0"):
        print(shlex.join(command), flush=True)
        return 0
    os.execvp(command[0], command)
    return 1  # not reached: exec replaces this process


def main() -> int:
    argv = sys.argv[1:]
    overrides = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["plan", "nodes", "train", "vllm"])
    parser.add_argument("recipe", nargs="?")
    parser.add_argument("--accelerate_config", default="accelerate_configs/zero3_multinode.yaml")
    parser.add_argument("--training", action="store_true", help="nodes: print the training nodes, comma-separated")
    parser.add_argument("--server", action="store_true", help="nodes: print the vLLM server node")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    job = slurm_job(env)
    if args.action == "nodes":
        print(job.server_node if args.server else ",".join(job.training_nodes))
        return 0
    if args.recipe is None:
        parser.error(f"{args.action} needs a RECIPE")
    if args.action == "plan":
        report = plan_recipe(
            args.recipe,
            num_processes=job.world_size,
            num_nodes=len(job.training_nodes),
            accelerate_config=args.accelerate_config,
            overrides=overrides,
        )
        print(format_report(report), flush=True)
        return 0 if report.ok else 1
    if args.action == "train":
        command = train_command(env, args.recipe, args.accelerate_config, overrides, accelerate=_tool("accelerate"))
        return _run(command)
    return _run(vllm_server_command(env, args.recipe, overrides, trl=_tool("trl")))


if __name__ == "__main__":
    run_main(main)
