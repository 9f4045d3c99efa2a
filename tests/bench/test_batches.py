"""``bench.batches.ingest_in_batches``: every batch on one event loop, and nothing of a
batch's change formatted on the way (the cost a loop per batch paid on Python 3.11)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from bench.batches import ingest_in_batches
from rag.knowledge.models import DocumentIn


class Change:
    """A batch's change that counts how often something formats it."""

    formatted = 0

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids

    def __repr__(self) -> str:
        Change.formatted += 1
        return f"Change({self.ids})"


class RecordingKnowledge:
    """Takes documents in, noting each batch and the loop it ran on."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        # The loops themselves, not their ids: a closed loop's id can be reused.
        self.loops: list[asyncio.AbstractEventLoop] = []

    async def ingest(self, documents: Sequence[DocumentIn]) -> Change:
        self.loops.append(asyncio.get_running_loop())
        self.batches.append([d.id for d in documents])
        return Change([d.id for d in documents])


def test_batches_run_in_order_on_one_loop_and_no_change_is_formatted() -> None:
    documents = [DocumentIn(id=f"doc-{i}", text=f"Page {i}.") for i in range(5)]
    knowledge = RecordingKnowledge()
    Change.formatted = 0

    changes = ingest_in_batches(knowledge, documents, 2)

    assert knowledge.batches == [["doc-0", "doc-1"], ["doc-2", "doc-3"], ["doc-4"]]
    assert [c.ids for c in changes] == knowledge.batches
    assert len(knowledge.loops) == 3
    assert all(loop is knowledge.loops[0] for loop in knowledge.loops)
    assert Change.formatted == 0


def test_a_batch_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="batch_size must be at least 1, not 0"):
        ingest_in_batches(RecordingKnowledge(), [], 0)
