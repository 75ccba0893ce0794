#!/usr/bin/env bash
# GPU smoke test for the first GPU machine: the tiny models (built here, no hub, no network) through every GPU code
# path a real recipe uses, each step reported PASS, FAIL or SKIP with its reason, then a summary; under 10 minutes.
#
#   bash scripts/gpu_smoke.sh                   # GPU mode: bf16; one GPU per one-process step (pinned)
#   SMOKE_DEVICE=cpu bash scripts/gpu_smoke.sh  # the same steps on CPU in float32; GPU-only steps are skipped
#   PY=python3 bash scripts/gpu_smoke.sh        # any Python with the project installed (bare name or path)
#
# Steps (drgrpo/setup/gpu_probe.py, drgrpo/setup/smoke.py check each):
#  pin       one GPU for the one-process steps (CUDA_VISIBLE_DEVICES: TRL refuses nn.DataParallel), two for ZeRO-3 x 2
#  probe     torch's CUDA build, the driver it needs (CUDA 13: R580+), a visible GPU with bf16
#  build     the tiny Qwen3 model with tied embeddings, one with its own lm_head (as Qwen3-8B), the addition task
#  train     Dr.GRPO steps in one process (tied model): loss finite and changing, bf16 engaged (from the log)
#  zero3     the same through `accelerate launch` with DeepSpeed ZeRO-3 (untied model): ZeRO stage 3 engaged
#  reload    the ZeRO-3-saved model reloads in one process, whole and trained, and generates
#  zero3_x2  ZeRO-3 with 2 processes (NCCL) where 2 GPUs exist
#  vllm      colocated vLLM generation with sleep mode, where vLLM is installed
#  eval      scripts/evaluate.py with the transformers backend
# It never installs anything (it calls no make target). Settings: SMOKE_OUT (outputs/gpu_smoke), SMOKE_STEPS (4),
# PY (.venv/bin/python), SMOKE_DEVICE (gpu).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

DEVICE=${SMOKE_DEVICE:-gpu}
OUT=${SMOKE_OUT:-outputs/gpu_smoke}
STEPS=${SMOKE_STEPS:-4}
LIMIT_S=600
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
start=$SECONDS
NAMES=() RESULTS=() REASONS=()

report() {  # NAME PASS|FAIL|SKIP REASON
    NAMES+=("$1") RESULTS+=("$2") REASONS+=("$3")
    printf '[%s] %-9s %s\n' "$2" "$1" "$3"
}
summary() {
    local passed=0 failed=0 skipped=0 i
    local total=$((SECONDS - start))
    if [[ $DEVICE == gpu && $total -gt $LIMIT_S ]]; then
        report time FAIL "${total} s, over the ${LIMIT_S}-second target"
    fi
    echo "== gpu_smoke summary ($DEVICE, ${total} s)"
    for i in "${!NAMES[@]}"; do
        printf '  %-4s %-9s %s\n' "${RESULTS[$i]}" "${NAMES[$i]}" "${REASONS[$i]}"
        case ${RESULTS[$i]} in PASS) passed=$((passed + 1)) ;; FAIL) failed=$((failed + 1)) ;; *) skipped=$((skipped + 1)) ;; esac
    done
    echo "gpu_smoke ($DEVICE): $passed passed, $failed failed, $skipped skipped in ${total} s"
    [[ $failed -eq 0 ]]
    exit $?
}
skip_rest() {  # REASON NAME...: every remaining step skipped with the reason
    local reason=$1 name
    shift
    for name in "$@"; do report "$name" SKIP "$reason"; done
}
last_line() { grep -v '^[[:space:]]*$' "$1" | tail -n 1 | cut -c1-300; }
# run_step NAME LOG CHECK... -- COMMAND...: the command's output to LOG; FAIL with its last line if it fails, else the
# check (its one line is the reason).
run_step() {
    local name=$1 log=$2
    shift 2
    local check=()
    while [[ $1 != -- ]]; do check+=("$1"); shift; done
    shift
    "$@" >"$log" 2>&1
    local status=$?
    if [[ $status -ne 0 ]]; then
        report "$name" FAIL "exit status $status: $(last_line "$log") (log: $log)"
        return 1
    fi
    local line
    line=$("${check[@]}" 2>&1)
    status=$?
    report "$name" "$([[ $status -eq 0 ]] && echo PASS || echo FAIL)" "$(tail -n 1 <<<"$line")"
    return $status
}

# --- python: a bare name (python3) or a path, made absolute so that every step uses the same interpreter
PY=${PY:-.venv/bin/python}
if ! PY_PATH=$(command -v "$PY"); then
    report python FAIL "PY=$PY is not an executable Python (set PY to a path or a name on PATH)"
    skip_rest "needs a Python" pin probe build train zero3 reload zero3_x2 vllm eval
    summary
