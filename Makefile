# One environment for everything: .venv, created and filled from pyproject.toml.
VENV := .venv
PY := $(VENV)/bin/python
QUESTION ?= 只确认 order-service 是否存在 HighMemoryUsage 告警

.PHONY: help install run test system-packages bench optimize

help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)/  make \1\t\2/' | expand -t 24

# llama-cpp-python comes from a wheel built for this machine without llama.cpp's AMX kernels, which
# crash on CPUs that have AMX; scripts/llama-wheel.sh says why and keys the build by its flags.
$(VENV)/.installed: pyproject.toml scripts/llama-wheel.sh
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --quiet --upgrade pip
	wheel=$$(scripts/llama-wheel.sh $(PY)) && $(PY) -m pip install --quiet --quiet --force-reinstall --no-deps "$$wheel"
	$(PY) -m pip install --quiet --quiet -e '.[dev]'
	touch $@

# The first diagnosis after an install starts from saved stage prefixes (docs/installation.md). A
# warm-up that fails does not fail the install, and is not tried again by every later make: the
# diagnoses then read their prompts.
$(VENV)/.warmed: $(VENV)/.installed
	@$(PY) -m program.entry.warm || echo "make: the warm-up failed (above); the first diagnosis will" \
	    "read its prompts; python -m program.entry.warm tries again" >&2
	@touch $@

install: $(VENV)/.installed $(VENV)/.warmed  ## create .venv, install the program, its models and the test tools, warm the model

run: install  ## one diagnosis on the embedded model (QUESTION="..." asks another)
	$(PY) -m program ask "$(QUESTION)"

system-packages:  ## install the Debian packages the tests run for real (as root or with sudo)
	scripts/system-packages.sh

test: install system-packages  ## the whole test suite, real servers and the embedded model included
	$(PY) -m pytest

optimize: install  ## compile the citation step's prompts (python optimize.py)
	$(PY) optimize.py

bench: install  ## gatekeeper throughput
	$(PY) benchmarks/gatekeeper_bench.py
