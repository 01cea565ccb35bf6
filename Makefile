# Two entry points that work on a fresh machine with nothing but Python 3.11+:
#   make demo   set up .venv and run the main job on committed / shared real data (no GPU)
#   make test   set up .venv (with the CPU build of torch and triton 3.6, Perfworks from the
#               nvidia-cuda-cupti wheel, and Debian's nsight-compute where apt-get is there) and run the tests
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch 2.13.0 resolves to the CPU build that lies on CI's disk; an unpinned torch would
# download a CUDA build of several GB. triton 3.6 is the GPU host's version.
CELL_PINS := torch==2.13.0 triton==3.6.0
CORPUS ?= $(or $(NCUFLOW_CORPUS),../shared/ncu-reports)

.PHONY: setup setup-test demo test lint bench clean gpu-bundle gpu-rehearsal

# A set-up is done once: each install leaves a stamp in the venv, remade only when
# pyproject.toml (or this Makefile's pins) is newer, so a second `make demo` / `make test`
# goes straight to its job. `make clean` (or deleting .venv) starts over.
SETUP_STAMP := $(VENV)/.ncuflow-setup
TEST_STAMP  := $(VENV)/.ncuflow-setup-test
PASSES_STAMP := $(VENV)/.ncuflow-setup-passes

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# An editable install leaves no bytecode (a wheel's does): compiled here once, so that a shell
# with PYTHONDONTWRITEBYTECODE set does not compile ~45 modules (~50 ms) in every command.
$(SETUP_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	$(BIN)/python -m compileall -q ncuflow
	@touch $@

$(TEST_STAMP): pyproject.toml Makefile tests/install_real_ncu.sh | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev,cells,passes,ray]' $(CELL_PINS)
	-@sh tests/install_real_ncu.sh
	$(BIN)/python -m compileall -q ncuflow
	@touch $@ $(SETUP_STAMP) $(PASSES_STAMP)

$(PASSES_STAMP): pyproject.toml | $(SETUP_STAMP)
	$(BIN)/python -m pip install -q -e '.[passes]'
	@touch $@

setup: $(SETUP_STAMP)

setup-test: $(TEST_STAMP)

demo: setup
	$(BIN)/python analysis/demo.py --corpus $(CORPUS) --out out/demo

test: setup-test
	$(BIN)/python -m pytest -q

lint: setup-test
	$(BIN)/ruff check ncuflow kernels tests analysis
	$(BIN)/mypy

bench: $(PASSES_STAMP)
	$(BIN)/python analysis/bench_extraction.py $(CORPUS)
	$(BIN)/python analysis/bench_passes.py $(CORPUS)

# FlashInfer's modules built ahead of time for the H200 (sm_90a) on this CPU machine, with
# CUDA 13.0's nvcc (CUDA_HOME): writes .gpu-bundle/ (<= 40 MiB, git-ignored), which the GPU
# host's one call carries (analysis/run_study_on_gpu.py --part flashinfer). See the README.
gpu-bundle:
	$(PYTHON) analysis/gpu_bundle.py build

# The README's device command rehearsed on a host-like CPU environment (Python 3.12, torch 2.11,
# triton 3.6, no polars/Ray, ncuflow not installed; .gpu-rehearsal/, ignored) with the fake ncu in
# four modes (normal, slow, refused, old-ncu), checking what comes back under a scratch $OUT. Needs
# .gpu-bundle (make gpu-bundle). Run it before the one device call.
gpu-rehearsal:
	$(PYTHON) analysis/gpu_rehearsal.py

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
