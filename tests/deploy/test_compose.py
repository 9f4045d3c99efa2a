"""docker-compose.yml is a valid Compose file whose warmrag services would start: every
``WARMRAG_*`` variable is a setting and every value parses, and the ports, URLs, volumes
and profiles agree with each other, with the Dockerfile and with ``Settings``.

Each property is a function that lists what is wrong with a Compose file; each is run
on the real file and on a copy broken on purpose, to show it notices. Nothing here needs
Docker or a network.
"""

from __future__ import annotations

import http.server
import os
import socketserver
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.buildfiles import DOCKERFILE, Dockerfile, parse_dockerfile
from tests.deploy.compose_checks import (
    COMPOSE,
    QDRANT_PORT,
    Doc,
    interpolate,
    layout_problems,
    port_problems,
    qdrant_problems,
    replica_problems,
    required_variable_problems,
    schema_problems,
    settings_problems,
    variable_problems,
    vllm_problems,
    volume_problems,
)


@pytest.fixture(scope="module")
def text() -> str:
    return COMPOSE.read_text()


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return parse_dockerfile(DOCKERFILE.read_text())


def load(text: str) -> Doc:
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    return doc


def broken(text: str, old: str, new: str, count: int = -1) -> Doc:
    assert old in text, old
    return load(text.replace(old, new, count))


def test_interpolation() -> None:
    env = {"SET": "v", "EMPTY": ""}
    assert interpolate("$$x ${SET} $SET ${EMPTY:-d} ${EMPTY-d} ${UNSET:-d}", env) == "$x v v d  d"
    assert interpolate("${UNSET:?message with spaces}") == "dummy-unset"
    assert interpolate("${UNSET}") == ""
    assert interpolate("${SET:+on}${EMPTY:+on}${EMPTY+set}${UNSET+set}", env) == "onset"
    with pytest.raises(ValueError):
        interpolate("${A:-${B}}")


def test_schema() -> None:
    assert schema_problems(COMPOSE) == []


def test_schema_check_notices(text: str, tmp_path: Path) -> None:
    bad = tmp_path / "compose.yml"
    bad.write_text(text.replace("    expose:", "    exposes:", 1))
    (problem,) = schema_problems(bad)
    assert "'exposes' was unexpected" in problem


def test_layout(text: str) -> None:
    assert layout_problems(load(text)) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("services:\n", 'version: "3.9"\nservices:\n', "a `version:` key"),
        ("    profiles: [cpu]\n", "", "warmrag: in no profile"),
        ("qdrant/qdrant:v1.20.0", "qdrant/qdrant:latest", "qdrant: image 'qdrant/qdrant:latest'"),
        ("qdrant/qdrant:v1.20.0", "qdrant/qdrant:v1.15.5", "older than Qdrant 1.16"),
        ("vllm/vllm-openai:v0.32.0", "vllm/vllm-openai", "vllm-0: image 'vllm/vllm-openai'"),
        ("      qdrant:\n        condition", "      qdrnt:\n        condition", "depends on qdrnt"),
    ],
)
def test_layout_check_notices(text: str, old: str, new: str, problem: str) -> None:
    problems = layout_problems(broken(text, old, new, 1))
    assert any(problem in p for p in problems), problems


def test_profiles_keep_dependencies_together(text: str) -> None:
    doc = broken(text, "  qdrant:\n    profiles: [gpu]", "  qdrant:\n    profiles: [db]")
    assert "warmrag-gpu: depends on qdrant, which is not in its profiles" in layout_problems(doc)


def test_required_variables_are_every_profiles(text: str) -> None:
    assert required_variable_problems(load(text)) == []


def test_required_variable_check_notices(text: str) -> None:
    doc = broken(text, "${QDRANT_API_KEY:-}", "${QDRANT_API_KEY:?set it}")
    assert required_variable_problems(doc) == [
        "QDRANT_API_KEY is required, but only profiles ['gpu'] use it: "
        "Compose would ask for it under ['cpu'] too"
    ]


def test_qdrant_healthcheck_needs_a_key_and_a_ready_server(text: str) -> None:
    """The healthcheck's shell script, run here against a stand-in for /readyz."""
    script = load(text)["services"]["qdrant"]["healthcheck"]["test"][3]
    answer = {"status": 200}

    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(answer["status"] if self.path == "/readyz" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    with socketserver.TCPServer(("127.0.0.1", 0), Ready) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]
        local = interpolate(script).replace(f"/{QDRANT_PORT}", f"/{port}")

        def check(key: str) -> subprocess.CompletedProcess[str]:
            env = {"QDRANT__SERVICE__API_KEY": key, "PATH": os.environ["PATH"]}
            return subprocess.run(
                ["bash", "-c", local], env=env, capture_output=True, text=True, timeout=30
            )

        try:
            assert check("k").returncode == 0
            blank = check("")
            assert blank.returncode != 0 and "QDRANT_API_KEY is not set" in blank.stderr
            answer["status"] = 503
            assert check("k").returncode != 0
        finally:
            server.shutdown()


