"""Client for a vLLM OpenAI-compatible server: chat streams, prefills, cache facts.

``LLMEngine`` is what the rest of warmrag needs of vLLM; ``VLLMClient`` is the real
one, and tests put a fake engine (prefix blocks, evictions, failures) behind it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import httpx
from httpx_sse import EventSource, SSEError

from rag.llm.errors import LLMBadResponseError as LLMBadResponseError
from rag.llm.errors import LLMError as LLMError
from rag.llm.errors import LLMRequestError as LLMRequestError
from rag.llm.errors import LLMTimeoutError as LLMTimeoutError
from rag.llm.errors import LLMUnavailableError as LLMUnavailableError
from rag.llm.server_metrics import VLLMMetrics, parse_vllm_metrics

log = logging.getLogger(__name__)

#: One chat message as the OpenAI-compatible API takes it (``role``, ``content``).
Message = dict[str, str]


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    #: The replica that served the request, where a pool of vLLM servers chose one
    #: (``rag.llm.pool.ReplicaPool`` fills it in; one server leaves it ``None``).
    replica: str | None = None
    #: A prefill cut to ``max_prompt_tokens``: the whole prefix's tokens (None: not cut).
    uncut_tokens: int | None = None
    #: Whether vLLM sent ``prompt_tokens_details`` at all (off without
    #: ``--enable-prompt-tokens-details``: then ``cached_tokens`` says nothing).
    cached_reported: bool = True


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class CacheConfig:
    """vLLM's KV cache, as its metrics describe it."""

    block_size: int
    num_blocks: int
    #: The memory the cache lives in; ``None`` where vLLM does not report it (GPU
    #: vLLM sizes the cache from ``gpu_memory_utilization`` and leaves it unset).
    memory_bytes: int | None
    #: ``enable_prefix_caching`` as the server reports it (None: not reported).
    prefix_caching: bool | None = None

    @property
    def capacity_tokens(self) -> int:
        return self.block_size * self.num_blocks


def _parse_chunk(data: str) -> dict[str, Any]:
    """One ``data:`` payload of vLLM's stream; an ``error`` object or bad JSON is a 502."""
    try:
        chunk = json.loads(data)
    except ValueError:
        raise LLMBadResponseError(f"vLLM sent a line that is not JSON: {data[:200]!r}") from None
    if not isinstance(chunk, dict):
        raise LLMBadResponseError(f"vLLM sent a chunk that is not an object: {data[:200]!r}")
    if chunk.get("error"):
        raise LLMBadResponseError(f"vLLM reported an error mid-stream: {data[:500]}")
    return chunk


