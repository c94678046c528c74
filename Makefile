# kbroker — the two commands a newcomer needs:
#   make run    installs kbroker into .venv and runs a single-node broker (127.0.0.1:9092, data in ./data)
#   make test   installs what the tests need (Python packages, Kafka's Java jars, kcat) and runs the tests
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.kbroker-installed
TEST_STAMP := $(VENV)/.kbroker-test-installed
PYTEST_ARGS ?=

.PHONY: run test test-all setup setup-test lint generate bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -q -e .
	@# Byte-compile now: an editable install compiles nothing, and with PYTHONDONTWRITEBYTECODE set
	@# every start would recompile the generated codecs (most of a second of start-up).
	$(PY) -m compileall -q kbroker
	touch $@

$(TEST_STAMP): pyproject.toml $(STAMP)
	$(PIP) install -q -e '.[test,dev,spark]'
	touch $@

setup: $(STAMP)

setup-test: $(TEST_STAMP)
	bash scripts/system-deps.sh
	bash scripts/java-deps.sh

run: setup
	$(VENV)/bin/kbroker serve

test: setup-test
	$(VENV)/bin/pytest -m "not slow" $(PYTEST_ARGS)

test-all: setup-test
	$(VENV)/bin/pytest $(PYTEST_ARGS)

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check kbroker tests benchmarks
	$(VENV)/bin/mypy kbroker

# Regenerates kbroker/protocol/{messages,metadata_records,coordinator_records}/ from the Kafka jars in
# .cache/java/ (scripts/java-deps.sh); see docs/protocol.md.
generate: setup
	$(PY) -m kbroker.protocol.generator

bench: setup-test
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) .cache build *.egg-info
