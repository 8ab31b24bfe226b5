# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# Bytecode on, whatever the environment says (some machines set PYTHONDONTWRITEBYTECODE=1): without it every
# Python process compiles the checkout's modules again, and pytest rewrites every test module again in each of
# its workers, and `make test` starts hundreds of them: with bytecode a pytest collection takes 3.2 CPU-seconds
# instead of 9.4 and a short run 3.25 instead of 3.6 (docs/development.md). __pycache__ is in .gitignore.
unexport PYTHONDONTWRITEBYTECODE
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast test-real engines lint bench clean venv compile

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,otel]'
	touch $(STAMP)

## demo: run the demo scenario against the embedded testbed and write the HTML report
demo: $(STAMP)
	$(BIN)/rushhour run demo

## compile: the simulator's and the wire client's hot modules compiled with mypyc into the venv (≈ 75 s + 20 s the
## first time and after a source edit; a no-op otherwise). `rushhour simulate`, `plan` and the simulated `sweep`/`study`
## run 1.2–1.5× faster with it, and every load process (`rushhour run`, workers, `locust -f`) runs the compiled wire
## client; without a C compiler they run interpreted (same records either way). `make test` makes it first.
compile: $(STAMP)
	$(BIN)/python -m rushhour.sim.compiled build --quiet --best-effort
	$(BIN)/python -m rushhour.loadgen.compiled build --quiet --best-effort

## engines: install every vLLM and LiteLLM release of engines/releases.toml (the pinned ones and the extras)
## the `real` tests run against, each in its own venv (cached in ~/.cache/rushhour/engines; the first time
## takes 6–12 minutes: the pinned pair 175 s on an idle 2-core machine, the extra pair 715 s on
## a busy one; later calls return at once)
engines:
	bash engines/install.sh all

## test: the whole suite (unit, real-HTTP integration, end-to-end, browser, real engines) in four passes
## and one exit code: the unit tests (no marker `e2e`, `browser`, `real` or `serial`: mostly computing) on
## UNIT_WORKERS workers, first, so that a broken unit shows in ~3 minutes; the timing-sensitive tests (marker
## `serial`) on TIMING_WORKERS workers (2: two at a time, never beside the bulk); the real-engine tests (marker
## `real`: tools/real_pass.py runs the pinned vLLM's tests beside the other engines', each group one test at a
## time on a core of its own); then the end-to-end and browser tests, which mostly wait on loopback runs of fixed
## length, on E2E_WORKERS pytest-xdist workers. PYTEST_ARGS goes to every pass (e.g. PYTEST_ARGS=--durations=30).
UNIT_WORKERS   ?= 2
TIMING_WORKERS ?= 2
E2E_WORKERS    ?= 4
PYTEST_ARGS    ?=
UNIT_TESTS     := not e2e and not browser and not real and not serial
E2E_TESTS      := (e2e or browser) and not real and not serial
test: $(STAMP) engines compile
	@unit=0; timing=0; real=0; e2e=0; \
	echo "make test: unit pass (unit tests, $(UNIT_WORKERS) workers)"; \
	$(BIN)/pytest -q -n $(UNIT_WORKERS) --dist worksteal -m "$(UNIT_TESTS)" $(PYTEST_ARGS) || unit=$$?; \
	echo "make test: timing pass (timing-sensitive tests, $(TIMING_WORKERS) workers)"; \
	$(BIN)/pytest -q -n $(TIMING_WORKERS) --dist worksteal -m "serial and not real" $(PYTEST_ARGS) || timing=$$?; \
	echo "make test: real pass (real engines: the pinned vLLM's tests beside the other engines')"; \
	$(BIN)/python tools/real_pass.py $(BIN)/pytest $(PYTEST_ARGS) || real=$$?; \
	echo "make test: end-to-end pass (end-to-end and browser tests, $(E2E_WORKERS) workers)"; \
	$(BIN)/pytest -q -n $(E2E_WORKERS) --dist worksteal -m "$(E2E_TESTS)" $(PYTEST_ARGS) || e2e=$$?; \
	echo "make test: unit pass exit $$unit, timing pass exit $$timing, real pass exit $$real, end-to-end pass exit $$e2e"; \
	for code in $$unit $$timing $$real $$e2e; do if [ $$code -ne 0 ]; then exit $$code; fi; done

## test-real: only the tests against real vLLM and LiteLLM
test-real: $(STAMP) engines
	$(BIN)/python tools/real_pass.py $(BIN)/pytest $(PYTEST_ARGS)

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
	$(BIN)/python benchmarks/sim.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
