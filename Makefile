# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint bench clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

## demo: run the demo scenario against the embedded testbed and write the HTML report
demo: $(STAMP)
	$(BIN)/rushhour run demo

## test: the whole suite (unit, real-HTTP integration, end-to-end, browser)
test: $(STAMP)
	$(BIN)/pytest -q

## test-fast: everything except end-to-end and browser tests
test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not e2e and not browser"

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
