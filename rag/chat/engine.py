"""The chat path: retrieve → build the prompt → stream from vLLM → account the cache."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

import anyio

from rag.chat.bad_cases import BadCaseLog
from rag.chat.memo import ContextMemo, Retrieved, retrieve_context
from rag.chat.metrics import ChatMetrics
from rag.chat.prompt import Message, PromptBuilder, PromptPrefix
from rag.chat.query import normalize_query
from rag.chat.repetition import RepeatGuard
from rag.chat.results import CacheInfo, ChatResult, FinishReason, Timings, WarmState
from rag.chat.retriever import Retrieval, Retriever
from rag.llm.client import (
    LLMBadResponseError,
    LLMEngine,
    LLMRequestError,
    LLMTimeoutError,
    LLMUnavailableError,
    TextDelta,
    Usage,
)


class ChatObserver(Protocol):
    """Told about every finished chat (the warmup layer counts hot queries and hits)."""

    def on_chat(
        self, query_key: str, retrieval: Retrieval, prefix: PromptPrefix, usage: Usage
    ) -> WarmState:
        """Record the chat (``query_key``: its question's ``normalize_query`` key);
        return how its prefix stood against the warm registry."""
        ...


class ChatActivity:
    """Counts chats in flight, so background prefills can yield to them, and knows which
    context prefixes chats are prefilling (until their first token)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._clock = clock
        self._last_exit = -math.inf
        self._prefilling: Counter[str] = Counter()
        self._prefilled: dict[str, asyncio.Event] = {}

    def begin_prefill(self, fingerprint: str) -> None:
        """A chat sent a prompt on the context prefix ``fingerprint``."""
        self._prefilling[fingerprint] += 1
        self._prefilled.setdefault(fingerprint, asyncio.Event())

    def end_prefill(self, fingerprint: str) -> None:
        """That chat's first token came (or it ended without one)."""
        self._prefilling[fingerprint] -= 1
        if self._prefilling[fingerprint] <= 0:
            del self._prefilling[fingerprint]
            self._prefilled.pop(fingerprint).set()

    def is_prefilling(self, fingerprint: str) -> bool:
        return fingerprint in self._prefilling

    async def wait_prefilled(self, fingerprint: str, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until no chat is prefilling ``fingerprint``; True
        if none is. A chat's prefill leaves its prefix in vLLM's cache, so a warming
        prefill sent after it costs next to nothing, where one sent beside it computes
        the same blocks a second time and slows the chat: measured on the real corpus,
        a chat that shared the CPU with a re-warm of its own context took 7.7 s to its
        first token, against about 3.5 s alone."""
        done = self._prefilled.get(fingerprint)
        if done is None:
            return True
        try:
            await asyncio.wait_for(done.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    @property
    def active(self) -> int:
        return self._active

    def enter(self) -> None:
        self._active += 1
        self._idle.clear()

    def exit(self) -> None:
        self._active -= 1
        self._last_exit = self._clock()
        if self._active == 0:
            self._idle.set()

    async def wait_idle(self, timeout_s: float, quiet_s: float = 0.0) -> bool:
        """Wait until no chat is running and none ended in the last ``quiet_s`` (a
        back-to-back client sends its next chat within milliseconds); at most
        ``timeout_s``. True if the quiet came."""
        deadline = self._clock() + timeout_s
        while True:
            remaining = deadline - self._clock()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._idle.wait(), remaining)
            except TimeoutError:
                return False
            calm = self._clock() - self._last_exit
            if calm >= quiet_s:
                return True
            await asyncio.sleep(min(quiet_s - calm, max(0.0, deadline - self._clock())))


async def _within(
    events: AsyncIterator[TextDelta | Usage], deadline: float
) -> AsyncIterator[TextDelta | Usage]:
    """Pass ``events`` through until ``deadline`` (a ``perf_counter`` time), then give up."""
    try:
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise LLMTimeoutError("vLLM did not finish the answer within the chat deadline")
            try:
                event = await asyncio.wait_for(anext(events), remaining)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise LLMTimeoutError(
                    "vLLM did not finish the answer within the chat deadline"
                ) from None
            yield event
    finally:
        await events.aclose()  # type: ignore[attr-defined]


def _finish_reason(repeated: bool, at_limit: bool) -> FinishReason:
    if repeated:
        return FinishReason.REPEAT
    return FinishReason.LENGTH if at_limit else FinishReason.STOP


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 2)


class ChatEngine:
    """Answers questions; chat and the OpenAI-compatible route both go through it."""

    def __init__(
        self,
        retriever: Retriever,
        builder: PromptBuilder,
        llm: LLMEngine,
        metrics: ChatMetrics,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        frequency_penalty: float = 0.0,
        stop_on_repeat: bool = True,
        observer: ChatObserver | None = None,
        deadline_s: float = 300.0,
        available: Callable[[], bool] = lambda: True,
        memo: ContextMemo | None = None,
        memo_top_k: int = 3,
        bad_cases: BadCaseLog | None = None,
        activity: ChatActivity | None = None,
    ) -> None:
        """``deadline_s`` bounds a whole answer (a hung vLLM can trickle forever under a
        per-read timeout); ``available`` says False while vLLM is being restarted.
        ``memo``: contexts of repeated questions (asked with ``memo_top_k``) are reused
        from it, with no retrieval (``rag.chat.memo``). ``bad_cases``: where slow chats
        and evicted warm prefixes are kept (``rag.chat.bad_cases``). ``activity``: the
        chats in flight, shared with whatever yields to them (warmup's prefills).
        ``frequency_penalty`` and ``stop_on_repeat`` keep an answer from looping
        (``rag.chat.repetition``)."""
        self.retriever = retriever
        self.builder = builder
        self.llm = llm
        self.metrics = metrics
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.frequency_penalty = frequency_penalty
        self.stop_on_repeat = stop_on_repeat
        self.observer = observer
        self.deadline_s = deadline_s
        self.available = available
        self.memo = memo
        self.memo_top_k = memo_top_k
        self.bad_cases = bad_cases
        self.activity = activity or ChatActivity()

    async def context(self, question: str, key: str, top_k: int) -> tuple[Retrieved, Timings]:
        """The question's retrieval and prefix (``key``: its ``normalize_query`` key):
        remembered, or retrieved now (and then remembered unless a change landed
        meanwhile). Timings hold the first three parts."""
        memo = self.memo if top_k == self.memo_top_k else None
        started = time.perf_counter()
        remembered = memo.get(key) if memo is not None else None
        if remembered is not None:
            self.metrics.context_memo.labels("reused").inc()
            return remembered, Timings(
                retrieval_ms=_ms(started), ttft_ms=0.0, total_ms=0.0, context_reused=True
            )
        generation = memo.generation if memo is not None else 0
        found, prompt_ms = await anyio.to_thread.run_sync(
            retrieve_context, self.retriever, self.builder, question, top_k
        )
        if memo is not None:
            memo.put(key, generation, found)
        self.metrics.context_memo.labels("retrieved").inc()
        self.metrics.retrieval_latency.observe(found.retrieval.elapsed_ms / 1000)
        return found, Timings(
            retrieval_ms=round(found.retrieval.elapsed_ms, 2),
            ttft_ms=0.0,
            total_ms=0.0,
            prompt_ms=prompt_ms,
        )

    async def stream(
        self,
        question: str,
        *,
        top_k: int = 3,
        history: Sequence[Message] = (),
        max_tokens: int | None = None,
        temperature: float | None = None,
        endpoint: str = "chat",
    ) -> AsyncIterator[TextDelta | ChatResult]:
        """Yield answer text as it is generated, then one ``ChatResult``.

        Timings start at the call: ``ttft_ms`` includes retrieval, as a user sees it.
        """
        started = time.perf_counter()
        outcome = "error"
        ttft_ms: float | None = None
        observed = False
        prefilling: str | None = None  # the context prefix, until the first event
        if not self.available():
            self.metrics.requests.labels(endpoint, "llm_unavailable").inc()
            raise LLMUnavailableError("vLLM is restarting")
        self.activity.enter()
        try:
            key = normalize_query(question)  # the one query key of this chat
            found, before_llm = await self.context(question, key, top_k)
            retrieval = found.retrieval
            prompt = self.builder.with_question(found.prefix, question, history)
            prefilling = prompt.prefix.fingerprint
            self.activity.begin_prefill(prefilling)
            llm_started = time.perf_counter()
            llm_ttft_ms = 0.0
            parts: list[str] = []
            usage = Usage()
            llm_events = self.llm.stream_chat(
                prompt.messages,
                max_tokens=max_tokens or self.max_tokens,
                temperature=self.temperature if temperature is None else temperature,
                frequency_penalty=self.frequency_penalty,
                prefix_key=prompt.prefix.fingerprint,
            )
            # A tripped guard shows nothing more, but the stream is read to its end:
            # vLLM reports the cached tokens (the warm state) only in its last chunk.
            guard = RepeatGuard() if self.stop_on_repeat else None
            async for event in _within(llm_events, started + self.deadline_s):
                if prefilling is not None:
                    self.activity.end_prefill(prefilling)
                    prefilling = None
                if isinstance(event, TextDelta):
                    shown = guard.feed(event.text) if guard else event.text
                    if not shown:
                        continue
                    if ttft_ms is None:
                        ttft_ms, llm_ttft_ms = _ms(started), _ms(llm_started)
                    parts.append(shown)
                    yield TextDelta(shown)
                else:
                    usage = event
            if guard is not None and (rest := guard.flush()):
                if ttft_ms is None:
                    ttft_ms, llm_ttft_ms = _ms(started), _ms(llm_started)
                parts.append(rest)
                yield TextDelta(rest)
            total_ms = _ms(started)
            if ttft_ms is None:  # an empty answer: the first "token" is the end
                ttft_ms, llm_ttft_ms = total_ms, _ms(llm_started)
            warm_state = (
                self.observer.on_chat(key, retrieval, prompt.prefix, usage)
                if self.observer
                else WarmState.COLD
            )
            # Observed at the end, when vLLM's usage says whether the prefix was warm.
            self.metrics.observe_first_token(ttft_ms / 1000, warm_state is WarmState.HIT)
            observed = True
            self.metrics.prompt_tokens.inc(usage.prompt_tokens)
            self.metrics.cached_tokens.inc(usage.cached_tokens)
            if self.bad_cases is not None:
                case = self.bad_cases.record(
                    question=question,
                    query_key=key,
                    embedding=retrieval.embedding,
                    context_fingerprint=prompt.prefix.fingerprint,
                    warm_state=warm_state,
                    prompt_tokens=usage.prompt_tokens,
                    cached_tokens=usage.cached_tokens,
                    ttft_ms=ttft_ms,
                    retrieval_ms=before_llm.retrieval_ms,
                    llm_ttft_ms=llm_ttft_ms,
                )
                for reason in case.reasons if case else ():
                    self.metrics.bad_cases.labels(reason.value).inc()
            cache = CacheInfo(
                prompt_tokens=usage.prompt_tokens,
                cached_tokens=usage.cached_tokens,
                prefix_tokens=prompt.prefix.tokens,
                warm_state=warm_state,
            )
            self.metrics.served.labels(cache.served.value).inc()
            outcome = "ok"
            yield ChatResult(
                answer="".join(parts),
                passages=retrieval.passages,
                facts=retrieval.facts,
                cache=cache,
                timings=before_llm.model_copy(
                    update={"ttft_ms": ttft_ms, "total_ms": total_ms, "llm_ttft_ms": llm_ttft_ms}
                ),
                usage=usage,
                prefix_fingerprint=prompt.prefix.fingerprint,
                finish_reason=_finish_reason(
                    guard is not None and guard.tripped,
                    usage.completion_tokens >= (max_tokens or self.max_tokens),
                ),
            )
        except LLMTimeoutError:
            outcome = "llm_timeout"
            raise
        except LLMUnavailableError:
            outcome = "llm_unavailable"
            raise
        except LLMBadResponseError:
            outcome = "llm_bad_response"
            raise
        except LLMRequestError:
            outcome = "rejected"
            raise
        finally:
            if ttft_ms is not None and not observed:
                # Cut off after its first token (deadline, vLLM failure, client gone):
                # its latency counts, as not served warm.
                self.metrics.observe_first_token(ttft_ms / 1000, False)
            if prefilling is not None:
                self.activity.end_prefill(prefilling)
            self.activity.exit()
            self.metrics.requests.labels(endpoint, outcome).inc()

    async def answer(
        self,
        question: str,
        *,
        top_k: int = 3,
        history: Sequence[Message] = (),
        max_tokens: int | None = None,
        temperature: float | None = None,
        endpoint: str = "chat",
    ) -> ChatResult:
        """The whole answer at once (vLLM is still streamed, to measure TTFT)."""
        events = self.stream(
            question,
            top_k=top_k,
            history=history,
            max_tokens=max_tokens,
            temperature=temperature,
            endpoint=endpoint,
        )
        result: ChatResult | None = None
        async for event in events:
            if isinstance(event, ChatResult):
                result = event
        if result is None:  # stream() always ends with a result or raises
            raise RuntimeError("chat stream ended without a result")
        return result
