# One environment for everything: .venv, created and filled from pyproject.toml.
VENV := .venv
PY := $(VENV)/bin/python
QUESTION ?= 只确认 order-service 是否存在 HighMemoryUsage 告警

.PHONY: install run test bench optimize

# llama-cpp-python comes from a wheel built for this machine without llama.cpp's AMX kernels, which
# crash on CPUs that have AMX; scripts/llama-wheel.sh says why and keys the build by its flags.
$(VENV)/.installed: pyproject.toml scripts/llama-wheel.sh
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --quiet --upgrade pip
	wheel=$$(scripts/llama-wheel.sh $(PY)) && $(PY) -m pip install --quiet --quiet --force-reinstall --no-deps "$$wheel"
	$(PY) -m pip install --quiet --quiet -e '.[dev]'
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
