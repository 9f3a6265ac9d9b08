# The two set-up commands of the README: `make demo` and `make test`. Nothing else needs installing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint install dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed

# Debian packages the tests drive (PACKAGE[:COMMAND]): chromium renders the HTML report in tests/report/;
# prometheus gives promtool and prometheus to tests/watch/.
DEBIAN_PACKAGES := chromium prometheus:promtool

dev: $(VENV)/.dev-installed
	sh scripts/ensure-debian-packages.sh $(DEBIAN_PACKAGES)

demo: install
	$(BIN)/llmtriage demo

lint: dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

test: dev lint
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
