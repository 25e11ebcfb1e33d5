# puffer-bench with the CUDA toolchain: envs compiled, kernels compiled to cubins, trainer ready.
#   ./docker.sh build [--cuda 12|13]      (docker build -f images/cuda.Dockerfile .)
# CUDA 12 by default for the widest driver support; --build-arg CUDA_MAJOR=13 (with the matching
# CUDA_VERSION and TORCH_INDEX, as docker.sh passes them) builds the CUDA 13 variant.
ARG CUDA_VERSION=12.8.1
ARG UBUNTU=ubuntu24.04

# ---------------------------------------------------------------- build: venv, project, kernel cubins
FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
ARG CUDA_MAJOR=12
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
# GPU architectures the kernel cubins are compiled for (Turing, Ampere, Ada, Hopper, Blackwell)
ARG CUDA_ARCHS="75 80 86 89 90 120"
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.12 python3.12-venv python3.12-dev gcc make \
    && rm -rf /var/lib/apt/lists/*
RUN python3.12 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# torch first, from the index whose CUDA major matches the image; the project then keeps it
RUN pip install --upgrade pip setuptools wheel \
    && pip install torch --index-url "${TORCH_INDEX}"
COPY . /opt/puffer-bench
WORKDIR /opt/puffer-bench
RUN pip install --no-build-isolation ".[cuda${CUDA_MAJOR},dev,docker]"
# compile every kernels/*.cu for each architecture to cubins with NVRTC (no GPU needed), which
# appliance.gpu.kernels loads from PUFFER_KERNELS_CUBINS, so a run compiles nothing
ENV PUFFER_KERNELS_CUBINS=/opt/kernel-cubins
RUN python -m appliance.gpu.warm --out /opt/kernel-cubins --archs ${CUDA_ARCHS}

# ---------------------------------------------------------------- final: toolchain + venv, no build caches
FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.12 gcc make \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 puffer
COPY --from=build /opt/venv /opt/venv
COPY --from=build --chown=puffer:puffer /opt/kernel-cubins /opt/kernel-cubins
COPY --from=build --chown=puffer:puffer /opt/puffer-bench /opt/puffer-bench
ENV PATH=/opt/venv/bin:$PATH PUFFER_KERNELS_CUBINS=/opt/kernel-cubins MPLCONFIGDIR=/tmp/matplotlib
WORKDIR /opt/puffer-bench
USER 1000:1000
ENTRYPOINT ["puffer-bench"]
CMD ["--help"]
