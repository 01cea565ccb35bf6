# ncuflow on a GPU host: CUDA 13 + Nsight Compute + ncuflow[cells] (torch, triton).
#
#   docker build -t ncuflow .
#   docker run --rm --gpus all --cap-add=SYS_ADMIN \
#       -v "$PWD/profiles:/work/profiles" ncuflow doctor
#   docker run --rm --gpus all --cap-add=SYS_ADMIN \
#       -v "$PWD/profiles:/work/profiles" ncuflow profile paged_decode:page=16,kv=shared
#
# --gpus all exposes the GPU and mounts the host driver's libraries; --cap-add=SYS_ADMIN
# lets ncu read the performance counters when the host driver restricts them to
# administrators (RmProfilingAdminOnly=1, the default), which would otherwise fail with
# ERR_NVGPUCTRPERM. The host driver must support CUDA 13 (`nvidia-smi` shows >= 580).
ARG CUDA_VERSION=13.0.1
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04

# torch wheels built for CUDA 13; override for another CUDA line.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
ARG CUDA_PKG_SUFFIX=13-0

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/cuda/bin:${PATH}

# Nsight Compute CLI (ncu) from NVIDIA's CUDA apt repository, configured in the base image.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        python3 python3-venv python3-dev git \
        cuda-nsight-compute-${CUDA_PKG_SUFFIX} \
 && rm -rf /var/lib/apt/lists/* \
 && NCU_BIN="$(ls -d /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n1)" \
 && test -n "$NCU_BIN" && "$NCU_BIN" --version

RUN python3 -m venv "$VIRTUAL_ENV" \
 && pip install --upgrade pip \
 && pip install --index-url "$TORCH_INDEX_URL" torch

WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY ncuflow ./ncuflow
COPY kernels ./kernels
RUN pip install ".[cells]" \
 && ncuflow --version \
 && python -c "import ncu_report, torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"

# The profile store lives in /work/profiles: mount a host folder there to keep the runs.
WORKDIR /work
ENTRYPOINT ["ncuflow"]
CMD ["doctor"]
