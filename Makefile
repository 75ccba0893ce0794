# drgrpo-recipes: every command a user runs. `make demo` and `make test` work on a fresh clone (they install first).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# A GPU user picks a CUDA build, e.g. `make install TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"`.
TORCH ?= torch==2.13.0
EXTRAS ?= dev
STAMP := $(VENV)/.installed-$(EXTRAS)

RECIPE ?= recipes/tiny_drgrpo.yaml
ACCELERATE_CONFIG ?=
ARGS ?=
export HF_HUB_DISABLE_TELEMETRY := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo train test lint advantages score

install: $(STAMP)

# Re-runs only when pyproject.toml changes, so `make install` is quick when nothing changed.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	# deepspeed builds against the torch installed above, not a fresh one in an isolated build env.
	$(PY) -m pip install -q --no-build-isolation -e ".[$(EXTRAS)]"
	touch $(STAMP)

demo: install
	HF_HUB_OFFLINE=1 $(PY) scripts/demo.py

train: install
ifeq ($(ACCELERATE_CONFIG),)
	$(PY) scripts/train.py $(RECIPE) $(ARGS)
else
	$(VENV)/bin/accelerate launch --config_file $(ACCELERATE_CONFIG) scripts/train.py $(RECIPE) $(ARGS)
endif

test: install
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

REWARDS ?= 1 0 1 1 0 0 1 0
advantages: install
	$(PY) scripts/advantages.py $(REWARDS) $(ARGS)

# Score a jsonl of (completion, answer) rows with any reward specs: `make score SCORE_INPUT=samples.jsonl
# SCORE_REWARDS="accuracy boxed_format"`; prints the summary and the rows scored None or failed.
SCORE_INPUT ?=
SCORE_REWARDS ?= accuracy
score: install
	$(PY) scripts/score.py --input $(SCORE_INPUT) --reward_funcs $(SCORE_REWARDS) $(ARGS)
