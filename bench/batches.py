"""Documents ingested batch by batch, as an operator's HTTP client sends them, on one
event loop, as the service runs every ingest on its server's loop.

A loop started for each batch (``anyio.run`` once a batch) costs what the service never
pays. On Python 3.11, ``asyncio.run`` checks on its way out whether the SIGINT handler
is still its own, and ``signal.getsignal`` formats that handler's repr in a ``ValueError``
it then discards. The handler holds the finished task, so the repr is the task's result:
the whole ``ChangeSet`` of the batch, its chunks' texts and vectors (1.8 MB of text for
20 documents of the real section, 45 ms). That is twice a batch, about 1.4 s of a 42-50 s
end-to-end ingest of the real section, spent while no ingest runs. Here the one loop's
coroutine returns nothing, and each batch's change is kept outside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

import anyio

from rag.knowledge.models import DocumentIn

Change = TypeVar("Change", covariant=True)


class Ingests(Protocol[Change]):
    """What takes documents in: ``rag.knowledge.service.KnowledgeService``."""

    async def ingest(self, documents: Sequence[DocumentIn]) -> Change: ...


def ingest_in_batches(
    knowledge: Ingests[Change], documents: Sequence[DocumentIn], batch_size: int
) -> list[Change]:
    """``knowledge.ingest`` on each ``batch_size`` documents in turn, on one event loop;
    each batch's change, in order."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    changes: list[Change] = []

    async def run() -> None:
        for start in range(0, len(documents), batch_size):
            changes.append(await knowledge.ingest(list(documents[start : start + batch_size])))

    anyio.run(run)
    return changes
