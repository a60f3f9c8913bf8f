# The two commands: `make run` starts the embedded stack, `make test` runs the whole suite.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench bench-full lint venv clean chromium

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/task-scheduler dev

# Test files run side by side in TEST_WORKERS processes, each file whole in one of them (its
# module-scoped stacks start once); `make test TEST_WORKERS=0` runs them one after another.
TEST_WORKERS ?= 3
test: $(STAMP) chromium
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Headless Chromium (Debian's package) for the /ui browser tests; installed once, if missing.
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

# `make bench`: a quick set of the workloads at small sizes (bench/README.md says how long it
# takes); BENCH_ARGS replaces it. `make bench-full`: every workload at its full size.
BENCH_QUICK := --only herd,every_minute,reminders,sustained --herd 1000 \
	--every-minute-tasks 300 --every-minute-minutes 2 --every-minute-systems scheduler,bare \
	--reminders-rate 50 --reminders-seconds 40 --reminders-delay 20 \
	--sustained-rates 25,50 --sustained-seconds 20

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m bench $(or $(BENCH_ARGS),$(BENCH_QUICK))

bench-full: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m bench --herd 1000,10000 $(BENCH_ARGS)

lint: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'  # mypy reads the bench's imports
	$(BIN)/ruff check . && $(BIN)/mypy --strict cli api worker workflows activities outbound store scheduling config bench

clean:
	rm -rf $(VENV) .pytest_cache
