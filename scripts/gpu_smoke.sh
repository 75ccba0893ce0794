#!/usr/bin/env bash
# GPU smoke test, for the first GPU machine: the tiny model through the training and evaluation code paths in bf16,
# on one GPU, with no network, in a few minutes. Prints steps/s and generated tokens/s.
#
#   bash scripts/gpu_smoke.sh                   # one GPU (CUDA_VISIBLE_DEVICES picks it), bf16
#   SMOKE_DEVICE=cpu bash scripts/gpu_smoke.sh  # the same plumbing on CPU in fp32 (what the test suite runs)
#
# 1. builds the tiny model and the addition task locally (no hub);
# 2. a few Dr.GRPO steps with scripts/train.py recipes/tiny_drgrpo.yaml (bf16, transformers generation);
# 3. the same through `accelerate launch` with DeepSpeed ZeRO-3 on 1 process (accelerate_configs/zero3.yaml);
# 4. `make eval` of the trained model with the transformers backend;
# 5. prints the throughput of each (drgrpo/setup/smoke.py) and the total time.
# Settings: SMOKE_OUT (outputs/gpu_smoke), SMOKE_STEPS (8), PY (.venv/bin/python), SMOKE_MAKE (make).
set -euo pipefail
cd "$(dirname "$0")/.."

DEVICE=${SMOKE_DEVICE:-gpu}
OUT=${SMOKE_OUT:-outputs/gpu_smoke}
STEPS=${SMOKE_STEPS:-8}
PY=${PY:-.venv/bin/python}
MAKE=${SMOKE_MAKE:-make}
ACCELERATE="$(dirname "$PY")/accelerate"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
start=$SECONDS

case "$DEVICE" in
  gpu)
    "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 1)" \
      || { echo "gpu_smoke: no CUDA GPU with bf16 visible to torch (SMOKE_DEVICE=cpu checks the plumbing on CPU)" >&2; exit 1; }
    DEVICE_ARGS=(--use_cpu false --bf16 true)
    ZERO3_CONFIG=accelerate_configs/zero3.yaml
    EVAL_DTYPE=bfloat16
    ;;
  cpu)
    DEVICE_ARGS=(--use_cpu true --bf16 false)
    ZERO3_CONFIG=accelerate_configs/zero3_cpu.yaml
    EVAL_DTYPE=float32
    ;;
  *) echo "gpu_smoke: SMOKE_DEVICE must be gpu or cpu, not '$DEVICE'" >&2; exit 1 ;;
esac

# 64 completions per step: 4 prompts x 16 completions, up to 4 tokens each (the tiny recipe's batch).
BATCH=64
RUN_ARGS=(--dataset_path "$OUT/data/train.jsonl" --model_name_or_path "$OUT/base" --max_steps "$STEPS"
  --logging_steps 1 --save_strategy no --report_to none --per_device_train_batch_size "$BATCH"
  --overwrite_output_dir true "${DEVICE_ARGS[@]}")

echo "== gpu_smoke ($DEVICE): building the tiny model and task in $OUT"
rm -rf "$OUT"
"$PY" scripts/make_tiny_model.py "$OUT/base" > /dev/null
"$PY" -c "from drgrpo.experiments.tasks import write_addition_task; write_addition_task('$OUT/data', num_test=64, seed=0)"

echo "== train: $STEPS Dr.GRPO steps, one process"
"$PY" scripts/train.py recipes/tiny_drgrpo.yaml "${RUN_ARGS[@]}" --output_dir "$OUT/train" > "$OUT/train.log" 2>&1 \
  || { tail -40 "$OUT/train.log"; exit 1; }

echo "== train: DeepSpeed ZeRO-3, 1 process ($ZERO3_CONFIG)"
PORT=$("$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
"$ACCELERATE" launch --config_file "$ZERO3_CONFIG" --num_processes 1 --main_process_port "$PORT" \
  scripts/train.py recipes/tiny_drgrpo.yaml "${RUN_ARGS[@]}" --output_dir "$OUT/zero3" > "$OUT/zero3.log" 2>&1 \
  || { tail -40 "$OUT/zero3.log"; exit 1; }

echo "== make eval (transformers backend, $EVAL_DTYPE)"
eval_start=$(date +%s.%N)
$MAKE -s eval MODEL="$OUT/train" BENCH="$OUT/data/test.jsonl" EVAL_RECIPE=recipes/tiny_drgrpo.yaml MAX_NEW_TOKENS=4 \
  PY="$PY" ARGS="--backend transformers --dtype $EVAL_DTYPE --output_dir $OUT/eval --overwrite true --progress false" \
  > "$OUT/eval.log" 2>&1 || { tail -40 "$OUT/eval.log"; exit 1; }
eval_seconds=$("$PY" -c "import time; print(time.time() - $eval_start)")

echo "== throughput ($DEVICE)"
"$PY" -m drgrpo.setup.smoke --train "train=$OUT/train" --train "zero3=$OUT/zero3" --completions_per_step "$BATCH" \
  --eval_samples "$OUT/eval/samples.jsonl" --eval_seconds "$eval_seconds"
total=$((SECONDS - start))
echo "gpu_smoke ($DEVICE): OK in ${total} s$( ((total > 300)) && echo ' (over the 5-minute target)')"
