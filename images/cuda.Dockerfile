# puffer-bench for NVIDIA GPUs: CUDA torch and cupy, envs compiled, kernels compiled ahead of time.
#   ./docker.sh build [--cuda 12|13]
# which first fills images/wheelhouse/cuda12|13 on the host (images/wheelhouse.sh), then runs
#   docker build -f images/cuda.Dockerfile --build-arg CUDA_MAJOR=12 .
# No CUDA base image: the CUDA runtime, cuBLAS, cuDNN and NVRTC come as PyPI wheels with torch and
# cupy (nvidia-*), and the driver comes from the host through the NVIDIA container runtime
# (--gpus all). That saves the multi-gigabyte CUDA devel image (README, Docker). Python packages come
# only from the wheelhouse, checked against its sha256 lock.
# BASE: any Debian-like image with Python 3 of the wheelhouse's Python version (the CPU image's
# notes apply); a distro Python without venv or headers gets them from apt.
ARG BASE=python:3.11-slim
# the wheelhouse as an image: docker.sh makes it from images/wheelhouse/FLAVOUR (FROM scratch, COPY . /wheels)
ARG WHEELS=puffer-bench-wheels:cuda12

FROM ${WHEELS} AS wheels

# ---------------------------------------------------------------- base: compiler, tini, user
FROM ${BASE} AS base
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc g++ libc6-dev make tini \
    && if ! python3 -c 'import ensurepip, sysconfig, os, sys; sys.exit(not os.path.exists(sysconfig.get_path("include") + "/Python.h"))'; then \
        apt-get install -y --no-install-recommends python3-venv python3-dev; fi \
    && rm -rf /var/lib/apt/lists/* \
    && (id -u 1000 >/dev/null 2>&1 || useradd --create-home --uid 1000 puffer)

# ---------------------------------------------------------------- deps: the locked wheels into a venv
FROM base AS deps
COPY --from=wheels /wheels /wheels
RUN python3 -c 'import sys; want = open("/wheels/PYTHON").read().strip(); have = "%d.%d" % sys.version_info[:2]; \
sys.exit(0 if want == have else f"the wheelhouse is for Python {want} but the base image has Python {have}: build with --build-arg BASE=python:{want}-slim or remake the wheelhouse with PYTHON_VERSION={have}")'
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-index --find-links /wheels --require-hashes -r /wheels/requirements.lock

# ---------------------------------------------------------------- build: the project's wheel, the kernel cubins
FROM deps AS build
# GPU architectures the kernel cubins are compiled for (Turing, Ampere, Ada, Hopper, Blackwell)
ARG CUDA_ARCHS="75 80 86 89 90 120"
COPY . /src
WORKDIR /src
RUN /opt/venv/bin/pip wheel --no-index --no-deps --no-build-isolation --wheel-dir /dist . \
    && rm -rf build ./*.egg-info \
    && /opt/venv/bin/pip install --no-index --no-deps /dist/*.whl
# compile every kernels/*.cu for each architecture to cubins with NVRTC (a wheel; no GPU needed), which
# appliance.gpu.kernels loads from PUFFER_KERNELS_CUBINS, so a run compiles nothing
RUN /opt/venv/bin/python -m appliance.gpu.warm --out /opt/kernel-cubins --archs ${CUDA_ARCHS}

# ---------------------------------------------------------------- final: venv + project + kernel cubins
FROM base
ARG CUDA_MAJOR=12
COPY --from=deps /opt/venv /opt/venv
COPY --from=deps /wheels/requirements.lock /etc/puffer-bench/wheels.lock
COPY --from=build /dist /tmp/dist
RUN /opt/venv/bin/pip install --no-index --no-deps /tmp/dist/*.whl \
    && rm -rf /tmp/dist \
    && /opt/venv/bin/pip check
COPY --from=build --chown=1000:1000 /opt/kernel-cubins /opt/kernel-cubins
COPY --from=build --chown=1000:1000 /src /opt/puffer-bench
# what the NVIDIA container runtime reads: all GPUs, the compute libraries of the driver, and a
# driver new enough for this CUDA major (refused with a clear message otherwise). PYTHONSAFEPATH and
# tini: see cpu.Dockerfile.
ENV PATH=/opt/venv/bin:$PATH PYTHONSAFEPATH=1 MPLCONFIGDIR=/tmp/matplotlib PUFFER_KERNELS_CUBINS=/opt/kernel-cubins \
    PUFFER_BENCH_WHEELS=/etc/puffer-bench/wheels.lock \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility NVIDIA_REQUIRE_CUDA="cuda>=${CUDA_MAJOR}.0"
WORKDIR /opt/puffer-bench
USER 1000:1000
ENTRYPOINT ["tini", "-s", "--", "puffer-bench"]
CMD ["--help"]
