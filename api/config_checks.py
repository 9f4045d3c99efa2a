"""The checks ``Settings`` runs on its values: each takes what the environment or a keyword
gave and returns it cleaned, or raises ``ValueError`` naming what is wrong (pydantic reports
it with the setting's name)."""

from __future__ import annotations

import json
import shlex
from typing import Any

from limits import parse_many
from pydantic import SecretStr


def nest_prefixed(data: Any, prefix: str, field: str) -> Any:
    """``{"warmup_ttl_s": 5}`` as ``{"warmup": {"ttl_s": 5}}`` (``prefix`` "warmup_",
    ``field`` "warmup"), merged over what ``field`` already holds: keywords use the
    environment's flat names."""
    if not isinstance(data, dict):
        return data
    flat = {k[len(prefix) :]: data[k] for k in data if k.startswith(prefix)}
    if not flat:
        return data
    rest = {k: v for k, v in data.items() if not k.startswith(prefix)}
    nested = rest.get(field, {})
    if hasattr(nested, "model_dump"):
        nested = nested.model_dump()
    rest[field] = {**nested, **flat}
    return rest


def blank_is_unset(token: SecretStr | None) -> SecretStr | None:
    """A secret without its surrounding whitespace; a blank one is none."""
    if token is None or not token.get_secret_value().strip():
        return None
    return SecretStr(token.get_secret_value().strip())


def split_keys(value: Any) -> Any:
    """Keys given as a JSON list or comma-separated, without blanks."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, str):
        value = json.loads(value) if value.lstrip().startswith("[") else value.split(",")
    if isinstance(value, list | tuple):
        keys = [k.get_secret_value() if isinstance(k, SecretStr) else k for k in value]
        return [k.strip() for k in keys if not isinstance(k, str) or k.strip()]
    return value


def rate(value: str | None) -> str | None:
    """A rate the ``limits`` package reads ("5/second;100/minute"); blank: none."""
    if value is None or not value.strip():
        return None
    try:
        parse_many(value)
    except ValueError as exc:
        raise ValueError(f"not a rate like '5/second;100/minute': {exc}") from None
    return value.strip()


def replica_urls(value: str | None) -> str | None:
    """vLLM replicas: comma-separated http(s) URLs, each once, without trailing slashes;
    blank: none."""
    if value is None or not value.strip():
        return None
    urls = [u.strip().rstrip("/") for u in value.split(",") if u.strip()]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"not an http(s) URL: {url!r}")
    if len(set(urls)) != len(urls):
        raise ValueError("a vLLM URL is listed twice")
    return ",".join(urls)


def zmq_endpoints(value: str | None) -> str | None:
    """Comma-separated ZMQ endpoints, each ``publish`` or ``publish|replay``; blank: none."""
    if value is None or not value.strip():
        return None
    endpoints = [e.strip() for e in value.split(",") if e.strip()]
    for item in endpoints:
        publish, _, replay = item.partition("|")
        for endpoint in filter(None, (publish, replay)):
            if not endpoint.startswith(("tcp://", "ipc://")):
                raise ValueError(f"not a ZMQ endpoint (tcp:// or ipc://): {endpoint!r}")
        host, _, port = publish.removeprefix("tcp://").rpartition(":")
        if publish.startswith("tcp://") and not replay and not (host and port.isdigit()):
            raise ValueError(f"not a ZMQ endpoint like tcp://host:5557: {publish!r}")
    return ",".join(endpoints)


def shell_words(value: str) -> str:
    """Flags as a shell would split them (``shlex``), refused where quoting is unbalanced."""
    try:
        shlex.split(value)
    except ValueError as exc:
        raise ValueError(f"not shell-quoted flags: {exc}") from None
    return value
