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

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/crag-lab demo --kb data/kb --queries data/kb_queries.jsonl --ids a001,a002,a005,a013,a006

test: $(STAMP)
	sh scripts/ensure_chromium.sh
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
	rm -rf $(VENV) data/kb/.crag_index .pytest_cache .mypy_cache .ruff_cache
