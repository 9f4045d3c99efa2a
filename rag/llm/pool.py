"""Several vLLM replicas behind one ``LLMEngine``, routed by prompt prefix (the cold-start
design's router).

``ReplicaPool`` sends each chat and prefill to the replica ``rag.llm.placement.PrefixPlacement``
chooses for the prefix key its caller passes (the prompt's fingerprint, which the chat
engine and warmup computed once and the warm registry keys by), so a prefix warmed on a
replica is reused there; a request with no key is placed by load alone.
A replica that fails before answering (``LLMUnavailableError`` before the first event)
is marked down and the request is retried once on the next-ranked replica; once text
has streamed the error is the caller's, as a retry would repeat it. ``check_health``
polls the replicas, feeds their KV usage to the router and reports each replica that
went down, came up or came back, once per change, so warmup can re-warm it.

With one replica the pool passes everything through (and names it in ``Usage``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from rag.llm.client import (
    CacheConfig,
    LLMEngine,
    LLMError,
    LLMTimeoutError,
    LLMUnavailableError,
    Message,
    TextDelta,
    Usage,
)
from rag.llm.metrics import ReplicaMetrics
from rag.llm.placement import (
    PrefixPlacement,
    ReplicaSnapshot,
    Route,
    RouteKind,
    RoutingPolicy,
    Transition,
    TransitionKind,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class ReplicaConfigError(LLMError):
    """The replicas disagree on something the pool needs to be the same (block size)."""

    public = "vLLM replicas are configured inconsistently"


@dataclass(frozen=True, eq=False)
class Replica:
    """One vLLM server: a short name for logs, metrics and placements ("r0",
    "host:port"), and the engine that talks to it."""

    name: str
    engine: LLMEngine


@dataclass(frozen=True)
class PoolSnapshot:
    policy: RoutingPolicy
    replicas: tuple[ReplicaSnapshot, ...]
    #: Prefixes the pool remembers as warm on some replica.
    affinity_entries: int

    @property
    def up(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.replicas if r.up)


@dataclass(frozen=True)
class HealthReport:
    """What changed since the last report (including replicas a failed request
    marked down in between), and the replicas as they are now."""

    transitions: tuple[Transition, ...]
    replicas: tuple[ReplicaSnapshot, ...]

    def _names(self, kind: TransitionKind) -> tuple[str, ...]:
        return tuple(t.replica for t in self.transitions if t.kind is kind)

    @property
    def went_down(self) -> tuple[str, ...]:
        return self._names(TransitionKind.WENT_DOWN)

    @property
    def came_up(self) -> tuple[str, ...]:
        return self._names(TransitionKind.CAME_UP)

    @property
    def came_back(self) -> tuple[str, ...]:
        return self._names(TransitionKind.CAME_BACK)


class ReplicaPool:
    """``LLMEngine`` over several vLLM replicas, routed by prompt prefix."""

    def __init__(
        self,
        replicas: Sequence[Replica],
        *,
        policy: RoutingPolicy = RoutingPolicy.AFFINITY,
        burst_headroom: float = 0.10,
        usage_step: float = 0.05,
        affinity_max_entries: int = 100_000,
        metrics: ReplicaMetrics | None = None,
        down_after_checks: int = 3,
    ) -> None:
        """``down_after_checks``: failed health checks in a row that mark a replica down."""
        self.replicas = tuple(replicas)
        self.down_after_checks = down_after_checks
        self.placement = PrefixPlacement(
            [r.name for r in self.replicas],
            policy=policy,
            burst_headroom=burst_headroom,
            usage_step=usage_step,
            affinity_max_entries=affinity_max_entries,
        )
        self._engines = {r.name: r.engine for r in self.replicas}
        self._metrics = metrics
        if metrics is not None:
            metrics.add_replicas(self.placement.names)
        self._pending: list[Transition] = []
        self._failed_checks = {r.name: 0 for r in self.replicas}

    # ----- routing ---------------------------------------------------------------------

    def where(self, fingerprint: str | None) -> str | None:
        """The replica a request on this prefix would go to now (nothing changes)."""
        route = self.placement.choose(fingerprint) or self.placement.choose(
            fingerprint, include_down=True
        )
        return route.replica if route else None

    def pin(self, fingerprint: str, replica: str) -> None:
        """Remember ``fingerprint`` as warm on ``replica`` (restoring placements)."""
        self.placement.pin(fingerprint, replica)

    def forget(self, replica: str) -> int:
        """Forget every prefix remembered on ``replica`` (its cache is gone); how many."""
        return self.placement.forget(replica)

    def _first_route(self, fingerprint: str | None) -> Route:
        route = self.placement.choose(fingerprint)
        if route is None:  # every replica is marked down; the marks may be stale
            route = self.placement.choose(fingerprint, include_down=True)
        assert route is not None  # the router has at least one replica
        self.placement.count(route)
        if self._metrics is not None:
            self._metrics.route(route)
        return route

    def _failover(
        self, fingerprint: str | None, failed: Route, exc: LLMUnavailableError
    ) -> Route | None:
        """After ``failed`` did not answer: mark it down and pick the retry, if any."""
        if isinstance(exc, LLMTimeoutError) or failed.kind is RouteKind.FAILOVER:
            return None  # the chat's deadline passed, or this was the retry already
        self.mark_down(failed.replica)
        chosen = self.placement.choose(fingerprint, exclude={failed.replica})
        if chosen is None:
            return None
        retry = Route(chosen.replica, RouteKind.FAILOVER)
        self.placement.count(retry)
        if self._metrics is not None:
            self._metrics.route(retry)
        log.warning(
            "vLLM replica %s failed (%s); retrying on %s", failed.replica, exc, retry.replica
        )
        return retry

    # ----- LLMEngine -------------------------------------------------------------------

    async def stream_chat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        temperature: float,
        frequency_penalty: float = 0.0,
        prefix_key: str | None = None,
    ) -> AsyncIterator[TextDelta | Usage]:
        """The chosen replica's stream, its ``Usage`` naming the replica."""
        fingerprint = prefix_key
        route = self._first_route(fingerprint)
        while True:
            events = self._engines[route.replica].stream_chat(
                messages,
                max_tokens=max_tokens,
                temperature=temperature,
                frequency_penalty=frequency_penalty,
            )
            started = False
            try:
                async for event in events:
                    if isinstance(event, Usage):
                        event = replace(event, replica=route.replica)
                        if self._metrics is not None:
                            self._metrics.chat(route.replica, event)
                    started = True
                    yield event
            except LLMUnavailableError as exc:
                retry = None if started else self._failover(fingerprint, route, exc)
                if retry is None:
                    raise
                route = retry
                continue
            finally:
                await _aclose(events)
            self.placement.served(fingerprint, route.replica)
            return

    async def prefill(
        self,
        messages: Sequence[Message],
        *,
        max_prompt_tokens: int | None = None,
        prefix_key: str | None = None,
        touch: bool = False,
    ) -> Usage:
        """Prefill on the replica this prefix routes to; ``Usage.replica`` says which."""
        fingerprint = prefix_key
        route = self._first_route(fingerprint)
        while True:
            try:
                engine = self._engines[route.replica]
                usage = await engine.prefill(
                    messages, max_prompt_tokens=max_prompt_tokens, touch=touch
                )
            except LLMUnavailableError as exc:
                retry = self._failover(fingerprint, route, exc)
                if retry is None:
                    raise
                route = retry
                continue
            self.placement.served(fingerprint, route.replica)
            return replace(usage, replica=route.replica)

    async def cache_config(self) -> CacheConfig:
        """The pool's cache: block sizes must agree, capacity is the sum, memory the
        smallest replica's (``None`` if any does not report it). Replicas that cannot
        be reached are left out (the capacity is then an underestimate)."""
        configs = await self._gather(lambda e: e.cache_config(), "cache configuration")
        sizes = {name: c.block_size for name, c in configs.items()}
        if len(set(sizes.values())) > 1:
            listed = ", ".join(f"{name}: {size}" for name, size in sizes.items())
            raise ReplicaConfigError(
                f"vLLM replicas use different KV block sizes ({listed}); start them alike"
            )
        memories = [c.memory_bytes for c in configs.values()]
        caching = {c.prefix_caching for c in configs.values()}
        return CacheConfig(
            prefix_caching=False if False in caching else (True if caching == {True} else None),
            block_size=next(iter(sizes.values())),
            num_blocks=sum(c.num_blocks for c in configs.values()),
            memory_bytes=None if None in memories else min(m for m in memories if m is not None),
        )

    async def kv_usage(self) -> float:
        """Mean KV usage over the replicas that are up (all, if none is marked up)."""
        names = [n for n in self.placement.names if self.placement.is_up(n)] or None
        readings = await self._gather(lambda e: e.kv_usage(), "KV usage", names)
        for name, usage in readings.items():
            self._record_usage(name, usage)
        return sum(readings.values()) / len(readings)

    async def is_healthy(self) -> bool:
        """True while any replica answers its health check."""
        return any(await asyncio.gather(*(self._healthy(r) for r in self.replicas)))

    async def aclose(self) -> None:
        results = await asyncio.gather(
            *(r.engine.aclose() for r in self.replicas), return_exceptions=True
        )
        for replica, result in zip(self.replicas, results, strict=True):
            if isinstance(result, Exception):
                log.warning("closing vLLM replica %s failed: %r", replica.name, result)

    async def _gather(
        self,
        call: Callable[[LLMEngine], Awaitable[T]],
        what: str,
        names: Sequence[str] | None = None,
    ) -> dict[str, T]:
        """``call`` on each replica at once; the answers by name, leaving out replicas
        that are unavailable (re-raising when none answered: with one replica, its own
        error). Any other error is raised."""
        chosen = [r for r in self.replicas if names is None or r.name in names]
        results = await asyncio.gather(*(call(r.engine) for r in chosen), return_exceptions=True)
        answers: dict[str, T] = {}
        unavailable: list[LLMUnavailableError] = []
        for replica, result in zip(chosen, results, strict=True):
            if isinstance(result, LLMUnavailableError):
                log.warning("vLLM replica %s gave no %s: %s", replica.name, what, result)
                unavailable.append(result)
            elif isinstance(result, BaseException):
                raise result
            else:
                answers[replica.name] = result
        if not answers:
            raise unavailable[0]
        return answers

    # ----- health ------------------------------------------------------------------------

    def mark_down(self, replica: str) -> None:
        self._set_up(replica, False)

    def _set_up(self, name: str, up: bool) -> None:
        transition = self.placement.set_up(name, up)
        if transition is None:
            return
        self._pending.append(transition)
        if self._metrics is not None:
            self._metrics.transition(transition)
        level = logging.WARNING if transition.kind is TransitionKind.WENT_DOWN else logging.INFO
        log.log(level, "vLLM replica %s %s", name, transition.kind.value.replace("_", " "))

    def _record_usage(self, name: str, usage: float) -> None:
        self.placement.set_usage(name, usage)
        if self._metrics is not None:
            self._metrics.record_kv_usage(name, usage)

    async def _healthy(self, replica: Replica) -> bool:
        try:
            return await replica.engine.is_healthy()
        except Exception:  # a probe must not take the health loop down
            log.exception("health check of vLLM replica %s failed", replica.name)
            return False

    async def _probe(self, replica: Replica) -> tuple[bool, float | None]:
        if not await self._healthy(replica):
            return False, None
        try:
            return True, await replica.engine.kv_usage()
        except LLMError as exc:  # healthy but no reading: keep the last one
            log.warning("vLLM replica %s gave no KV usage: %s", replica.name, exc)
            return True, None

    async def check_health(self) -> HealthReport:
        """Poll every replica's health and KV usage; report what changed since the
        last report, each change once."""
        probes = await asyncio.gather(*(self._probe(r) for r in self.replicas))
        for replica, (up, usage) in zip(self.replicas, probes, strict=True):
            if usage is not None:
                self._record_usage(replica.name, usage)
            # One slow /health is not a dead replica: vLLM answers it late while its
            # one CPU core runs a long prefill (seen on vLLM-CPU). A request that
            # fails to connect marks it down at once (``_failover``).
            failed = 0 if up else self._failed_checks[replica.name] + 1
            self._failed_checks[replica.name] = failed
            if up or failed >= self.down_after_checks:
                self._set_up(replica.name, up)
        transitions, self._pending = tuple(self._pending), []
        return HealthReport(transitions, self.placement.snapshot())

    def snapshot(self) -> PoolSnapshot:
        return PoolSnapshot(
            self.placement.policy, self.placement.snapshot(), len(self.placement.affinity)
        )


async def _aclose(events: AsyncIterator[TextDelta | Usage]) -> None:
    """Close an engine's stream early (its HTTP response with it), if it can be."""
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()
