# puffer-bench for machines without a GPU: CPU torch, envs compiled, trainer and benchmarks.
#   ./docker.sh build --cpu      (docker build -f images/cpu.Dockerfile .)
ARG PYTHON=3.12

# ---------------------------------------------------------------- build: compile the envs into a venv
FROM python:${PYTHON}-slim AS build
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev make \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
RUN pip install --upgrade pip setuptools wheel \
    && pip install torch --index-url "${TORCH_INDEX}"
COPY . /opt/puffer-bench
WORKDIR /opt/puffer-bench
RUN pip install --no-build-isolation ".[dev,docker]"

# ---------------------------------------------------------------- final: slim runtime
FROM python:${PYTHON}-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev make \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 puffer
COPY --from=build /opt/venv /opt/venv
COPY --from=build --chown=puffer:puffer /opt/puffer-bench /opt/puffer-bench
ENV PATH=/opt/venv/bin:$PATH MPLCONFIGDIR=/tmp/matplotlib
WORKDIR /opt/puffer-bench
USER 1000:1000
ENTRYPOINT ["puffer-bench"]
CMD ["--help"]
