"""Where a prompt prefix goes among vLLM replicas (the cold-start design's router, the
decision part).

A prefix is cheap only on the replica that holds its KV blocks, so the same prefix
must keep going to the same replica:

- Cold prefixes are placed by weighted rendezvous (highest random weight) hashing on
  the prefix fingerprint: each replica scores ``-w / ln(u)``, ``u`` a hash of
  (fingerprint, replica) in (0, 1), and the highest score wins. With equal weights
  adding a replica moves only the ~1/N keys it now wins, and never a key between two
  old replicas. The weight ``1 - usage²`` (KV usage rounded to ``usage_step``, so small
  fluctuations do not reshuffle cold keys) sends fewer new prefixes to a fuller replica.
- Burst headroom: a replica with less than ``burst_headroom`` of its cache free takes
  no new cold prefixes; they go to the next-ranked one (if every replica is that full,
  the top-ranked one still takes it).
- Affinity memory: a prefix served (chat or prefill) on a replica is warm there and
  goes there while it is up; a bounded LRU map remembers it. A replica marked down is
  skipped (its prefixes go to their next-ranked replica, and stay there once served);
  when it comes back nothing moves eagerly: only new cold prefixes rank it again.
- Residency, where the replicas publish KV events (``consult``): a warm entry's blocks
  are known per replica, which is better evidence than the affinity memory. A prefix
  an index holds resident goes to that replica even when the memory forgot it (it is
  bounded, and starts empty after a restart); one whose first block that replica
  evicted is placed as a new prefix, by rank and load, unless the memory saw it served
  on another replica since.

``RoutingPolicy.ROUND_ROBIN`` ignores all of this: the load-balancer baseline.
``rag.llm.pool.ReplicaPool`` applies the decisions to real engines.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

#: A full replica's weight: above zero, so full replicas still rank among themselves.
MIN_WEIGHT = 0.01


class RoutingPolicy(StrEnum):
    AFFINITY = "affinity"
    ROUND_ROBIN = "round_robin"


class RouteKind(StrEnum):
    """Why a request went where it went."""

    WARM = "warm"  # the prefix was served there before
    COLD = "cold"  # first choice by rendezvous rank with headroom to spare
    OVERFLOW = "overflow"  # every up replica was past its headroom: the top-ranked one
    FAILOVER = "failover"  # the chosen replica failed before answering
    ROUND_ROBIN = "round_robin"  # the baseline policy, or a prefix-less request


@dataclass(frozen=True)
class Located:
    """Where a warm entry's KV blocks were filed, and whether its leading block is
    still in that replica's cache (or not known to be gone)."""

    replica: str
    resident: bool


class ResidencyLookup(Protocol):
    """The replicas' KV-event indexes, as the router asks them (``warmup.tracker``)."""

    def locate(self, fingerprint: str) -> Located | None:
        """``None``: no index tracks this prefix (the affinity memory decides)."""
        ...


class ReplicaStatus(StrEnum):
    UNKNOWN = "unknown"  # not probed yet; routed to as if up
    UP = "up"
    DOWN = "down"


class TransitionKind(StrEnum):
    WENT_DOWN = "went_down"
    CAME_UP = "came_up"  # first seen up (its cache starts empty)
    CAME_BACK = "came_back"  # up again after being down (most likely restarted: cold)


@dataclass(frozen=True)
class Route:
    replica: str
    kind: RouteKind


@dataclass(frozen=True)
class Transition:
    replica: str
    kind: TransitionKind


@dataclass(frozen=True)
class RouteCounts:
    """Requests (chats and prefills) routed to one replica, by ``RouteKind``."""

    warm: int = 0
    cold: int = 0
    overflow: int = 0
    failover: int = 0
    round_robin: int = 0

    @property
    def total(self) -> int:
        return self.warm + self.cold + self.overflow + self.failover + self.round_robin


@dataclass(frozen=True)
class ReplicaSnapshot:
    """One replica as the router sees it now (for /ready, logs and benchmarks)."""

    name: str
    status: ReplicaStatus
    kv_usage: float
    weight: float
    routes: RouteCounts

    @property
    def up(self) -> bool:
        return self.status is not ReplicaStatus.DOWN


