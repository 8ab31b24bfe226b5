# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast test-real engines lint bench clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

## demo: run the demo scenario against the embedded testbed and write the HTML report
demo: $(STAMP)
	$(BIN)/rushhour run demo

## engines: install the real vLLM and LiteLLM the `real` tests run against, in their own venvs
## (cached in ~/.cache/rushhour/engines; the first time takes ~5 minutes, later calls return at once)
engines:
	bash engines/install.sh all

## test: the whole suite (unit, real-HTTP integration, end-to-end, browser, real engines)
test: $(STAMP) engines
	$(BIN)/pytest -q

## test-real: only the tests against real vLLM and LiteLLM
test-real: $(STAMP) engines
	$(BIN)/pytest -q -m real

## test-fast: everything except end-to-end, browser and real-engine tests
test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not e2e and not browser and not real"

## lint: ruff and mypy
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

## bench: the performance measurements in benchmarks/
bench: $(STAMP)
	$(BIN)/python benchmarks/testbed.py
	$(BIN)/python benchmarks/loadgen.py
	$(BIN)/python benchmarks/audit.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