def test_variables_are_settings(text: str) -> None:
    assert variable_problems(load(text)) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("WARMRAG_SEED_SAMPLE_KB:", "WARMRAG_SEED_SAMPLE_KBS:", "WARMRAG_SEED_SAMPLE_KBS is not"),
        ("${WARMRAG_API_KEYS:-}", "${WARMRAG_APIKEYS:-}", "WARMRAG_APIKEYS is not a warmrag"),
        ("WARMRAG_PORT:", "WARMRAG_WARMUP_TTL:", "WARMRAG_WARMUP_TTL is not a warmrag setting"),
        ("WARMRAG_PORT:", "WARMRAG_MODEL:", "WARMRAG_MODEL is meant for Compose only"),
    ],
)
def test_variable_check_notices(text: str, old: str, new: str, problem: str) -> None:
    problems = variable_problems(broken(text, old, new, 1))
    assert any(problem in p for p in problems), problems


def test_nested_warmup_variables_are_settings(text: str) -> None:
    doc = broken(text, "WARMRAG_PORT:", "WARMRAG_WARMUP_TTL_S:", 1)
    assert variable_problems(doc) == []


def test_values_parse(text: str, dockerfile: Dockerfile) -> None:
    assert settings_problems(load(text), dockerfile) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ('WARMRAG_PORT: "8000"', 'WARMRAG_PORT: "eighty"', "warmrag: "),
        ("http://vllm-0:8000,", "vllm-0:8000,", "not an http(s) URL"),
        ('WARMRAG_SEED_SAMPLE_KB: "false"', 'WARMRAG_SEED_SAMPLE_KB: "nope"', "seed_sample_kb"),
        ("${WARMRAG_VLLM_KV_CACHE_GIB:-4}", "${WARMRAG_VLLM_KV_CACHE_GIB:-0}", "vllm_kv_cache"),
    ],
)
def test_value_check_notices(
    text: str, dockerfile: Dockerfile, old: str, new: str, problem: str
) -> None:
    problems = settings_problems(broken(text, old, new, 1), dockerfile)
    assert any(problem in p for p in problems), problems


def test_ports(text: str, dockerfile: Dockerfile) -> None:
    assert port_problems(load(text), dockerfile) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ('WARMRAG_PORT: "8000"', 'WARMRAG_PORT: "8080"', "publishes container port 8000, serves"),
        ("      - target: 8000", "      - target: 8001", "warmrag: publishes container port 8001"),
        ("8000/ready", "8001/ready", "healthcheck asks http://127.0.0.1:8001/ready"),
        ("8000/ready", "8000/health", "healthcheck asks http://127.0.0.1:8000/health"),
    ],
)
def test_port_check_notices(
    text: str, dockerfile: Dockerfile, old: str, new: str, problem: str
) -> None:
    problems = port_problems(broken(text, old, new, 1), dockerfile)
    assert any(problem in p for p in problems), problems


def test_vllm_urls(text: str, dockerfile: Dockerfile) -> None:
    assert vllm_problems(load(text), dockerfile) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("http://vllm-1:8000", "http://vllm-2:8000", "http://vllm-2:8000 names no vLLM service"),
        ("http://vllm-1:8000", "http://vllm-1:8001", "http://vllm-1:8001, but vllm-1 listens"),
        (
            ",http://vllm-1:8000\n      WARMRAG_VLLM_KV_EVENTS_ENDPOINTS: tcp://vllm-0:5557,",
            "\n      WARMRAG_VLLM_KV_EVENTS_ENDPOINTS: ",
            "WARMRAG_VLLM_URL leaves out ['vllm-1']",
        ),
        ("http://vllm-1:8000", "http://qdrant:6333", "http://qdrant:6333 names no vLLM service"),
        (
            "WARMRAG_SERVED_MODEL_NAME: ${WARMRAG_SERVED_MODEL_NAME:-SmolLM2-135M-Instruct}",
            "WARMRAG_SERVED_MODEL_NAME: other-model",
            "asks for 'other-model', vllm-0 serves 'SmolLM2-135M-Instruct'",
        ),
        (
            "WARMRAG_VLLM_MAX_MODEL_LEN: ${WARMRAG_VLLM_MAX_MODEL_LEN:-4096}",
            "WARMRAG_VLLM_MAX_MODEL_LEN: 8192",
            "context 8192, vllm-0 allows 4096",
        ),
        (
            "      vllm-1:\n        condition",
            "      qdrant2:\n        condition",
            "wait for vllm-1",
        ),
    ],
)
def test_vllm_url_check_notices(
    text: str, dockerfile: Dockerfile, old: str, new: str, problem: str
) -> None:
    problems = vllm_problems(broken(text, old, new, 1), dockerfile)
    assert any(problem in p for p in problems), problems