def unit_interval(key: str, replica: str) -> float:
    """A hash of (key, replica) in the open interval (0, 1): 52 bits, centred."""
    digest = hashlib.blake2b(f"{replica}\x00{key}".encode(), digest_size=8).digest()
    return ((int.from_bytes(digest, "big") >> 12) + 0.5) / 2**52


def hrw_score(key: str, replica: str, weight: float) -> float:
    """Weighted rendezvous score: a replica wins a key with probability ∝ its weight."""
    return -weight / math.log(unit_interval(key, replica))


def quantize(value: float, step: float) -> float:
    """``value`` clamped to 0..1 and rounded to ``step`` (0: not rounded)."""
    value = min(1.0, max(0.0, value))
    return round(round(value / step) * step, 6) if step > 0 else value


def load_weight(kv_usage: float, step: float) -> float:
    """``1 - usage²``: an idle replica weighs 1, a half-full one 0.75, a full one ~0."""
    usage = quantize(kv_usage, step)
    return max(MIN_WEIGHT, 1.0 - usage * usage)


class AffinityMemory:
    """Fingerprint → the replica where that prefix is warm; the least recently used
    entries go first past ``max_entries``."""

    def __init__(self, max_entries: int = 100_000) -> None:
        if max_entries < 1:
            raise ValueError("affinity memory needs room for one entry")
        self.max_entries = max_entries
        self._where: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._where)

    def where(self, fingerprint: str) -> str | None:
        """The replica remembered for ``fingerprint`` (a look, not a use: serving the
        prefix again, ``remember``, is what keeps an entry fresh)."""
        return self._where.get(fingerprint)

    def remember(self, fingerprint: str, replica: str) -> None:
        self._where[fingerprint] = replica
        self._where.move_to_end(fingerprint)
        while len(self._where) > self.max_entries:
            self._where.popitem(last=False)

    def forget(self, replica: str) -> int:
        """Drop every prefix remembered on ``replica`` (its cache was lost)."""
        gone = [fp for fp, name in self._where.items() if name == replica]
        for fp in gone:
            del self._where[fp]
        return len(gone)


@dataclass
class _ReplicaState:
    status: ReplicaStatus = ReplicaStatus.UNKNOWN
    kv_usage: float = 0.0
    weight: float = 1.0
    routes: dict[RouteKind, int] = field(default_factory=lambda: dict.fromkeys(RouteKind, 0))


