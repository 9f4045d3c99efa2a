"""The properties docker-compose.yml must have, each a function that lists what is
wrong with a Compose file (``tests/deploy/test_compose.py`` runs each on the real file
and on a copy broken on purpose). Nothing here needs Docker or a network.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError

from api.config import Settings
from tests.deploy.buildfiles import REPO, Dockerfile

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


#: Profiles that run beside a base profile, never alone (``--profile gpu --profile
#: monitoring``): a variable every base profile requires is asked for with them anyway.
ADDON_PROFILES = {"monitoring"}


def required_variable_problems(doc: Doc) -> list[str]:
    """Compose substitutes variables in the whole file before it picks a profile's
    services, so a ``${VAR:?}`` must be one that every base profile needs."""
    services = doc["services"]
    every = set().union(*(profiles(s) for s in services.values())) - ADDON_PROFILES
    required = {
        m.group("braced")
        for text in strings(services)
        for m in _VARIABLE.finditer(text)
        if (m.group("op") or "").endswith("?")
    }
    problems = []
    for name in sorted(required):
        using = (
            set().union(
                *(profiles(s) for s in services.values() if name in interpolated_variables(s))
            )
            - ADDON_PROFILES
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
