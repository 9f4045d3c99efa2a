"""A process stopped (or killed) between a knowledge-base write and its detection
leaves no warm entry built from replaced or deleted text: the next start replays the
persisted change and checks every entry against the knowledge base before restoring."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from rag.knowledge.embedding import Embedder
from rag.knowledge.models import ChangeSet, ChunkRecord
from tests.fakes import FakeEngine
from tests.warmup.rig import DOCS, QUESTIONS, make_rig, topic
from warmup.store import WarmupStore


@pytest.mark.parametrize("pending", ["persisted", "lost"])
def test_a_restart_never_restores_entries_with_old_text(
    tmp_path: Path, embedder: Embedder, pending: str
) -> None:
    async def scenario() -> None:
        rig = await make_rig(tmp_path, embedder)  # debounce of an hour: detection never runs
        await rig.ingest(*DOCS)
        await rig.service.flush()
        await rig.service.add_seed_queries([QUESTIONS[n] for n in ("zorn", "mars", "rye")])
        old = {n: rig.entry_for(n) for n in ("zorn", "mars", "rye")}
        assert "green" in old["zorn"].messages[0]["content"]
        await rig.ingest(topic("zorn-0", "The river Zorn", "The river Zorn is blue."))
        await rig.delete("mars-0")
        assert rig.service.view().pending_changes == 2
        await rig.close()
        if pending == "lost":  # killed before the changes reached SQLite
            with sqlite3.connect(tmp_path / "warmup.sqlite3") as db:
                db.execute("DELETE FROM pending_changes")

        engine = FakeEngine(num_blocks=4096)  # a fresh vLLM: nothing cached
        rig = await make_rig(tmp_path, embedder, engine=engine)  # started: restored
        try:
            current = {c for d in rig.kb.document_ids() for c in rig.kb.chunk_ids(d)}
            entries = rig.service.registry.entries()
            assert entries, "the unchanged entry was dropped too"
            for entry in entries:
                assert set(entry.chunk_ids) <= current
                assert "mars-0" not in entry.doc_ids
                assert "green" not in entry.messages[0]["content"]
            assert old["zorn"].fingerprint not in rig.service.registry
            assert old["mars"].fingerprint not in rig.service.registry
            assert rig.entry_for("rye").fingerprint == old["rye"].fingerprint
            assert not any("green" in " ".join(p) for p in engine.prefills)
            answer = await rig.ask(QUESTIONS["zorn"])
            assert any("blue" in p.text for p in answer.passages)
            # Nothing warm holds the old passage: what this chat reused came from prefills
            # of current text only.
            assert not any("green" in " ".join(p) for p in engine.prefills)
            assert rig.service.view().pending_changes == 0
            assert await rig.service.journal.flush(5.0)
            assert rig.service.store.load().pending == []
        finally:
            await rig.close()

    asyncio.run(scenario())


def test_a_pending_change_keeps_its_chunk_and_fact_vectors(tmp_path: Path) -> None:
    """Detection after a restart needs the added chunks' and the new facts' vectors
    exactly as they were, and must know a change whose new facts were not noted."""
    vectors = np.random.default_rng(1).normal(size=(5, 384)).astype(np.float32)
    change = ChangeSet(
        added=["d"],
        added_chunks=[
            ChunkRecord(doc_id="d", chunk_id=f"c{i}", embedding=v.tolist())
            for i, v in enumerate(vectors[:3])
        ],
        new_facts=vectors[3:].tolist(),
        kb_version=4,
    )
    store = WarmupStore(tmp_path / "warmup.sqlite3")
    store.add_pending(7, change)
    store.add_pending(8, ChangeSet(updated=["e"], kb_version=5))  # new facts not known
    store.close()
    [(seq, loaded), (_, unknown)] = WarmupStore(tmp_path / "warmup.sqlite3").load().pending
    assert seq == 7 and loaded.added == ["d"] and loaded.kb_version == 4
    assert [c.chunk_id for c in loaded.added_chunks] == ["c0", "c1", "c2"]
    chunks = np.array([c.embedding for c in loaded.added_chunks], np.float32)
    assert np.array_equal(chunks, vectors[:3])
    assert np.array_equal(np.array(loaded.new_facts, np.float32), vectors[3:])
    assert unknown.new_facts is None
