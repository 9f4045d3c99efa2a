"""A writer's lease on a shared Qdrant collection: one warmrag instance writes at a time.

Several instances pointed at one Qdrant server would each decide upserts, deletes
and clean-ups from their own view; until several writers are designed, one holds
the lease and the others are read-only. The lease is one point in the collection
itself (so it lives and dies with the data it guards), with the holder's id, a
human name and an expiry. It is taken and renewed by a conditional upsert
(``update_filter``: write only if the point still says what we read), then read
back: of two instances racing for a lapsed lease, exactly one reads itself.

A holder renews every third of the TTL; one that stops (crash, lost network)
loses the lease after the TTL and another instance may take it over.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from qdrant_client import QdrantClient
from qdrant_client import models as qm

log = logging.getLogger(__name__)

#: The lease point's id in every collection warmrag writes (a fixed UUID).
LEASE_POINT_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, "warmrag:collection-writer-lease"))
LEASE_KEY = "warmrag_lease"


class CollectionLeasedError(RuntimeError):
    """Another warmrag instance holds the writer's lease on this collection (HTTP 409)."""

    def __init__(self, collection: str, holder: LeaseState) -> None:
        until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(holder.expires_at))
        super().__init__(
            f"collection {collection!r} is written by another warmrag instance "
            f"({holder.name}, lease until {until}); this instance is read-only: stop that "
            "instance, or wait for its lease to lapse"
        )
        self.holder = holder


@dataclass(frozen=True)
class LeaseState:
    holder: str
    name: str
    expires_at: float

    def live(self, now: float) -> bool:
        return self.expires_at > now


class CollectionLease:
    """Takes, renews and releases the writer's lease on one collection."""

    def __init__(
        self,
        client: QdrantClient,
        collection: str,
        *,
        holder: str,
        name: str,
        vector_size: int,
        ttl_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._collection = collection
        self.holder = holder
        self.name = name
        self._vector = [1.0] + [0.0] * (vector_size - 1)  # never a search hit: see filters
        self.ttl_s = ttl_s
        self._clock = clock
        self._held = False
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def held(self) -> bool:
        return self._held

    def read(self) -> LeaseState | None:
        points = self._client.retrieve(self._collection, [LEASE_POINT_ID], with_payload=True)
        if not points or not points[0].payload:
            return None
        p = points[0].payload
        return LeaseState(str(p.get("holder")), str(p.get("name")), float(p.get("expires_at", 0)))

    def current(self) -> LeaseState:
        """The lease as stored now (a lapsed placeholder when there is none)."""
        return self.read() or LeaseState(holder="", name="nobody", expires_at=0.0)

    def _write_if(self, expected: LeaseState | None, expires_at: float) -> LeaseState | None:
        """Write our lease only where the point still holds ``expected``; read it back."""
        if expected is None:  # no lease point yet: any existing point fails this filter
            condition = qm.Filter(must=[_match("holder", "")])
        else:
            condition = qm.Filter(
                must=[
                    _match("holder", expected.holder),
                    qm.FieldCondition(
                        key="expires_at",
                        range=qm.Range(gte=expected.expires_at, lte=expected.expires_at),
                    ),
                ]
            )
        payload = {
            LEASE_KEY: True,
            "holder": self.holder,
            "name": self.name,
            "expires_at": expires_at,
        }
        self._client.upsert(
            self._collection,
            [qm.PointStruct(id=LEASE_POINT_ID, vector=self._vector, payload=payload)],
            update_filter=condition,
        )
        return self.read()

    def acquire(self) -> None:
        """Take the lease, or raise ``CollectionLeasedError`` naming the live holder."""
        now = self._clock()
        current = self.read()
        if current is not None and current.holder != self.holder and current.live(now):
            self._held = False
            raise CollectionLeasedError(self._collection, current)
        after = self._write_if(current, now + self.ttl_s)
        self._held = after is not None and after.holder == self.holder
        if not self._held:
            assert after is not None
            raise CollectionLeasedError(self._collection, after)
        if current is not None and current.holder != self.holder:
            log.warning(
                "took over the writer's lease of %s from %s", self._collection, current.name
            )

    def renew(self) -> bool:
        """Extend our lease; False (and read-only from now on) if another instance took it."""
        current = self.read()
        if current is None or current.holder != self.holder:
            if self._held:
                log.error(
                    "lost the writer's lease on %s to %s: this instance is read-only now",
                    self._collection,
                    current.name if current else "nobody",
                )
            self._held = False
            return False
        after = self._write_if(current, self._clock() + self.ttl_s)
        self._held = after is not None and after.holder == self.holder
        return self._held

    def release(self) -> None:
        """Let the lease lapse now, so another instance need not wait for the TTL."""
        self.stop_renewing()
        if not self._held:
            return
        try:
            current = self.read()
            if current is not None and current.holder == self.holder:
                self._write_if(current, 0.0)
        except Exception:
            log.warning("could not release the writer's lease; it lapses in %.0f s", self.ttl_s)
        self._held = False

    def start_renewing(self) -> None:
        """Renew every third of the TTL in a daemon thread until ``release``."""
        if self._renewer is not None:
            return
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew_loop, name="lease-renewer", daemon=True)
        self._renewer.start()

    def stop_renewing(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
            self._renewer = None

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            if not self._held:
                continue  # read-only: writes try to take it (``acquire``) when they come
            try:
                self.renew()
            except Exception:
                log.exception("renewing the writer's lease failed; retrying")


def _match(key: str, value: str) -> qm.FieldCondition:
    return qm.FieldCondition(key=key, match=qm.MatchValue(value=value))
