# puffer-bench for machines without a GPU: CPU torch, envs compiled, trainer, benchmarks and tests.
#   ./docker.sh build --cpu
# which first fills images/wheelhouse/cpu on the host (images/wheelhouse.sh), then runs
#   docker build -f images/cpu.Dockerfile --build-arg BASE=python:3.11-slim .
# Python packages come only from that wheelhouse, checked against its sha256 lock (no index is
# reached from the build), so an image rebuilt from the same wheelhouse holds the same bytes.
# BASE: any Debian-like image with Python 3, venv and the Python headers, of the Python version the
# wheelhouse was made for (images/debian-base.sh makes one without a registry).
ARG BASE=python:3.11-slim
# the wheelhouse as an image: docker.sh makes it from images/wheelhouse/FLAVOUR (FROM scratch, COPY . /wheels)
ARG WHEELS=puffer-bench-wheels:cpu

FROM ${WHEELS} AS wheels

# ---------------------------------------------------------------- base: compilers (the build and tests compile C and C++), tini, user
FROM ${BASE} AS base
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc g++ libc6-dev make tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 puffer

# ---------------------------------------------------------------- deps: the locked wheels into a venv
FROM base AS deps
COPY --from=wheels /wheels /wheels
RUN python3 -c 'import sys; want = open("/wheels/PYTHON").read().strip(); have = "%d.%d" % sys.version_info[:2]; \
sys.exit(0 if want == have else f"the wheelhouse is for Python {want} but the base image has Python {have}: build with --build-arg BASE=python:{want}-slim or remake the wheelhouse with PYTHON_VERSION={have}")'
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-index --find-links /wheels --require-hashes -r /wheels/requirements.lock

# ---------------------------------------------------------------- build: the project's wheel from the source tree
FROM deps AS build
COPY . /src
WORKDIR /src
RUN /opt/venv/bin/pip wheel --no-index --no-deps --no-build-isolation --wheel-dir /dist . \
    && rm -rf build ./*.egg-info

# ---------------------------------------------------------------- final: venv + project; source tree for the tests
FROM base
COPY --from=deps /opt/venv /opt/venv
COPY --from=deps /wheels/requirements.lock /etc/puffer-bench/wheels.lock
COPY --from=build /dist /tmp/dist
RUN /opt/venv/bin/pip install --no-index --no-deps /tmp/dist/*.whl \
    && rm -rf /tmp/dist \
    && /opt/venv/bin/pip check
COPY --from=build --chown=puffer:puffer /src /opt/puffer-bench
# PYTHONSAFEPATH: no Python started here puts its working directory first on sys.path, so the tests
# (run in /opt/puffer-bench) import the installed package with its compiled extension, not the
# source tree. tini as PID 1 hands SIGTERM (docker stop) to puffer-bench and reaps zombies; -s keeps
# it quiet when `docker run --init` puts another init in front of it.
ENV PATH=/opt/venv/bin:$PATH PYTHONSAFEPATH=1 MPLCONFIGDIR=/tmp/matplotlib \
    PUFFER_BENCH_WHEELS=/etc/puffer-bench/wheels.lock
WORKDIR /opt/puffer-bench
USER 1000:1000
ENTRYPOINT ["tini", "-s", "--", "puffer-bench"]
CMD ["--help"]
