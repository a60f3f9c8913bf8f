# The two commands: `make run` starts the embedded stack, `make test` runs the whole suite.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench lint venv clean chromium

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/task-scheduler dev

test: $(STAMP) chromium
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Headless Chromium (Debian's package) for the /ui browser tests; installed once, if missing.
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m bench $(BENCH_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/mypy --strict cli api worker workflows activities outbound store scheduling config bench

clean:
	rm -rf $(VENV) .pytest_cache