class PrefixPlacement:
    """Chooses a replica per prefix fingerprint and keeps the state that choice needs
    (status, KV usage, weights, affinity). It does no I/O: the pool feeds it."""

    def __init__(
        self,
        names: Sequence[str],
        *,
        policy: RoutingPolicy = RoutingPolicy.AFFINITY,
        burst_headroom: float = 0.10,
        usage_step: float = 0.05,
        affinity_max_entries: int = 100_000,
    ) -> None:
        if not names:
            raise ValueError("a router needs at least one replica")
        if len(set(names)) != len(names):
            raise ValueError(f"replica names must be unique: {list(names)}")
        if not 0.0 <= burst_headroom < 1.0:
            raise ValueError("burst headroom is a share of the cache, in [0, 1)")
        self.names = tuple(names)
        self.policy = RoutingPolicy(policy)
        self.burst_headroom = burst_headroom
        self.usage_step = usage_step
        self.affinity = AffinityMemory(affinity_max_entries)
        self._states = {name: _ReplicaState() for name in self.names}
        self._turn = 0
        self._residency: ResidencyLookup | None = None

    def consult(self, residency: ResidencyLookup) -> None:
        """Ask ``residency`` before the affinity memory (see the module notes)."""
        self._residency = residency

    # ----- state the pool feeds in -----------------------------------------------------

    def _state(self, name: str) -> _ReplicaState:
        try:
            return self._states[name]
        except KeyError:
            raise ValueError(f"no replica named {name!r} (have {list(self.names)})") from None

    def is_up(self, name: str) -> bool:
        return self._state(name).status is not ReplicaStatus.DOWN

    def set_usage(self, name: str, kv_usage: float) -> None:
        state = self._state(name)
        state.kv_usage = min(1.0, max(0.0, kv_usage))
        state.weight = load_weight(state.kv_usage, self.usage_step)

    def set_up(self, name: str, up: bool) -> Transition | None:
        """Record a replica's health; the transition, if this changes it."""
        state = self._state(name)
        before, state.status = state.status, ReplicaStatus.UP if up else ReplicaStatus.DOWN
        if before is state.status:
            return None
        if not up:
            return Transition(name, TransitionKind.WENT_DOWN)
        kind = TransitionKind.CAME_BACK if before is ReplicaStatus.DOWN else TransitionKind.CAME_UP
        return Transition(name, kind)

    def count(self, route: Route) -> None:
        """``route`` was taken: count it (and move the round-robin turn past it)."""
        self._state(route.replica).routes[route.kind] += 1
        if route.kind is RouteKind.ROUND_ROBIN:
            self._turn = self.names.index(route.replica) + 1

    def served(self, fingerprint: str | None, name: str) -> None:
        """The prefix was served on ``name``: it is warm there now."""
        self._state(name)
        if fingerprint is not None and self.policy is RoutingPolicy.AFFINITY:
            self.affinity.remember(fingerprint, name)

    def pin(self, fingerprint: str, name: str) -> None:
        """Record that ``fingerprint`` is warm on ``name`` (e.g. restored placements)."""
        self._state(name)
        self.affinity.remember(fingerprint, name)

    def forget(self, name: str) -> int:
        self._state(name)
        return self.affinity.forget(name)

    # ----- decisions -----------------------------------------------------------------

    def rank(self, fingerprint: str) -> list[str]:
        """Every replica, best first for this fingerprint, by weighted rendezvous score."""
        return sorted(
            self.names,
            key=lambda n: (-hrw_score(fingerprint, n, self._states[n].weight), n),
        )

    def choose(
        self,
        fingerprint: str | None,
        *,
        exclude: Collection[str] = (),
        include_down: bool = False,
    ) -> Route | None:
        """Where a request with this prefix would go; ``None`` when no replica qualifies.
        Nothing changes until the pool ``count``s the route and reports it ``served``.

        ``fingerprint`` ``None`` is a request without a prefix: nothing to keep warm,
        so it is spread round-robin. ``include_down`` lets replicas marked down be
        chosen (every one is, and the marks may be stale).
        """
        allowed = [n for n in self.names if n not in exclude and (include_down or self.is_up(n))]
        if not allowed:
            return None
        if fingerprint is None or self.policy is RoutingPolicy.ROUND_ROBIN:
            return Route(self._next_in_turn(allowed), RouteKind.ROUND_ROBIN)
        known = self.affinity.where(fingerprint)
        located = self._residency.locate(fingerprint) if self._residency is not None else None
        if located is not None and located.replica in allowed:
            if located.resident:
                known = located.replica
            elif known == located.replica:
                known = None  # evicted there: the memory is stale
        if known in allowed:
            return Route(known, RouteKind.WARM)
        ranked = [n for n in self.rank(fingerprint) if n in allowed]
        ceiling = 1.0 - self.burst_headroom
        for name in ranked:
            if self._states[name].kv_usage <= ceiling:
                return Route(name, RouteKind.COLD)
        return Route(ranked[0], RouteKind.OVERFLOW)

    def _next_in_turn(self, allowed: Sequence[str]) -> str:
        for step in range(len(self.names)):
            name = self.names[(self._turn + step) % len(self.names)]
            if name in allowed:
                return name
        raise AssertionError("allowed names are the router's own")  # pragma: no cover

    def snapshot(self) -> tuple[ReplicaSnapshot, ...]:
        return tuple(
            ReplicaSnapshot(
                name=name,
                status=state.status,
                kv_usage=state.kv_usage,
                weight=state.weight,
                routes=RouteCounts(**{kind.value: n for kind, n in state.routes.items()}),
            )
            for name, state in self._states.items()
        )