fi
[[ $PY_PATH == /* ]] || PY_PATH="$PWD/$PY_PATH"
PY=$PY_PATH
ACCELERATE=("$PY" -m accelerate.commands.launch)  # accelerate of this Python, also for a bare PY
if ! version=$("$PY" -c "import sys, drgrpo, trl; print(sys.version.split()[0], 'TRL', trl.__version__)" 2>&1); then
    report python FAIL "$PY cannot import the project: $(tail -n 1 <<<"$version") (make install)"
    skip_rest "needs the project installed" pin probe build train zero3 reload zero3_x2 vllm eval
    summary
fi
report python PASS "$PY (Python $version)"

case "$DEVICE" in
  gpu)
    DEVICE_ARGS=(--use_cpu false --bf16 true)
    ZERO3_CONFIG=accelerate_configs/zero3.yaml
    EVAL_DTYPE=bfloat16 RELOAD_DEVICE=cuda BF16=(--bf16)
    ;;
  cpu)
    DEVICE_ARGS=(--use_cpu true --bf16 false)
    ZERO3_CONFIG=accelerate_configs/zero3_cpu.yaml
    EVAL_DTYPE=float32 RELOAD_DEVICE=cpu BF16=()
    ;;
  *)
    report device FAIL "SMOKE_DEVICE must be gpu or cpu, not '$DEVICE'"
    summary
    ;;
esac

# --- pin: one GPU per one-process step, whatever the machine has
PAIR=
if [[ $DEVICE == gpu ]]; then
    { read -r SINGLE; read -r PAIR; read -r PIN_REASON; } < <("$PY" -m drgrpo.setup.gpu_probe pins 2>&1)
    if [[ -n $SINGLE ]]; then
        report pin PASS "$PIN_REASON"
        export CUDA_VISIBLE_DEVICES=$SINGLE
    else
        report pin FAIL "$PIN_REASON"
    fi
else
    report pin SKIP "GPU-only: CPU mode uses no GPU"
fi

# --- probe: can torch use that GPU, and if not, why
if line=$("$PY" -m drgrpo.setup.gpu_probe probe --device "$DEVICE" 2>&1); then
    report probe PASS "$(tail -n 1 <<<"$line")"
else
    report probe FAIL "$(tail -n 1 <<<"$line")"
    skip_rest "needs a usable GPU (see probe)" build train zero3 reload zero3_x2 vllm eval
    summary
fi

# --- build: the tiny models and the task
rm -rf "$OUT"
mkdir -p "$OUT"
BUILD="from drgrpo.experiments.tiny import build_tiny_model as m; from drgrpo.experiments.tasks import \
write_addition_task as t; m('$OUT/tied'); m('$OUT/untied', tie_word_embeddings=False); t('$OUT/data', num_test=64, seed=0)"
if "$PY" -c "$BUILD" >"$OUT/build.log" 2>&1; then
    report build PASS "tiny Qwen3 models in $OUT/tied (tied embeddings) and $OUT/untied (its own lm_head), 64 test sums"
else
    report build FAIL "$(last_line "$OUT/build.log") (log: $OUT/build.log)"
    skip_rest "needs the tiny models (see build)" train zero3 reload zero3_x2 vllm eval
    summary
fi

# 64 completions per step (4 prompts x 16), up to 4 tokens each. accuracy alone gives a random model all zeros (no
# advantage, a loss of exactly 0); cosine_length varies with the completions' lengths, so the loss must change.
BATCH=64
RUN_ARGS=(--dataset_path "$OUT/data/train.jsonl" --max_steps "$STEPS" --logging_steps 1 --save_strategy no
  --report_to none --per_device_train_batch_size "$BATCH" --reward_funcs accuracy cosine_length
  --overwrite_output_dir true "${DEVICE_ARGS[@]}")
port() { "$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }

# --- train: one process, the tied model
run_step train "$OUT/train.log" "$PY" -m drgrpo.setup.smoke check "$OUT/train" --log "$OUT/train.log" "${BF16[@]}" -- \
    "$PY" scripts/train.py recipes/tiny_drgrpo.yaml "${RUN_ARGS[@]}" --model_name_or_path "$OUT/tied" \
    --output_dir "$OUT/train"

# --- zero3: accelerate + DeepSpeed ZeRO-3, one process, the untied model (Qwen3-8B's lm_head path)
if run_step zero3 "$OUT/zero3.log" "$PY" -m drgrpo.setup.smoke check "$OUT/zero3" --log "$OUT/zero3.log" "${BF16[@]}" \
    --zero3 -- "${ACCELERATE[@]}" --config_file "$ZERO3_CONFIG" --num_processes 1 --main_process_port "$(port)" \
    scripts/train.py recipes/tiny_drgrpo.yaml "${RUN_ARGS[@]}" --model_name_or_path "$OUT/untied" \
    --output_dir "$OUT/zero3"; then
    # --- reload: the consolidated 16-bit checkpoint ZeRO-3 saved, in one process, without DeepSpeed
    if line=$("$PY" -m drgrpo.setup.smoke reload "$OUT/zero3" --base "$OUT/untied" --device "$RELOAD_DEVICE" 2>&1); then
        report reload PASS "$(tail -n 1 <<<"$line")"
    else
        report reload FAIL "$(tail -n 1 <<<"$line")"
    fi
else
    report reload SKIP "needs the ZeRO-3 run's saved model (see zero3)"
fi

# --- zero3_x2: ZeRO-3 across 2 processes (parameters sharded, NCCL), where 2 GPUs exist
if [[ $DEVICE == cpu ]]; then
    report zero3_x2 SKIP "GPU-only: ZeRO-3 across 2 GPUs over NCCL (on CPU, 2 gloo processes: tests/test_distributed.py)"
elif [[ -z $PAIR ]]; then
    report zero3_x2 SKIP "needs 2 GPUs: ${PIN_REASON:-only one visible}"
else
    CUDA_VISIBLE_DEVICES=$PAIR run_step zero3_x2 "$OUT/zero3_x2.log" "$PY" -m drgrpo.setup.smoke check "$OUT/zero3_x2" \
        --log "$OUT/zero3_x2.log" --bf16 --zero3 --processes 2 -- "${ACCELERATE[@]}" --config_file "$ZERO3_CONFIG" \
        --num_processes 2 --main_process_port "$(port)" scripts/train.py recipes/tiny_drgrpo.yaml "${RUN_ARGS[@]}" \
        --model_name_or_path "$OUT/untied" --output_dir "$OUT/zero3_x2"
fi

# --- vllm: colocated generation with sleep mode (vLLM frees its memory while the trainer steps)
if [[ $DEVICE == cpu ]]; then
    report vllm SKIP "GPU-only: vLLM generates on CUDA GPUs"
elif ! "$PY" -c "import vllm" >"$OUT/vllm_import.log" 2>&1; then
    report vllm SKIP "vLLM is not importable ($(last_line "$OUT/vllm_import.log")): make install EXTRAS=dev,vllm"
else
    VLLM_ARGS=(--use_vllm true --vllm_mode colocate --vllm_enable_sleep_mode true --vllm_gpu_memory_utilization 0.3
        --vllm_importance_sampling_correction false)
    # TRL sets vLLM's log level to ERROR unless told otherwise: INFO keeps its sleep-mode and KV-cache lines.
    if VLLM_LOGGING_LEVEL=INFO run_step vllm "$OUT/vllm.log" "$PY" -m drgrpo.setup.smoke check "$OUT/vllm" \
        --log "$OUT/vllm.log" --bf16 --zero3 -- \
        "${ACCELERATE[@]}" --config_file "$ZERO3_CONFIG" --num_processes 1 --main_process_port "$(port)" \
        scripts/train.py recipes/tiny_drgrpo.yaml "${RUN_ARGS[@]}" "${VLLM_ARGS[@]}" --model_name_or_path "$OUT/untied" \
        --output_dir "$OUT/vllm"; then
        if freed=$(grep -m 1 -o "Sleep mode freed [0-9.]* GiB" "$OUT/vllm.log"); then
            kv=$(grep -m 1 -o "Available KV cache memory: [0-9.]* GiB" "$OUT/vllm.log")
            REASONS[-1]="${REASONS[-1]}; vLLM: $freed${kv:+; $kv}"
        else
            RESULTS[-1]=FAIL REASONS[-1]="trained, but vLLM's log never says 'Sleep mode freed ... GiB' (log: $OUT/vllm.log)"
            printf '[FAIL] vllm      %s\n' "${REASONS[-1]}"
        fi
    fi
fi

# --- eval: the one-process run's model through scripts/evaluate.py (what `make eval` runs, without make)
if [[ -f $OUT/train/model.safetensors ]]; then
    eval_start=$("$PY" -c "import time; print(time.time())")
    if "$PY" scripts/evaluate.py --model_name_or_path "$OUT/train" --benchmark "$OUT/data/test.jsonl" --n 1 \
        --temperature 0 --max_new_tokens 4 --recipe recipes/tiny_drgrpo.yaml --backend transformers \
        --dtype "$EVAL_DTYPE" --output_dir "$OUT/eval" --overwrite true --progress false >"$OUT/eval.log" 2>&1; then
        eval_seconds=$("$PY" -c "import time; print(time.time() - $eval_start)")
        runs=(--train "train=$OUT/train")
        [[ -f $OUT/zero3/trainer_state.json ]] && runs+=(--train "zero3=$OUT/zero3")
        "$PY" -m drgrpo.setup.smoke throughput "${runs[@]}" --completions_per_step "$BATCH" \
            --eval_samples "$OUT/eval/samples.jsonl" --eval_seconds "$eval_seconds" >"$OUT/throughput.txt" 2>&1
        report eval PASS "$(grep -c . "$OUT/eval/samples.jsonl") samples; $(paste -sd ';' "$OUT/throughput.txt")"
    else
        report eval FAIL "$(last_line "$OUT/eval.log") (log: $OUT/eval.log)"
    fi
else
    report eval SKIP "needs the one-process run's model (see train)"
fi

summary
