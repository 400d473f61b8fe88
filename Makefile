# tokenmill: `make demo` and `make test` each build .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   := build/demo

.PHONY: gpu-check demo test lint test-all test-slow test-faults bench bench-quick lock clean golden

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

# Tests run in parallel (pytest-xdist: a process per core and one more, to use the time tests wait on their
# subprocesses; each with its own Ray cluster; a test file's tests stay in one process, so its module fixtures are
# built once; tests/conftest.py starts the longest files first): 7m00s of pytest for 1,928 tests on a fresh clone on
# the 2-core development machine, quiet (3 processes); in one process (TEST_WORKERS=0) about 20, the summed test times.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile
test: lint
	$(PYTEST)

# ruff, with the rules set in pyproject.toml ([tool.ruff.lint]); part of `make test`.
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

# Every fault-injection trial (20 per stage and kill kind) and every hostile-input case at full size; prints counts.
test-faults: $(STAMP)
	$(PYTEST) tests/faults tests/hostile -m ''

# `make test`, then the long tests (-m long: end to end on the shared real data, exact resume after a kill, hangs
# waited out, each over ~10 s alone): every behaviour's test, as CI (.ci/run) runs it. About 2.5 minutes more.
test-all: test
	$(PYTEST) -m long

# The slow set (-m slow: more world sizes, stages and kill points of behaviours the two above cover, benchmarks at
# quick size, multi-node Ray): by hand before a release; it does not fit CI's 20 minutes on two cores (its longest 43
# of 333 tests took 7).
test-slow: $(STAMP)
	$(PYTEST) -m slow

# The trainer's GPU paths in one command (benchmarks/gpu_check.py: bf16 and compile throughput and MFU of opt-1.3b
# and llama-1b at seq 2048, exact resume after a SIGKILL, NCCL with two GPUs, the loader's feed): a table and
# bench/gpu/gpu_check.json. Without a CUDA device it says so and exits 0.
gpu-check: $(STAMP)
	$(BIN)/python benchmarks/gpu_check.py --out bench/gpu

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
