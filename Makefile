# One environment for everything: .venv, created and filled from pyproject.toml.
VENV := .venv
PY := $(VENV)/bin/python
QUESTION ?= 只确认 order-service 是否存在 HighMemoryUsage 告警

# llama-cpp-python builds from source; skipping its tools, tests and examples saves minutes.
export CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: install run test bench optimize

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

run: install
	$(PY) -m program ask "$(QUESTION)"

optimize: install
	$(PY) optimize.py

test: install
	$(PY) -m pytest

bench: install
	$(PY) benchmarks/gatekeeper_bench.py
