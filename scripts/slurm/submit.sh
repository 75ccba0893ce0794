#!/bin/bash
# Submit scripts/slurm/train.slurm with its log in logs/: the folder is created first, because Slurm opens the
# --output file before the job's script runs (a missing folder fails the job with no output at all).
#
#   scripts/slurm/submit.sh [SBATCH_OPTION ...] RECIPE [ACCELERATE_CONFIG] [-- --key value ...]
#   scripts/slurm/submit.sh --nodes 2 recipes/qwen3_8b_drgrpo.yaml -- --per_device_train_batch_size 8
#
# The sbatch options come first, up to the recipe (the first argument ending in .yaml or .yml); the rest goes to
# train.slurm. LOG_DIR (default logs) moves the log folder; an --output among the options replaces it.
set -euo pipefail
cd "$(dirname "$0")/../.."

options=()
while [[ $# -gt 0 && $1 != *.yaml && $1 != *.yml ]]; do
    options+=("$1")
    shift
done
if [[ $# -eq 0 ]]; then
    echo "usage: scripts/slurm/submit.sh [SBATCH_OPTION ...] RECIPE.yaml [ACCELERATE_CONFIG] [-- --key value ...]" >&2
    exit 2
fi
LOG_DIR=${LOG_DIR:-logs}
mkdir -p "$LOG_DIR"
exec sbatch --output="$LOG_DIR/%x-%j.out" ${options[@]+"${options[@]}"} scripts/slurm/train.slurm "$@"
