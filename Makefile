# kbroker — the two commands a newcomer needs:
#   make run    installs kbroker into .venv and runs a single-node broker (127.0.0.1:9092, data in ./data);
#               arguments go through ARGS: make run ARGS="--override listeners=PLAINTEXT://127.0.0.1:9093"
#   make test   installs what the tests need (Python packages, Kafka's Java jars, kcat) and runs the tests
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.kbroker-installed
TEST_STAMP := $(VENV)/.kbroker-test-installed
PYTEST_ARGS ?=
# The default suite runs on two pytest-xdist workers, one test file each (--dist loadfile keeps a file's
# module fixtures in one process): 22 min on a quiet machine (2026-11-28; 35-38 on a loaded one) instead of
# ~44 serially, since most of a test's time is spent waiting on the brokers, JVMs and Spark it starts.
# `make test TEST_WORKERS=0` runs it serially.
TEST_WORKERS ?= 2
# Arguments for `kbroker serve` in `make run` (a config file, --override KEY=VALUE, --log-level WARN, ...).
ARGS ?=

.PHONY: run test test-all setup setup-test lint deadcode generate bench fuzz clean

$(PY):
	@echo "==> Creating the virtual environment $(VENV) (once)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	@echo "==> Installing kbroker and its runtime dependencies into $(VENV) (pip install -e .; about a minute the first time)"
	$(PIP) install -q -e .
	@# Byte-compile now: an editable install compiles nothing, and with PYTHONDONTWRITEBYTECODE set
	@# every start would recompile the generated codecs (most of a second of start-up).
	$(PY) -m compileall -q kbroker
	@# Likewise the methods of kbroker's dataclasses, which Python 3.11 compiles at every import (kbroker/codecache.py).
	$(PY) -c "from kbroker import codecache; codecache.prime()"
	@# The optional compiled record walk (kbroker/protocol/_speedups.c), in place in this checkout.
	PYTHON=$(PY) bash scripts/build-speedups.sh || echo "==> (no C compiler: kbroker runs the record walk in Python, slower but identical)"
	touch $@

$(TEST_STAMP): pyproject.toml $(STAMP)
	@echo "==> Installing the test, lint and Spark dependencies into $(VENV) (pyspark is large: a few minutes the first time)"
	$(PIP) install -q -e '.[test,dev,spark]'
	touch $@

setup: $(STAMP)

setup-test: $(TEST_STAMP)
	@echo "==> Checking system tools the tests use (kcat, ...)"
	bash scripts/system-deps.sh
	@echo "==> Resolving Apache Kafka 4.3.1's Java jars with Maven into .cache/java (minutes the first time, then cached)"
	bash scripts/java-deps.sh
	bash scripts/java-deps.sh --streams
	@echo "==> Building kbench, the benchmarks' native load generator (Go, franz-go pinned in go.sum) into .cache/kbench"
	bash benchmarks/native/build.sh
	@echo "==> Building the tests' Go programs (tests/support/go: franz-go's GroupTransactSession member) into .cache/go-tests"
	bash tests/support/go/build.sh txnsession

run: setup
	$(VENV)/bin/kbroker serve $(ARGS)

test: setup-test
	$(VENV)/bin/pytest -m "not slow" -n $(TEST_WORKERS) --dist loadfile --durations=30 $(PYTEST_ARGS)

test-all: setup-test
	$(VENV)/bin/pytest $(PYTEST_ARGS)

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check kbroker tests benchmarks
	$(VENV)/bin/mypy kbroker
	$(VENV)/bin/lint-imports

# Dead-code candidates (not part of lint: vulture cannot see the generated codecs' calls into
# protocol/types.py, enum members, asyncio protocol callbacks or dataclass fields read by name).
deadcode: $(TEST_STAMP)
	$(VENV)/bin/vulture kbroker tests benchmarks --exclude kbroker/protocol/messages,kbroker/spark --min-confidence 60

# Regenerates kbroker/protocol/{messages,metadata_records,coordinator_records}/ from the Kafka jars in
# .cache/java/ (scripts/java-deps.sh); see docs/protocol.md.
generate: setup
	$(PY) -m kbroker.protocol.generator

# Coverage-guided fuzzing at length (tests/fuzz, docs/protocol.md "Fuzzing"): every target, or one
# (FUZZ_TARGET=records), FUZZ_SECONDS each (default 600); findings land in tests/fuzz/crashes/.
FUZZ_TARGET ?= request records metadata_record coordinator_record
FUZZ_SECONDS ?= 600
fuzz: $(TEST_STAMP)
	@for t in $(FUZZ_TARGET); do FUZZ_PYTHON=$(PY) bash scripts/fuzz.sh run $$t $(FUZZ_SECONDS) || exit 1; done

bench: setup-test
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) .cache build *.egg-info
