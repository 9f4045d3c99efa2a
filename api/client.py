"""A typed client of a running warmrag's HTTP API: what the ``warmrag`` CLI talks through.

Every failure is a ``ServiceError`` whose message is fit for a terminal: the service's
own words for a 4xx/5xx (its ``detail``, or OpenAI's ``error.message``), or that the
service could not be reached at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx
from httpx_sse import SSEError, connect_sse
from prometheus_client.parser import text_string_to_metric_families

from api.schemas import (
    ChatResponse,
    DeleteResponse,
    IngestResponse,
    ReadyResponse,
    RegistryResponse,
)
from rag.knowledge.models import DocumentIn
from warmup.reports import CycleReport


class ServiceError(Exception):
    """A request that failed; ``status`` is None when the service was not reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _problem(resp: httpx.Response) -> str:
    """The service's description of a failed response."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500] or resp.reason_phrase
    if isinstance(body, dict):
        if isinstance(body.get("error"), dict):
            return str(body["error"].get("message", body))
        detail = body.get("detail", body)
        if isinstance(detail, list):
            return "; ".join(
                f"{'.'.join(str(p) for p in i.get('loc', []))}: {i.get('msg')}"
                for i in detail
                if isinstance(i, dict)
            )
        return str(detail)
    return str(body)


class WarmragClient:
    """One service at ``url``; ``admin_token`` for the admin routes, ``api_key`` for
    ``/v1/*`` when the service has keys configured."""

    def __init__(
        self,
        url: str,
        *,
        admin_token: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.admin_token = admin_token
        self.api_key = api_key
        # Answers and big ingests take minutes on a CPU host; a connection does not.
        timeout = httpx.Timeout(timeout_s, connect=5.0)
        self._http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport)

    def __enter__(self) -> WarmragClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._http.close()

    def _headers(self, admin: bool) -> dict[str, str]:
        secret = self.admin_token if admin else self.api_key
        if admin and not secret:
            raise ServiceError("set WARMRAG_ADMIN_TOKEN to the service's admin token")
        return {"Authorization": f"Bearer {secret}"} if secret else {}

    def _send(
        self, method: str, path: str, *, admin: bool = False, ok: Sequence[int] = (200,), **kw: Any
    ) -> httpx.Response:
        try:
            resp = self._http.request(method, path, headers=self._headers(admin), **kw)
        except httpx.HTTPError as exc:
            raise ServiceError(f"cannot reach warmrag at {self.url}: {exc}") from None
        if resp.status_code not in ok:
            raise ServiceError(f"HTTP {resp.status_code}: {_problem(resp)}", resp.status_code)
        return resp

    # ----- admin --------------------------------------------------------------------

    def ingest(self, documents: Sequence[DocumentIn]) -> IngestResponse:
        body = {"documents": [d.model_dump() for d in documents]}
        resp = self._send("POST", "/admin/documents", admin=True, json=body)
        return IngestResponse.model_validate(resp.json())

    def delete(self, doc_id: str) -> DeleteResponse | None:
        """None when there is no such document."""
        path = "/admin/documents/" + quote(doc_id, safe="")
        resp = self._send("DELETE", path, admin=True, ok=(200, 404))
        return DeleteResponse.model_validate(resp.json()) if resp.status_code == 200 else None

    def warm(self) -> list[CycleReport]:
        resp = self._send("POST", "/admin/warmup", admin=True)
        return [CycleReport.model_validate(r) for r in resp.json()]

    def registry(self) -> RegistryResponse:
        resp = self._send("GET", "/admin/warmup", admin=True)
        return RegistryResponse.model_validate(resp.json())

    # ----- open routes --------------------------------------------------------------

    def ready(self) -> ReadyResponse:
        resp = self._send("GET", "/ready", ok=(200, 503))
        return ReadyResponse.model_validate(resp.json())

    def metric(self, name: str) -> float | None:
        """The value of an unlabelled gauge or counter sample, None when absent."""
        text = self._send("GET", "/metrics").text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and not sample.labels:
                    return float(sample.value)
        return None

    def ask(self, question: str, top_k: int = 3) -> Iterator[str | ChatResponse]:
        """The answer's text as it streams, then the whole ``ChatResponse``."""
        body = {"question": question, "stream": True, "top_k": top_k}
        try:
            with connect_sse(
                self._http, "POST", "/v1/chat", json=body, headers=self._headers(False)
            ) as source:
                if source.response.status_code != 200:
                    source.response.read()
                    raise ServiceError(
                        f"HTTP {source.response.status_code}: {_problem(source.response)}",
                        source.response.status_code,
                    )
                for event in source.iter_sse():
                    if event.event == "token":
                        yield str(event.json()["text"])
                    elif event.event == "done":
                        yield ChatResponse.model_validate(event.json())
                        return
                    elif event.event == "error":
                        data = event.json()
                        raise ServiceError(f"{data.get('component')}: {data.get('error')}")
        except (httpx.HTTPError, SSEError) as exc:
            raise ServiceError(f"cannot reach warmrag at {self.url}: {exc}") from None
        raise ServiceError("the answer stream ended before its last event")