def test_vllm_url_check_notices_a_replica_in_another_profile(
    text: str, dockerfile: Dockerfile
) -> None:
    doc = load(text)
    doc["services"]["vllm-1"]["profiles"] = ["spare"]
    assert "warmrag-gpu: http://vllm-1:8000 names vllm-1, which is not in its profiles" in (
        vllm_problems(doc, dockerfile)
    )


def test_qdrant_url(text: str, dockerfile: Dockerfile) -> None:
    assert qdrant_problems(load(text), dockerfile) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("http://qdrant:6333", "http://qdrant:6334", "http://qdrant:6334, but Qdrant listens"),
        ("http://qdrant:6333", "http://qdrant-db:6333", "names no Qdrant service"),
        (
            "WARMRAG_QDRANT_API_KEY: ${QDRANT_API_KEY:-}",
            "WARMRAG_QDRANT_API_KEY: ${WARMRAG_ADMIN_TOKEN:?}",
            "WARMRAG_QDRANT_API_KEY is not the server's API key",
        ),
        ("      qdrant:\n        condition", "      vllm-2:\n        condition", "wait for qdrant"),
    ],
)
def test_qdrant_url_check_notices(
    text: str, dockerfile: Dockerfile, old: str, new: str, problem: str
) -> None:
    problems = qdrant_problems(broken(text, old, new, 1), dockerfile)
    assert any(problem in p for p in problems), problems


def test_data_volumes(text: str, dockerfile: Dockerfile) -> None:
    assert volume_problems(load(text), dockerfile) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("warmrag-data:/data", "warmrag-data:/var/lib/warmrag", "warmrag: no volume on its data"),
        ("warmrag-gpu-data:/data", "warmrag-data:/data", "shares volume warmrag-data"),
        ("warmrag-data:/data", "./data:/data", "./data on /data is not a named volume"),
        ('WARMRAG_PORT: "8000"', 'WARMRAG_PORT: "8000"\n      WARMRAG_DATA_DIR: /srv', "/srv"),
    ],
)
def test_data_volume_check_notices(
    text: str, dockerfile: Dockerfile, old: str, new: str, problem: str
) -> None:
    problems = volume_problems(broken(text, old, new, 1), dockerfile)
    assert any(problem in p for p in problems), problems


def test_data_volume_check_follows_the_dockerfile(text: str) -> None:
    """Without WARMRAG_DATA_DIR in the service, the image's default decides."""
    moved = parse_dockerfile(
        DOCKERFILE.read_text().replace("WARMRAG_DATA_DIR=/data", "WARMRAG_DATA_DIR=/srv")
    )
    problems = volume_problems(load(text), moved)
    assert "warmrag: no volume on its data folder /srv" in problems


def test_replicas(text: str) -> None:
    assert replica_problems(load(text)) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("    - --enable-prefix-caching\n", "", "vllm-0: no --enable-prefix-caching"),
        ("    - --enable-prompt-tokens-details\n", "", "vllm-1: no --enable-prompt-tokens-details"),
        ('device_ids: ["1"]', 'device_ids: ["0"]', "vllm-1: GPU 0 is also vllm-0's"),
        ("8000/health", "8000/metrics", "vllm-0: no healthcheck on :8000/health"),
    ],
)
def test_replica_check_notices(text: str, old: str, new: str, problem: str) -> None:
    problems = replica_problems(broken(text, old, new, 1))
    assert any(problem in p for p in problems), problems


def test_warmrag_has_time_to_save_its_graph_at_a_stop(text: str) -> None:
    """Docker kills a container 10 s after SIGTERM unless told otherwise: a clean stop
    saves the graph's snapshot (at 1,000,000 chunks 49-75 s after a change, up to 214 s
    after a start from the rows), and a start after a kill builds the graph from its rows
    instead."""
    services = load(text)["services"]
    warmrags = [name for name in services if name.startswith("warmrag")]
    assert warmrags == ["warmrag", "warmrag-gpu"]
    for name in warmrags:
        grace = str(services[name].get("stop_grace_period", "10s"))
        assert grace.endswith("m") and int(grace[:-1]) >= 4, (name, grace)