def _usage(raw: dict[str, Any] | None) -> Usage:
    raw = raw or {}
    details = raw.get("prompt_tokens_details")
    reported = isinstance(details, dict) and "cached_tokens" in details
    return Usage(
        prompt_tokens=int(raw.get("prompt_tokens") or 0),
        completion_tokens=int(raw.get("completion_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0,
        cached_reported=reported,
    )


#: ``VLLMClient._post_json``'s answer for a route the server does not have.
_ABSENT: dict[str, Any] = {}


def _usage_of(answer: dict[str, Any] | None) -> Usage:
    """The ``usage`` of a non-streamed answer."""
    raw = answer.get("usage") if answer else None
    return _usage(raw if isinstance(raw, dict) else None)


class LLMEngine(Protocol):
    """What warmrag needs of a vLLM server (chat, warmup, readiness)."""

    def stream_chat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        temperature: float,
        frequency_penalty: float = 0.0,
        prefix_key: str | None = None,
    ) -> AsyncIterator[TextDelta | Usage]:
        """Yield text deltas as they are generated, then one ``Usage``.

        ``frequency_penalty``: OpenAI's (it penalizes a token by how often the answer
        has used it; the prompt's own tokens are not penalized). ``prefix_key``: the
        fingerprint of the prompt's prefix, computed once by the caller; a pool of
        replicas routes by it, a single server ignores it."""
        ...

    async def prefill(
        self,
        messages: Sequence[Message],
        *,
        max_prompt_tokens: int | None = None,
        prefix_key: str | None = None,
        touch: bool = False,
    ) -> Usage:
        """Compute and cache the KV blocks of a prompt prefix; ``max_prompt_tokens``:
        only its first tokens (a prefix longer than warmup's per-entry share).
        ``touch``: the prefix is cached and is sent to refresh it (``warmup.keeper``)."""
        ...

    async def cache_config(self) -> CacheConfig: ...

    async def kv_usage(self) -> float: ...

    async def is_healthy(self) -> bool: ...

    async def aclose(self) -> None: ...


class VLLMClient:
    """Async HTTP client for one vLLM server."""

    def __init__(self, base_url: str, model: str, timeout_s: float = 300.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._http = httpx.AsyncClient(
            base_url=self.base_url, timeout=httpx.Timeout(timeout_s, connect=5.0)
        )
        # Health and metrics get their own connections: a chat pool full of hung
        # streams must not make /ready (or the warm budget's KV reading) hang too.
        self._probe = httpx.AsyncClient(base_url=self.base_url, timeout=5.0)
        self._cache_config: CacheConfig | None = None
        self._no_tokenize = False  # the server answered /tokenize with 404

    async def aclose(self) -> None:
        await self._http.aclose()
        await self._probe.aclose()

    async def is_healthy(self) -> bool:
        try:
            return (await self._probe.get("/health", timeout=3.0)).status_code == 200
        except httpx.HTTPError:
            return False

    def _chat_body(self, messages: Sequence[Message], **extra: Any) -> dict[str, Any]:
        return {"model": self.model, "messages": list(messages), **extra}

    async def stream_chat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        temperature: float,
        frequency_penalty: float = 0.0,
        prefix_key: str | None = None,
    ) -> AsyncIterator[TextDelta | Usage]:
        """Yield text deltas as vLLM produces them, then one ``Usage``."""
        body = self._chat_body(
            messages,
            max_tokens=max_tokens,
            temperature=temperature,
            **({"frequency_penalty": frequency_penalty} if frequency_penalty else {}),
            stream=True,
            stream_options={"include_usage": True},
        )
        done = False
        try:
            async with self._http.stream("POST", "/v1/chat/completions", json=body) as resp:
                await self._raise_for_status(resp)
                async for event in EventSource(resp).aiter_sse():
                    data = event.data.strip()
                    if not data:
                        continue  # an event with no data (a keep-alive)
                    if data == "[DONE]":
                        done = True
                        break
                    chunk = _parse_chunk(data)
                    for choice in chunk.get("choices") or []:
                        text = ((choice or {}).get("delta") or {}).get("content")
                        if isinstance(text, str) and text:
                            yield TextDelta(text)
                    if chunk.get("usage"):
                        yield _usage(chunk["usage"])
        except SSEError as exc:
            raise LLMBadResponseError(f"vLLM's chat stream is not an event stream: {exc}") from exc
        except httpx.HTTPError as exc:
            raise LLMUnavailableError(f"vLLM at {self.base_url} is unreachable: {exc!r}") from exc
        if not done:
            # The connection closed before vLLM said it was finished (a crash mid-answer).
            raise LLMUnavailableError("vLLM's stream ended before [DONE]")

    async def prefill(
        self,
        messages: Sequence[Message],
        *,
        max_prompt_tokens: int | None = None,
        prefix_key: str | None = None,
        touch: bool = False,
    ) -> Usage:
        """Compute and cache the KV blocks of ``messages`` (a prompt prefix).

        The chat template is applied without a generation prompt, so the tokens
        are an exact prefix of any chat that continues these messages. With
        ``max_prompt_tokens``, a longer prefix is cut to its first tokens: vLLM
        caches by block, so the leading blocks of a cut prefix are the same blocks a
        chat on the whole prefix reuses. vLLM's chat route cannot cut a prompt at
        its end (``truncate_prompt_tokens`` keeps the last tokens), so a cut prefix
        is counted by ``/tokenize`` and sent to ``/v1/completions`` as token ids.

        ``touch``: the prefix is cached, and is sent so that vLLM reuses, and so moves
        to the far end of its LRU, every one of its full blocks. vLLM always computes
        a prompt's last token, so a prefix sent alone that ends on a block boundary
        (as aligned prefixes do) would leave its last block where it was, to be
        evicted first (measured on the hot-set benchmark: re-touched entries kept
        losing their last block). A touch therefore sends a few tokens more: the
        generation prompt, or the cut prefix's next token.
        """
        if max_prompt_tokens is not None and not self._no_tokenize:
            ids = await self._tokenize(messages)
            if ids is not None and len(ids) > max_prompt_tokens:
                body = {
                    "model": self.model,
                    "prompt": ids[: max_prompt_tokens + int(touch)],
                    "max_tokens": 1,
                    "temperature": 0.0,
                }
                usage = _usage_of(await self._post_json("/v1/completions", body, "a cut prefill"))
                return replace(usage, uncut_tokens=len(ids))
        body = self._chat_body(messages, max_tokens=1, temperature=0.0, add_generation_prompt=touch)
        return _usage_of(await self._post_json("/v1/chat/completions", body, "a prefill"))

    async def prefix_token_ids(self, messages: Sequence[Message]) -> list[int] | None:
        """The token ids a prefill of ``messages`` sends (None: no ``/tokenize``)."""
        return None if self._no_tokenize else await self._tokenize(messages)

    async def _tokenize(self, messages: Sequence[Message]) -> list[int] | None:
        """The token ids of ``messages`` rendered as a prefix (no generation prompt).

        None where the server has no ``/tokenize`` (asked once): a prefix then cannot
        be cut, and is prefilled whole, as the aligner leaves it unaligned."""
        body = self._chat_body(messages, add_generation_prompt=False)
        answer = await self._post_json("/tokenize", body, "a tokenize request", absent_ok=True)
        if answer is _ABSENT:
            self._no_tokenize = True
            log.warning("vLLM at %s has no /tokenize: prefixes are warmed whole", self.base_url)
            return None
        tokens = answer.get("tokens") if answer else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise LLMBadResponseError("vLLM's /tokenize answer has no token ids")
        return tokens

    async def _post_json(
        self, path: str, body: dict[str, Any], what: str, *, absent_ok: bool = False
    ) -> dict[str, Any] | None:
        """POST ``body`` and return the JSON object answered (None: not an object;
        ``_ABSENT`` for a 404 where ``absent_ok``: the server has no such route)."""
        try:
            resp = await self._http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise LLMUnavailableError(f"vLLM at {self.base_url} is unreachable: {exc!r}") from exc
        if absent_ok and resp.status_code == 404:
            return _ABSENT
        await self._raise_for_status(resp)
        try:
            answer = resp.json()
        except ValueError:
            raise LLMBadResponseError(f"vLLM answered {what} with non-JSON") from None
        return answer if isinstance(answer, dict) else None

    async def _raise_for_status(self, resp: httpx.Response) -> None:
        if resp.status_code < 400:
            return
        await resp.aread()
        detail = resp.text[:500]
        if resp.status_code < 500:
            raise LLMRequestError(f"vLLM rejected the request ({resp.status_code}): {detail}")
        raise LLMUnavailableError(f"vLLM failed ({resp.status_code}): {detail}")

    async def metrics_text(self) -> str:
        try:
            resp = await self._probe.get("/metrics", timeout=5.0)
            resp.raise_for_status()
        except httpx.HTTPError as exc:
            raise LLMUnavailableError(f"vLLM metrics unavailable: {exc!r}") from exc
        return resp.text

    async def metrics(self) -> VLLMMetrics:
        """One reading of vLLM's ``/metrics``, parsed (``rag.llm.server_metrics``)."""
        return parse_vllm_metrics(await self.metrics_text())

    async def cache_config(self) -> CacheConfig:
        """Block size, block count and memory of vLLM's KV cache (read once).

        Raises ``MissingMetricError`` without ``vllm:cache_config_info`` and
        ``CacheCapacityUnknownError`` when vLLM does not report its block count.
        """
        if self._cache_config is None:
            facts = (await self.metrics()).require_cache()
            self._cache_config = CacheConfig(
                block_size=facts.block_size,
                num_blocks=facts.require_blocks(),
                memory_bytes=facts.kv_cache_memory_bytes,
                prefix_caching=facts.enable_prefix_caching,
            )
        return self._cache_config

    async def block_size(self) -> int:
        return (await self.cache_config()).block_size

    async def kv_usage(self) -> float:
        """Share of KV-cache blocks in use (0..1), the mean over engines; 0 where vLLM
        exports no usage gauge."""
        usage = (await self.metrics()).kv_usage
        return 0.0 if usage is None else usage

    async def reset_prefix_cache(self) -> None:
        """Empty vLLM's prefix cache (needs VLLM_SERVER_DEV_MODE=1 on the server)."""
        try:
            resp = await self._http.post("/reset_prefix_cache")
        except httpx.HTTPError as exc:
            raise LLMUnavailableError(f"vLLM at {self.base_url} is unreachable: {exc!r}") from exc
        await self._raise_for_status(resp)
