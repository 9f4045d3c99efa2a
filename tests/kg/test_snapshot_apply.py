"""A change patches the graph's snapshot (``GraphSnapshot.apply``) instead of rebuilding
it: the patched snapshot must say exactly what a whole build of the same graph says, and
a snapshot already handed to a query must never change under it."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from kg import KnowledgeGraph, Triple
from kg.edge_lists import ChunkIndex
from kg.embeddings import EmbeddingTable
from kg.index import INDEXED_LISTS, GraphSnapshot
from kg.saved_strings import StringColumn
from tests.kg.kg_testdata import snapshot_content

NAMES = [f"{first} {last}" for first in ("Ada", "Bo", "Cy", "Di") for last in ("Ng", "Ok", "Po")]
PREDICATES = ["born in", "Born in", "works at", "wrote", "is part of", "uses"]


def hashed_embed(texts: Sequence[str]) -> np.ndarray:
    """Unit vectors seeded by each text's hash: the same text, the same vector (the
    vectors' meaning is irrelevant here, only that each row is the right one)."""
    rows = []
    for text in texts:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        rows.append(np.random.default_rng(seed).standard_normal(16))
    vectors = np.asarray(rows, np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def random_document(rng: random.Random, doc_id: str) -> list[Triple]:
    """0-7 triples: names in varied case (display names change as documents come and
    go), predicates that normalize alike, facts other documents state too, chunk-level
    and document-level ones."""
    triples = []
    for _ in range(rng.randrange(8)):
        subject, obj = rng.sample(NAMES, 2)
        if rng.random() < 0.3:
            subject = subject.upper() if rng.random() < 0.5 else subject.lower()
        chunk = rng.choice([None, f"{doc_id}#0", f"{doc_id}#1", f"{doc_id}#2"])
        triples.append(
            Triple(
                subject=subject,
                predicate=rng.choice(PREDICATES),
                object=obj,
                doc_id=doc_id,
                chunk_id=chunk,
                source="supplied" if chunk is None else "extracted",
            )
        )
    return triples


@pytest.mark.parametrize(
    ("reclaim", "from_rows"),
    [(False, False), (True, False), (False, True)],
    ids=["rows-kept", "rows-reclaimed", "built-from-rows"],
)
def test_a_patched_snapshot_is_the_one_a_build_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reclaim: bool, from_rows: bool
) -> None:
    """80 random changes; after each, the snapshot equals the one a start builds from the
    file's rows. ``rows-reclaimed`` compacts the embedding tables and renumbers chunk ids
    at every chance, so the paths that look every row up again run too.
    ``built-from-rows`` changes a snapshot a start built from the rows, as after a crash:
    it holds plain lists of strings, which a change copies, where the others read theirs
    through the indexes it splices (``kg.snapshot_lists``)."""
    if reclaim:
        monkeypatch.setattr(EmbeddingTable, "_MIN_DEAD", 0)
        monkeypatch.setattr(EmbeddingTable, "_DEAD_SHARE", 0.0)
        monkeypatch.setattr(ChunkIndex, "_SPARE_IDS", 0)
    rng = random.Random(7)
    graph = KnowledgeGraph(tmp_path / "kg", hashed_embed)
    documents = [f"doc-{i}" for i in range(8)]
    for step in range(80):
        chosen = rng.sample(documents, rng.randrange(1, 4))
        if rng.random() < 0.25:
            graph.remove_documents(chosen)
        else:
            graph.replace_documents({d: random_document(rng, d) for d in chosen})
        if from_rows and step == 0:
            graph = KnowledgeGraph(tmp_path / "kg", hashed_embed)
        built = KnowledgeGraph(tmp_path / "kg", hashed_embed, autosave=False)
        assert snapshot_content(graph.snapshot) == snapshot_content(built.snapshot), step
        lists = {n: list(getattr(graph.snapshot, n)) for n in INDEXED_LISTS}
        strings = graph.snapshot.strings
        if from_rows:
            assert strings is None and isinstance(graph.snapshot.edge_text, list), step
            continue
        # The strings' indexes a save writes (``kg.saved_strings``) say the same lists,
        # and the lists are read through them.
        assert strings is not None, step
        assert strings.lists() == lists, step
        assert isinstance(graph.snapshot.edge_text, StringColumn), step
    assert graph.edge_count > 10  # the walk ended with a graph worth comparing


