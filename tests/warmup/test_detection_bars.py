"""Each warm query keeps the bars its context sets (``ContextBars``): detection tests a
change's new facts against the query's own weakest fact, not against the lowest bar a
held fact can have, which a one-document change's facts reached for nearly every warm
entry of the real corpus. The bars survive a restart; a store written before they were
kept opens with none (the lowest bar: sound, as before)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rag.chat.change_rule import ChangeRule, ContextBars
from rag.chat.retriever import Retrieval
from rag.knowledge.models import ChangeSet, Passage
from tests.rag.chat.test_context_memo import ScoredFact, unit
from tests.warmup.test_store_faults import entry
from warmup.detector import ChangeDetector
from warmup.models import QueryRecord
from warmup.registry import Registry
from warmup.store import WarmupStore


def retrieval(*fact_scores: float, entry_bar: float | None = None) -> Retrieval:
    passages = [Passage(doc_id="d", chunk_id=f"c{i}", text="t", score=s) for i, s in
                enumerate((0.9, 0.6))]  # fmt: skip
    facts = [ScoredFact("s", "p", f"o{i}", s, "d") for i, s in enumerate(fact_scores)]
    return Retrieval("q", unit(1, 0, 0), passages, facts, entry_bar=entry_bar)


def test_a_context_sets_its_weakest_fact_as_bar_only_with_every_slot_taken() -> None:
    rule = ChangeRule(max_facts=3, min_fact_score=0.3)
    assert rule.bars(retrieval(0.8, 0.5, 0.7)) == ContextBars(0.6, 0.5)
    assert rule.bars(retrieval(0.8, 0.5)) == ContextBars(0.6, None)  # a slot is free
    assert rule.bars(retrieval()) == ContextBars(0.6, None)
    assert rule.bars(retrieval(0.8, 0.5, 0.7, entry_bar=-1.0)) == ContextBars(-1.0, 0.5)


def registry_with(bars: dict[str, ContextBars], store: WarmupStore | None = None) -> Registry:
    """One entry per query, all asked along the first axis."""
    registry = Registry(persist=(lambda write: write(store)) if store else None)
    for key, bar in bars.items():
        registry.put_entry(entry(f"fp-{key}"))
        registry.record_query(key, key, unit(1, 0, 0), 0.0, 3600.0)
        registry.assign(key, f"fp-{key}", bar)
    return registry


def test_detection_holds_each_query_to_its_own_fact_bar() -> None:
    # A new fact of an unrelated document with cosine 0.6 to every question.
    new_fact = unit(0.6, 0.8, 0)[None, :]
    rule = ChangeRule(fact_vectors=lambda docs: new_fact, min_fact_score=0.3, fact_gain=0.2)
    registry = registry_with(
        {
            "full-strong": ContextBars(0.5, 0.85),  # 0.6 + 0.2 < 0.85: cannot enter
            "full-weak": ContextBars(0.5, 0.75),  # 0.6 + 0.2 >= 0.75: can
            "free-slot": ContextBars(0.5, None),  # the threshold, 0.3: can
        }
    )
    change = ChangeSet(added=["other"], kb_version=2)
    found = ChangeDetector(rule).detect(registry.entry_index(), registry.query_matrix(), [change])
    assert found.affected == {"fp-full-weak", "fp-free-slot"}
    assert found.unaffected == {"fp-full-strong"}


def test_the_bars_survive_a_restart(tmp_path: Path) -> None:
    store = WarmupStore(tmp_path / "warmup.sqlite3")
    registry_with({"a": ContextBars(0.45, 0.7), "b": ContextBars(None, None)}, store)
    store.close()
    reloaded = Registry()
    reloaded.load(WarmupStore(tmp_path / "warmup.sqlite3").load())
    matrix = reloaded.query_matrix()
    assert matrix.keys == ["a", "b"]
    assert matrix.kth_scores.tolist() == [np.float32(0.45), -1.0]
    assert matrix.fact_bars[0] == np.float32(0.7) and np.isnan(matrix.fact_bars[1])
    reloaded.retire("fp-a")
    assert reloaded.query("a") == QueryRecord(key="a", text="a", count=1.0, last_seen=0.0)


def test_a_store_written_before_the_fact_bar_opens_with_none(tmp_path: Path) -> None:
    path = tmp_path / "warmup.sqlite3"
    with sqlite3.connect(path) as db:  # the queries table as the earlier schema made it
        db.execute(
            "CREATE TABLE queries (key TEXT PRIMARY KEY, text TEXT NOT NULL, embedding BLOB"
            " NOT NULL, count REAL NOT NULL, last_seen REAL NOT NULL, seed INTEGER NOT NULL"
            " DEFAULT 0, fingerprint TEXT, kth_score REAL)"
        )
        db.execute(
            "INSERT INTO queries VALUES ('a', 'a', ?, 1.0, 0.0, 0, NULL, NULL)",
            (unit(1, 0, 0).tobytes(),),
        )
    db.close()
    store = WarmupStore(path)
    (loaded, vector), *_ = store.load().queries
    assert loaded.fact_bar is None and np.allclose(vector, unit(1, 0, 0))
    store.put_entry(entry("fp-a"))
    store.assign("a", "fp-a", ContextBars(0.5, 0.8))
    assert store.load().queries[0][0].fact_bar == 0.8


def test_a_change_tests_the_facts_it_brought_and_all_of_a_document_where_unknown() -> None:
    """A change that noted its new facts is tested with those alone: an updated
    document's unchanged facts were candidates all along. One that did not (its graph
    sync failed, or it was stored before they were kept) is tested with every fact
    its documents state now."""
    stated = {"doc-b": unit(1, 0.1, 0)[None, :]}  # near every question
    asked: list[list[str]] = []

    def document_facts(docs: Sequence[str]) -> np.ndarray:
        asked.append(list(docs))
        return np.concatenate([stated[d] for d in docs])

    rule = ChangeRule(fact_vectors=document_facts, min_fact_score=0.3, fact_gain=0.2)
    registry = registry_with({"a": ContextBars(0.5, 0.7)})
    detector = ChangeDetector(rule)
    far = unit(0, 0, 1).tolist()

    def affected(change: ChangeSet) -> set[str]:
        return detector.detect(registry.entry_index(), registry.query_matrix(), [change]).affected

    assert affected(ChangeSet(updated=["doc-b"], new_facts=[far], kb_version=2)) == set()
    assert affected(ChangeSet(updated=["doc-b"], new_facts=[], kb_version=3)) == set()
    assert asked == []
    assert affected(ChangeSet(updated=["doc-b"], kb_version=4)) == {"fp-a"}
    assert asked == [["doc-b"]]
    near = unit(1, 0, 0).tolist()
    assert affected(ChangeSet(updated=["doc-b"], new_facts=[near], kb_version=5)) == {"fp-a"}
