# The README's commands. `make bench` and `make test` each create .venv on first use.
#
# TORCH picks the torch build installed before the project. The default takes the CPU wheel a
# CI machine keeps on disk, and on other machines the matching PyPI build; a GPU box may pass e.g.
#   make test TORCH='torch --index-url https://download.pytorch.org/whl/cu128'
# and a machine that already has a suitable torch may pass TORCH= (empty) with SYSTEM_SITE=1.
PYTHON      ?= python3
VENV        ?= .venv
TORCH       ?= torch==2.13.0
EXTRAS      ?= dev,ray,docker,postgres,logging,stats
SYSTEM_SITE ?= 0
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
SOURCES     := pyproject.toml setup.py $(wildcard envs/*.c envs/*.h kernels/*.cpp kernels/*.cuh)

.PHONY: bench test lint install clean env-debug readme-results kernels-check docker-test config-docs

$(PY):
	$(PYTHON) -m venv $(if $(filter 1,$(SYSTEM_SITE)),--system-site-packages) $(VENV)

$(STAMP): $(SOURCES) | $(PY)
	$(if $(strip $(TORCH)),$(PY) -m pip install --quiet $(TORCH))
	$(PY) -m pip install --quiet setuptools wheel
	$(PY) -m pip install --quiet --no-build-isolation -e ".[$(EXTRAS)]"
	@touch $@

install: $(STAMP)

# The main job on the embedded default (CPU, no GPU): the fingerprint, then the quick suite
# (probe, env and vector speed, training speed), written to results/<profile>/ as JSON, Markdown, PNG.
bench: $(STAMP)
	$(VENV)/bin/puffer-bench info
	$(VENV)/bin/puffer-bench run --suite quick

# The README's results table and results/summary.png, from the newest report of each profile.
readme-results: $(STAMP)
	$(VENV)/bin/puffer-bench report --readme README.md

# docs/configuration.md from the schema (appliance/config/schema.py) and default.yaml.
config-docs: $(STAMP)
	$(PY) -m appliance.config.explain

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check appliance tests
	$(VENV)/bin/ruff format --check appliance tests
	$(VENV)/bin/lint-imports   # the layer contracts in pyproject.toml (docs/architecture.md)
	$(VENV)/bin/hadolint --config .hadolint.yaml images/cuda.Dockerfile images/cpu.Dockerfile
	$(VENV)/bin/shellcheck docker.sh .ci/run images/*.sh

# The CPU image built and run for real: the test suite and the quick bench inside it, the report
# checked on the host, the tests marked docker against the daemon. Uses a reachable daemon or, as
# root, starts its own (removed afterwards); skips in one line where Docker cannot be had.
# In the image it runs the tests not marked slow (DOCKER_PYTEST_ARGS; empty for all of them): the slow
# ones (learning, distributed, fault subprocesses) already run on the host in the same CI run, and
# running them twice would put .ci/run near CI's time limit on 2 cores.
DOCKER_PYTEST_ARGS ?= -m 'not slow'
docker-test: $(STAMP)
	PYTHON=$(PY) TORCH='$(TORCH)' TORCH_INDEX= PYTEST_ARGS="$(DOCKER_PYTEST_ARGS)" images/docker-test.sh

# Compile every kernels/*.cu for sm_80/86/89/90 with NVRTC (no GPU or driver needed), print registers per
# kernel, fail on a compile error, a register spill or a limit in appliance/gpu/warm.py. Its Python
# packages are the `kernels` extra of pyproject.toml, installed from there into the venv.
KERNELS_STAMP := $(VENV)/.kernels-installed
$(KERNELS_STAMP): pyproject.toml | $(STAMP)
	$(PY) -c "import tomllib; print('\\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['kernels']))" > $(VENV)/kernels-requirements.txt
	$(PY) -m pip install --quiet -r $(VENV)/kernels-requirements.txt
	@touch $@

kernels-check: $(KERNELS_STAMP)
	$(PY) -m appliance.gpu.warm --check

clean:
	rm -rf build dist *.egg-info appliance/*.so envs/build

# A standalone binary of one env (or ENV=all) under AddressSanitizer and UBSan, stepped with
# random actions: make env-debug ENV=breakout [STEPS=3000]
ENV   ?= all
STEPS ?= 3000
SANITIZE := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
env-debug:
	@mkdir -p envs/build
	$(CC) -std=c11 -O1 -g -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers $(SANITIZE) \
		-Ienvs envs/debug.c envs/vecenv.c -o envs/build/debug -lm -pthread
	./envs/build/debug $(ENV) $(STEPS)
