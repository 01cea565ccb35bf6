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

.PHONY: setup setup-test demo test lint bench clean gpu-bundle

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

setup: $(BIN)/python
	$(BIN)/python -m pip install -q -e .

setup-test: $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev,cells,passes,ray]' $(CELL_PINS)
	-@sh tests/install_real_ncu.sh

demo: setup
	$(BIN)/python analysis/demo.py --corpus $(CORPUS) --out out/demo

test: setup-test
	$(BIN)/python -m pytest -q

lint: setup-test
	$(BIN)/ruff check ncuflow kernels tests analysis
	$(BIN)/mypy

bench: setup
	$(BIN)/python -m pip install -q -e '.[passes]'
	$(BIN)/python analysis/bench_extraction.py $(CORPUS)
	$(BIN)/python analysis/bench_passes.py $(CORPUS)

# FlashInfer's modules built ahead of time for the H200 (sm_90a) on this CPU machine, with
# CUDA 13.0's nvcc (CUDA_HOME): writes .gpu-bundle/ (<= 40 MiB, git-ignored), which the GPU
# host's one call carries (analysis/run_study_on_gpu.py --part flashinfer). See the README.
gpu-bundle:
	$(PYTHON) analysis/gpu_bundle.py build

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