def test_a_snapshot_in_use_keeps_its_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tables never rewrite a row a snapshot refers to: not when a document goes,
    not when its entities and texts come back with other vectors, not on compaction."""
    monkeypatch.setattr(EmbeddingTable, "_MIN_DEAD", 0)
    rng = random.Random(3)
    graph = KnowledgeGraph(tmp_path / "kg", hashed_embed)
    graph.replace_documents({f"doc-{i}": random_document(rng, f"doc-{i}") for i in range(6)})
    held = graph.snapshot
    before = (np.asarray(held.node_vectors).copy(), np.asarray(held.edge_vectors).copy())
    tokens = [held.node_vectors.token]  # kept alive, so their ids stay distinct
    for _ in range(20):
        chosen = rng.sample([f"doc-{i}" for i in range(6)], 3)
        graph.remove_documents(chosen[:1])
        graph.replace_documents({d: random_document(rng, d) for d in chosen[1:]})
        tokens.append(graph.snapshot.node_vectors.token)
    assert len({id(token) for token in tokens}) > 2  # the node table was compacted
    np.testing.assert_array_equal(np.asarray(held.node_vectors), before[0])
    np.testing.assert_array_equal(np.asarray(held.edge_vectors), before[1])


def test_a_table_grows_by_a_quarter_and_compacts_what_it_dropped() -> None:
    table = EmbeddingTable()
    table.add([f"k{i}" for i in range(4000)], np.ones((4000, 8), np.float32))
    for i in range(4000, 4100):
        table.add([f"k{i}"], np.full((1, 8), i, np.float32))
    assert table.matrix.shape == (4100, 8)
    assert table._tail.capacity <= 4100 * 1.25 + 64  # not doubled
    token = table.token
    table.discard([f"k{i}" for i in range(2000)])  # half dropped: compacted
    assert table.token is not token and table.matrix.shape[0] == 2100
    np.testing.assert_array_equal(table.gather(["k4099", "k2000"]), [[4099] * 8, [1] * 8])


def test_a_documents_facts_are_all_of_its_edges(tmp_path: Path) -> None:
    """What the change rule reads of a changed document (its facts' vectors and the
    entities they join) covers the facts extracted from its chunks, not only those
    supplied for the whole document: a snapshot once listed only the latter."""
    graph = KnowledgeGraph(tmp_path / "kg", hashed_embed)
    extracted = Triple(
        subject="Ada Ng", predicate="wrote", object="Bo Ok", doc_id="d", chunk_id="d#0"
    )
    whole = Triple(subject="Cy Po", predicate="uses", object="Di Ng", doc_id="d")
    graph.replace_documents({"d": [extracted, whole], "e": random_document(random.Random(1), "e")})
    snap = graph.snapshot
    vectors = snap.document_edge_vectors(["d"])
    np.testing.assert_allclose(vectors, hashed_embed([extracted.text, whole.text]), atol=1e-6)
    assert snap.document_entities(["d"]) == {"ada ng", "bo ok", "cy po", "di ng"}


def _index_arrays(snap: GraphSnapshot) -> dict[str, np.ndarray]:
    arrays = {f.name: getattr(snap, f.name) for f in fields(snap)}
    found = {name: a for name, a in arrays.items() if isinstance(a, np.ndarray)}
    found |= {"node_rows": snap.node_vectors.rows, "edge_rows": snap.edge_vectors.rows}
    chunks = snap.chunks
    return found | {
        "chunk_ids": chunks.edge_chunk,
        "chunk_ptr": chunks.ptr,
        "chunk_order": chunks.order,
    }


def test_every_index_array_takes_four_bytes_an_item_however_the_snapshot_was_made(
    tmp_path: Path,
) -> None:
    """Built, patched or read back, the snapshot's index arrays are int32 (a change copies
    them all: at 970,982 triples 40 MiB in int32, 79 in int64), and a node is found by its
    key without a dict of every key."""
    rng = random.Random(11)
    graph = KnowledgeGraph(tmp_path / "kg", hashed_embed)
    for step in range(6):
        doc = f"doc-{step % 4}"
        graph.replace_documents({doc: random_document(rng, doc)})
    graph.remove_documents(["doc-1"])
    patched = graph.snapshot
    built = KnowledgeGraph(tmp_path / "kg", hashed_embed, autosave=False).snapshot
    graph.close()
    read_back = KnowledgeGraph(tmp_path / "kg", hashed_embed).snapshot
    for made, snap in {"patched": patched, "built": built, "read back": read_back}.items():
        arrays = _index_arrays(snap)
        assert len(arrays) == 12, made
        assert {name: a.itemsize for name, a in arrays.items() if a.itemsize != 4} == {}, made
        assert snap.edge_count > 0, made
        for i, key in enumerate(snap.node_keys):
            assert snap.node_position(key) == i, made
        assert snap.node_position("") is None
        assert snap.node_position(snap.node_keys[-1] + "~") is None
        assert snap.node_position(snap.node_keys[0][:-1]) is None
