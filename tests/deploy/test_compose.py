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
import re
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from api.config import Settings
from tests.deploy.buildfiles import DOCKERFILE, REPO, Dockerfile, parse_dockerfile

COMPOSE = REPO / "docker-compose.yml"
VLLM_IMAGE = "vllm/vllm-openai:"
QDRANT_IMAGE = "qdrant/qdrant:"
QDRANT_PORT = 6333  # the Qdrant image's HTTP port
VLLM_PORT = 8000  # vLLM's default --port
#: WARMRAG_* variables the file interpolates for Compose's own use, never handed to
#: warmrag: the model the vLLM replicas load.
COMPOSE_ONLY = {"WARMRAG_MODEL"}

Doc = dict[str, Any]

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_]\w*)(?:(?P<op>:?[-?+])(?P<arg>[^}$]*))?\}"
    r"|(?P<named>[A-Za-z_]\w*))"
)


# --- reading the file ----------------------------------------------------------------


def interpolate(value: str, env: Mapping[str, str] | None = None) -> str:
    """Compose's interpolation: ``$$``, ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}``,
    ``${VAR:+other}`` (and each without the colon). An unset required variable gets a
    dummy value, as if the user had set it."""
    env = env or {}

    def replace(m: re.Match[str]) -> str:
        if m.group("escaped"):
            return "$"
        name = m.group("braced") or m.group("named")
        op, arg = m.group("op") or "", m.group("arg") or ""
        value = env.get(name)
        unset = value is None or (op.startswith(":") and value == "")
        if op.endswith("+"):
            return "" if unset else arg
        if not unset:
            return str(value)
        if op.endswith("-"):
            return arg
        if op.endswith("?"):
            return f"dummy-{name.lower()}"
        return ""

    rest = _VARIABLE.sub(lambda m: "" if m.group("escaped") else "x", value)
    if "$" in rest:
        raise ValueError(f"Compose cannot interpolate {value!r}")
    return _VARIABLE.sub(replace, value)


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, Mapping):
        for key, value in node.items():
            yield str(key)
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)


def interpolated_variables(doc: Doc) -> set[str]:
    return {
        m.group("braced") or m.group("named")
        for text in strings(doc)
        for m in _VARIABLE.finditer(text)
        if not m.group("escaped")
    }


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's environment, interpolated with defaults (list or mapping form)."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
    return {k: interpolate(str(v)) if v is not None else "" for k, v in raw.items()}


def command(service: Mapping[str, Any]) -> list[str]:
    cmd = service.get("command") or []
    words = cmd.split() if isinstance(cmd, str) else [str(w) for w in cmd]
    return [interpolate(w) for w in words]


