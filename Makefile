# The two commands of the README's quick start: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# What the worker needs to run (pinned), and the package itself.
$(VENV)/.demo: $(BIN)/python pyproject.toml builder/requirements.txt
	$(BIN)/pip install -q -r builder/requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

# What the tests need on top.
$(VENV)/.test: $(VENV)/.demo pyproject.toml
	$(BIN)/pip install -q -r builder/requirements.txt -e '.[test]'
	touch $@

demo: $(VENV)/.demo
	RUNPOD_LOG_LEVEL=ERROR $(BIN)/python handler.py --test_input "$$(cat test_input.json)"

lint: $(VENV)/.test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/pytest

clean:
	rm -rf $(VENV) output .pytest_cache .ruff_cache
