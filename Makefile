# tokenmill: `make demo` and `make test` each build .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   := build/demo

.PHONY: demo test lint test-all test-faults bench bench-quick lock clean golden

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The CPU build of torch first, pinned: an unpinned torch would pull a CUDA build of several GB.
	$(BIN)/python -m pip install -q torch==2.13.0 -c constraints.txt
	$(BIN)/python -m pip install -q -e '.[pipeline,test]' -c constraints.txt
	# The one fastText binding (fasttext-numpy2) trains and predicts; this fails, saying how to repair it, if another
	# package's fasttext/ files replaced it.
	$(BIN)/python -c 'from tokenmill.fasttext.binding import fasttext_module; fasttext_module()'
	touch $(STAMP)

demo: $(STAMP)
	rm -rf $(DEMO)
	$(BIN)/tokenmill demo-data $(DEMO)
	# demo-data already trained the quality classifier demo.yaml applies; this retrains it to the same bytes.
	$(BIN)/tokenmill quality train $(DEMO)/quality.yaml
	$(BIN)/tokenmill run $(DEMO)/demo.yaml
	$(BIN)/tokenmill report contamination $(DEMO)/run
	$(BIN)/tokenmill tokens stats $(DEMO)/run
	$(BIN)/tokenmill train $(DEMO)/train.yaml
	$(BIN)/tokenmill manifest show $(DEMO)/run

# Rerun the demo exactly as `make demo` does, in its own folder, and rewrite manifests/ from it: commit the result
# with any change that alters what the pipeline keeps, drops or emits.
golden: $(STAMP)
	rm -rf build/golden
	$(BIN)/tokenmill demo-data build/golden
	$(BIN)/tokenmill quality train build/golden/quality.yaml
	$(BIN)/tokenmill run build/golden/demo.yaml
	$(BIN)/python -m tokenmill.manifests.golden write build/golden/run --dest manifests

# Tests run in parallel (pytest-xdist: a process per core, each with its own Ray cluster; a test file's tests stay in
# one process, so its module fixtures are built once): about 15 minutes for 1,802 tests on the 2-core development
# machine, 30 in one process (TEST_WORKERS=0).
TEST_WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile
test: lint
	$(PYTEST)

# ruff, with the rules set in pyproject.toml ([tool.ruff.lint]); part of `make test`.
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

# Every fault-injection trial (20 per stage and kill kind) and every hostile-input case at full size; prints counts.
test-faults: $(STAMP)
	$(PYTEST) tests/faults tests/hostile -m ''

test-all: $(STAMP)
	$(PYTEST) -m ''

# Every benchmark in benchmarks/, one process each as its docstring documents it (benchmarks/run_all.py): writes
# bench/summary.json and prints a table of every ratio; fails naming any benchmark that crashed or printed no ratio.
# Full size is each benchmark's documented default (scale.py's 10 GB run takes over an hour: BENCH_ARGS='--skip scale');
# `make bench-quick` (or BENCH_SIZE=quick) runs each in seconds, under bench/quick/. See docs/benchmarks.md.
BENCH_SIZE ?= full
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python -c 'import datasketch, rensa, scipy' 2>/dev/null || $(BIN)/python -m pip install -q -e '.[bench]' -c constraints.txt
	$(BIN)/python benchmarks/run_all.py --size $(BENCH_SIZE) $(BENCH_ARGS)

bench-quick:
	$(MAKE) bench BENCH_SIZE=quick

lock: $(STAMP)
	( echo '# Pinned versions for a reproducible install: `pip install -c constraints.txt`. Regenerate with `make lock`.'; \
	  $(BIN)/python -m pip freeze --exclude-editable | grep -vi '^tokenmill' | sed 's/+cpu$$//' ) > constraints.txt

clean:
	rm -rf $(VENV) build