def flag(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words[:-1] else None


def profiles(service: Mapping[str, Any]) -> set[str]:
    return set(service.get("profiles") or [])


def warmrag_services(doc: Doc) -> dict[str, Doc]:
    """The services built from this repository's Dockerfile."""
    return {name: s for name, s in doc["services"].items() if "build" in s}


def image(service: Mapping[str, Any]) -> str:
    return str(service.get("image", ""))


def exposed(service: Mapping[str, Any]) -> set[int]:
    return {int(str(p).split("/")[0]) for p in service.get("expose") or []}


def image_env(dockerfile: Dockerfile, service: Mapping[str, Any]) -> dict[str, str]:
    build = service["build"]
    target = build.get("target") if isinstance(build, Mapping) else None
    return dockerfile.env(target) if target else {}


def healthcheck_urls(service: Mapping[str, Any]) -> list[str]:
    test = (service.get("healthcheck") or {}).get("test") or []
    text = " ".join(test) if isinstance(test, list) else str(test)
    return re.findall(r"https?://[^\s'\"]+", interpolate(text))


# --- the checks ------------------------------------------------------------------------


def schema_problems(path: Path) -> list[str]:
    """check-jsonschema against the Compose specification it ships (no network)."""
    exe = Path(sys.executable).parent / "check-jsonschema"
    result = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return [] if result.returncode == 0 else [result.stdout + result.stderr]


def layout_problems(doc: Doc) -> list[str]:
    """The Compose specification's shape (no ``version:``), every service in a profile,
    every dependency in its dependent's profiles, every image pinned to a version."""
    problems = []
    if "version" in doc:
        problems.append("a `version:` key (obsolete in the Compose specification)")
    services = doc["services"]
    for name, service in services.items():
        if not profiles(service):
            problems.append(f"{name}: in no profile")
        for dep in service.get("depends_on") or {}:
            if dep not in services:
                problems.append(f"{name}: depends on {dep}, which is not a service")
            elif not profiles(service) <= profiles(services[dep]):
                problems.append(f"{name}: depends on {dep}, which is not in its profiles")
        ref = image(service)
        if "build" not in service:
            tag = ref.rpartition(":")[2] if ":" in ref else ""
            if not tag or tag == "latest":
                problems.append(f"{name}: image {ref!r} is not pinned to a version")
        if ref.startswith(QDRANT_IMAGE):
            version = re.match(r"v?(\d+)\.(\d+)", ref[len(QDRANT_IMAGE) :])
            if not version or (int(version[1]), int(version[2])) < (1, 16):
                problems.append(f"{name}: {ref} is older than Qdrant 1.16")
    return problems


def required_variable_problems(doc: Doc) -> list[str]:
    """Compose substitutes variables in the whole file before it picks a profile's
    services, so a ``${VAR:?}`` must be one that every profile needs."""
    services = doc["services"]
    every = set().union(*(profiles(s) for s in services.values()))
    required = {
        m.group("braced")
        for text in strings(services)
        for m in _VARIABLE.finditer(text)
        if (m.group("op") or "").endswith("?")
    }
    problems = []
    for name in sorted(required):
        using = set().union(
            *(profiles(s) for s in services.values() if name in interpolated_variables(s))
        )
        if using != every:
            problems.append(
                f"{name} is required, but only profiles {sorted(using)} use it: "
                f"Compose would ask for it under {sorted(every - using)} too"
            )
    return problems


def _setting_exists(name: str) -> bool:
    field = name.removeprefix("WARMRAG_").lower()
    if field in Settings.model_fields:
        return True
    nested = Settings.model_fields["warmup"].annotation
    assert isinstance(nested, type) and issubclass(nested, BaseModel)
    return field.startswith("warmup_") and field.removeprefix("warmup_") in nested.model_fields


def variable_problems(doc: Doc) -> list[str]:
    """Every WARMRAG_* name the file sets or interpolates is a setting, save the
    Compose-only ones, which must not be settings nor reach a container."""
    problems = []
    names = {k for s in doc["services"].values() for k in environment(s)}
    for name in sorted(names | interpolated_variables(doc)):
        if not name.startswith("WARMRAG_"):
            continue
        if name in COMPOSE_ONLY:
            if _setting_exists(name) or name in names:
                problems.append(f"{name} is meant for Compose only, yet warmrag would read it")
        elif not _setting_exists(name):
            problems.append(f"{name} is not a warmrag setting")
    return problems


def settings_problems(doc: Doc, dockerfile: Dockerfile) -> list[str]:
    """Each warmrag service's environment (the image's, then the service's, with
    defaults and dummy required values) makes valid Settings."""
    problems = []
    for name, service in warmrag_services(doc).items():
        env = {**image_env(dockerfile, service), **environment(service)}
        with mock.patch.dict(os.environ, env, clear=True):
            try:
                Settings()
            except ValidationError as exc:
                problems.append(f"{name}: {exc}")
    return problems


def _settings(dockerfile: Dockerfile, service: Mapping[str, Any]) -> Settings:
    env = {**image_env(dockerfile, service), **environment(service)}
    with mock.patch.dict(os.environ, env, clear=True):
        return Settings()


def port_problems(doc: Doc, dockerfile: Dockerfile) -> list[str]:
    """warmrag listens where the published port points and its healthcheck asks /ready."""
    problems = []
    for name, service in warmrag_services(doc).items():
        port = _settings(dockerfile, service).port
        published = service.get("ports") or []
        if not published:
            problems.append(f"{name}: publishes no port")
        for entry in published:
            target = entry.get("target") if isinstance(entry, Mapping) else str(entry)
            target = int(str(target).rsplit(":", 1)[-1].split("/")[0])
            if target != port:
                problems.append(f"{name}: publishes container port {target}, serves on {port}")
        urls = healthcheck_urls(service)
        if not urls:
            problems.append(f"{name}: no healthcheck URL")
        for url in urls:
            parts = urlsplit(url)
            if parts.port != port or parts.path != "/ready":
                problems.append(f"{name}: healthcheck asks {url}, not :{port}/ready")
    return problems


def vllm_problems(doc: Doc, dockerfile: Dockerfile) -> list[str]:
    """WARMRAG_VLLM_URL names exactly the vLLM replicas of its profiles, on their ports,
    which serve the model under warmrag's name and wait healthy before it starts."""
    problems = []
    services = doc["services"]
    for name, service in warmrag_services(doc).items():
        settings = _settings(dockerfile, service)
        mine = {
            other
            for other, s in services.items()
            if image(s).startswith(VLLM_IMAGE) and profiles(s) & profiles(service)
        }
        named = set()
        for url in settings.vllm_urls:
            parts = urlsplit(url)
            host, port = parts.hostname or "", parts.port or 80
            replica = services.get(host)
            if replica is None or not image(replica).startswith(VLLM_IMAGE):
                problems.append(f"{name}: {url} names no vLLM service")
                continue
            named.add(host)
            if host not in mine:
                problems.append(f"{name}: {url} names {host}, which is not in its profiles")
            listens = int(flag(command(replica), "--port") or VLLM_PORT)
            if port != listens or port not in exposed(replica):
                problems.append(f"{name}: {url}, but {host} listens on {listens}")
            served = flag(command(replica), "--served-model-name")
            if served != settings.served_model_name:
                problems.append(
                    f"{name}: asks for {settings.served_model_name!r}, {host} serves {served!r}"
                )
            max_len = flag(command(replica), "--max-model-len")
            if max_len is None or int(max_len) < settings.vllm_max_model_len:
                problems.append(
                    f"{name}: context {settings.vllm_max_model_len}, {host} allows {max_len}"
                )
            condition = ((service.get("depends_on") or {}).get(host) or {}).get("condition")
            if condition != "service_healthy":
                problems.append(f"{name}: does not wait for {host} to be healthy")
        if mine - named:
            problems.append(f"{name}: WARMRAG_VLLM_URL leaves out {sorted(mine - named)}")
    return problems


def qdrant_problems(doc: Doc, dockerfile: Dockerfile) -> list[str]:
    """WARMRAG_QDRANT_URL names the Qdrant service of its profiles on its port, with the
    API key the server was given."""
    problems = []
    services = doc["services"]
    for name, service in warmrag_services(doc).items():
        settings = _settings(dockerfile, service)
        if settings.qdrant_url is None:
            continue
        parts = urlsplit(settings.qdrant_url)
        qdrant = services.get(parts.hostname or "")
        if qdrant is None or not image(qdrant).startswith(QDRANT_IMAGE):
            problems.append(f"{name}: {settings.qdrant_url} names no Qdrant service")
            continue
        if not profiles(service) <= profiles(qdrant):
            problems.append(f"{name}: {parts.hostname} is not in its profiles")
        if parts.port != QDRANT_PORT or QDRANT_PORT not in exposed(qdrant):
            problems.append(f"{name}: {settings.qdrant_url}, but Qdrant listens on {QDRANT_PORT}")
        # Blank and unset are one: no key (and Qdrant's healthcheck then fails).
        server_key = environment(qdrant).get("QDRANT__SERVICE__API_KEY") or None
        key = settings.qdrant_api_key
        client_key = (key.get_secret_value() if key is not None else "") or None
        if server_key != client_key:
            problems.append(f"{name}: WARMRAG_QDRANT_API_KEY is not the server's API key")
        condition = ((service.get("depends_on") or {}).get(parts.hostname) or {}).get("condition")
        if condition != "service_healthy":
            problems.append(f"{name}: does not wait for {parts.hostname} to be healthy")
    return problems


def volume_problems(doc: Doc, dockerfile: Dockerfile) -> list[str]:
    """Each warmrag service keeps its data folder in a named volume of its own."""
    problems = []
    declared = set(doc.get("volumes") or {})
    owners: dict[str, str] = {}
    for name, service in warmrag_services(doc).items():
        data_dir = str(_settings(dockerfile, service).data_dir)
        mounts = []
        for volume in service.get("volumes") or []:
            if isinstance(volume, Mapping):
                mounts.append((str(volume.get("source", "")), str(volume.get("target", ""))))
            else:
                source, _, rest = str(volume).partition(":")
                mounts.append((source, rest.split(":")[0]))
        sources = [source for source, target in mounts if target == data_dir]
        if not sources:
            problems.append(f"{name}: no volume on its data folder {data_dir}")
        for source in sources:
            if source not in declared:
                problems.append(f"{name}: {source} on {data_dir} is not a named volume")
            elif source in owners:
                problems.append(f"{name}: shares volume {source} with {owners[source]}")
            owners[source] = name
    return problems


def replica_problems(doc: Doc) -> list[str]:
    """Every vLLM replica caches prefixes, reports cached prompt tokens, has a GPU of
    its own and a health check on /health."""
    problems = []
    gpus: dict[str, str] = {}
    for name, service in doc["services"].items():
        if not image(service).startswith(VLLM_IMAGE):
            continue
        words = command(service)
        for wanted in ("--enable-prefix-caching", "--enable-prompt-tokens-details"):
            if wanted not in words:
                problems.append(f"{name}: no {wanted}")
        if "--no-enable-prefix-caching" in words:
            problems.append(f"{name}: prefix caching turned off")
        devices = (
            service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices")
        ) or []
        ids = [i for d in devices if "gpu" in d.get("capabilities", []) for i in d["device_ids"]]
        if not ids:
            problems.append(f"{name}: reserves no GPU")
        for gpu in ids:
            if gpu in gpus:
                problems.append(f"{name}: GPU {gpu} is also {gpus[gpu]}'s")
            gpus[gpu] = name
        port = int(flag(words, "--port") or VLLM_PORT)
        urls = healthcheck_urls(service)
        if not any(urlsplit(u).port == port and urlsplit(u).path == "/health" for u in urls):
            problems.append(f"{name}: no healthcheck on :{port}/health ({urls})")
    return problems


# --- tests -----------------------------------------------------------------------------


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
        (",http://vllm-1:8000", "", "WARMRAG_VLLM_URL leaves out ['vllm-1']"),
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
