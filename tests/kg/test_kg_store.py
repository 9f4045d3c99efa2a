"""The graph store: consistency with documents, persistence, embeddings and the admin views."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from kg import EmbedFn, KnowledgeGraph, TripleExtractor, snapshot_file
from kg.graph_file import GRAPH_DB_FILE, LEGACY_GRAPH_FILE, GraphChange, GraphFile
from tests.kg.kg_testdata import CountingEmbed, corpus_triples, snapshot_content, supplied


def edge_docs(graph: KnowledgeGraph) -> set[str]:
    return {graph.snapshot.edge_doc[i] for i in range(graph.snapshot.edge_count)}


def test_same_entity_from_two_documents_is_one_node(graph: KnowledgeGraph) -> None:
    graph.replace_documents({"a": supplied("a", ("Marie Curie", "born in", "Warsaw"))})
    graph.replace_documents({"b": supplied("b", ("marie  curie", "discover", "the polonium"))})
    assert graph.node_count == 3
    assert graph.edge_count == 2
    assert [e.key for e in graph.search_entities("curie", 10)] == ["marie curie"]


def test_each_distinct_text_is_embedded_once_per_change(
    graph: KnowledgeGraph, counting_embed: CountingEmbed
) -> None:
    graph.replace_documents(
        {
            "a": supplied(
                "a", ("Marie Curie", "born in", "Warsaw"), ("Marie Curie", "win", "Prize")
            ),
            "b": supplied("b", ("marie curie", "born in", "Warsaw")),
        }
    )
    assert len(counting_embed.calls) == 1
    texts = counting_embed.texts
    assert len(texts) == len(set(texts))
    assert texts.count("Warsaw") == 1
    assert sum(t.lower() == "marie curie" for t in texts) == 1  # one node, one name
    # Known nodes and triple texts are not embedded again by a later change.
    graph.replace_documents({"c": supplied("c", ("Marie Curie", "born in", "Warsaw"))})
    assert len(counting_embed.calls) == 1


def test_a_change_prepares_its_snapshot_for_the_first_question(graph: KnowledgeGraph) -> None:
    """The entity rows' items are indexed by the change, before chats read its snapshot,
    not by the first question's link (1.5-2 ms at 209,456 entities)."""
    graph.replace_documents({"a": supplied("a", ("Marie Curie", "born in", "Warsaw"))})
    vectors = graph.snapshot.node_vectors
    assert vectors._items is not None and len(vectors._items) == len(vectors.matrix)
    graph.replace_documents({"b": supplied("b", ("Pierre Curie", "born in", "Paris"))})
    assert graph.snapshot.node_vectors is not vectors
    assert graph.snapshot.node_vectors._items is not None


def test_remove_keeps_shared_entities_and_drops_orphans(graph: KnowledgeGraph) -> None:
    graph.replace_documents(
        {
            "a": supplied(
                "a", ("Marie Curie", "born in", "Warsaw"), ("Marie Curie", "discover", "polonium")
            )
        }
    )
    graph.replace_documents({"b": supplied("b", ("Marie Curie", "win", "Nobel Prize"))})
    assert graph.remove_document("a") is True
    keys = {e.key for e in graph.search_entities("", 100)}
    assert keys == {"marie curie", "nobel prize"}
    assert graph.edge_count == 1
    assert graph.document_ids() == ["b"]
    assert edge_docs(graph) == {"b"}
    assert graph.remove_document("a") is False


def test_replace_swaps_a_documents_edges(graph: KnowledgeGraph) -> None:
    graph.replace_documents({"a": supplied("a", ("Marie Curie", "born in", "Warsaw"))})
    graph.replace_documents({"b": supplied("b", ("Marie Curie", "win", "Nobel Prize"))})
    graph.replace_documents({"b": supplied("b", ("Marie Curie", "discover", "radium"))})
    assert [t.as_list() for t in graph.triples_for_document("b")] == [
        ["Marie Curie", "discover", "radium"]
    ]
    keys = {e.key for e in graph.search_entities("", 100)}
    assert keys == {"marie curie", "warsaw", "radium"}  # "nobel prize" was orphaned
    assert graph.edge_count == 2
    graph.replace_documents({"b": []})
    assert graph.document_ids() == ["a"]
    assert graph.node_count == 2


def test_display_name_follows_the_remaining_documents(graph: KnowledgeGraph) -> None:
    graph.replace_documents({"a": supplied("a", ("MARIE CURIE", "born in", "Warsaw"))})
    graph.replace_documents({"b": supplied("b", ("Marie Curie", "win", "Nobel Prize"))})
    assert graph.search_entities("marie curie", 1)[0].name == "MARIE CURIE"
    graph.remove_document("a")
    assert graph.search_entities("marie curie", 1)[0].name == "Marie Curie"


def test_triples_for_document_keeps_order_and_provenance(
    graph: KnowledgeGraph, extractor: TripleExtractor
) -> None:
    triples = corpus_triples(extractor, "curie")
    graph.replace_documents({"curie": triples})
    assert graph.triples_for_document("curie") == triples
    assert graph.triples_for_document("unknown") == []
    chunk_ids = {t.chunk_id for t in graph.triples_for_document("curie")}
    assert chunk_ids == {"curie#0", "curie#1", None}


def test_duplicate_triples_within_a_document_are_stored_once(graph: KnowledgeGraph) -> None:
    graph.replace_documents(
        {
            "a": supplied(
                "a", ("Marie Curie", "born in", "Warsaw"), ("marie curie", "Born in", "warsaw")
            )
        }
    )
    assert graph.edge_count == 1


def test_triple_filed_under_another_document_is_rejected(graph: KnowledgeGraph) -> None:
    with pytest.raises(ValueError, match="filed under"):
        graph.replace_documents({"a": supplied("b", ("x", "p", "y"))})
    assert graph.edge_count == 0


def test_persistence_reloads_without_reembedding(
    tmp_path: Path,
    embed_fn: EmbedFn,
    extractor: TripleExtractor,
) -> None:
    folder = tmp_path / "kg"
    first_embed = CountingEmbed(embed_fn)
    first = KnowledgeGraph(folder, first_embed)
    first.replace_documents({doc: corpus_triples(extractor, doc) for doc in ("curie", "paris")})
    assert len(first_embed.calls) == 1  # one batched call for the whole change

    second_embed = CountingEmbed(embed_fn)
    second = KnowledgeGraph(folder, second_embed)
    assert second_embed.calls == []
    assert (second.node_count, second.edge_count) == (first.node_count, first.edge_count)
    assert second.document_ids() == ["curie", "paris"]
    for doc in ("curie", "paris"):
        assert second.triples_for_document(doc) == first.triples_for_document(doc)
    np.testing.assert_array_equal(second.snapshot.edge_vectors, first.snapshot.edge_vectors)
    np.testing.assert_array_equal(second.snapshot.node_vectors, first.snapshot.node_vectors)

    # One SQLite file (and its write-ahead log) holds it all; a close adds the snapshot,
    # and a start that read the vectors moves them to files it maps (in its thread).
    assert second.wait_prepared(timeout=30)
    vector_files = {p.name for p in folder.glob(snapshot_file.VECTOR_FILE.format(id="*", kind="*"))}
    assert len(vector_files) == 2
    assert {p.name for p in folder.iterdir()} - vector_files <= {
        GRAPH_DB_FILE,
        f"{GRAPH_DB_FILE}-wal",
        f"{GRAPH_DB_FILE}-shm",
        snapshot_file.FILE,
    }

    # A change after reload embeds only what is new, and is itself persisted.
    second.replace_documents({"einstein": corpus_triples(extractor, "einstein")})
    assert "Albert Einstein" in second_embed.texts
    assert "Marie Curie" not in second_embed.texts
    third = KnowledgeGraph(folder, CountingEmbed(embed_fn))
    assert third.document_ids() == ["curie", "einstein", "paris"]


def test_unchanged_document_is_not_reembedded(
    graph: KnowledgeGraph, counting_embed: CountingEmbed, extractor: TripleExtractor
) -> None:
    triples = corpus_triples(extractor, "paris")
    graph.replace_documents({"paris": triples})
    calls = len(counting_embed.calls)
    graph.replace_documents({"paris": triples})
    assert len(counting_embed.calls) == calls


def test_lost_vectors_are_repaired_on_load(tmp_path: Path, embed_fn: EmbedFn) -> None:
    folder = tmp_path / "kg"
    first = KnowledgeGraph(folder, embed_fn)
    first.replace_documents({"a": supplied("a", ("Marie Curie", "born in", "Warsaw"))})
    first.close()
    with sqlite3.connect(folder / GRAPH_DB_FILE) as db:  # as if a row were lost
        db.execute("DELETE FROM vectors WHERE kind = 'triple'")
    embed = CountingEmbed(embed_fn)
    graph = KnowledgeGraph(folder, embed)
    assert embed.texts == ["Marie Curie born in Warsaw"]
    assert graph.snapshot.edge_vectors.shape == (1, 384)
    graph.close()
    again = CountingEmbed(embed_fn)
    KnowledgeGraph(folder, again)  # the repair was written
    assert again.calls == []


def test_a_change_writes_only_its_own_rows(
    tmp_path: Path,
    embed_fn: EmbedFn,
    extractor: TripleExtractor,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """O(change) per write: the rows of documents a change does not touch are not written."""
    folder = tmp_path / "kg"
    graph = KnowledgeGraph(folder, embed_fn)
    graph.replace_documents(
        {doc: corpus_triples(extractor, doc) for doc in ("curie", "paris")},
        {"curie": "v1", "paris": "v1"},
    )
    written: list[GraphChange] = []
    write = GraphFile.write

    def recording(self: GraphFile, change: GraphChange) -> None:
        written.append(change)
        write(self, change)

    monkeypatch.setattr(GraphFile, "write", recording)
    graph.replace_documents({"einstein": corpus_triples(extractor, "einstein")}, {"einstein": "v1"})
    [change] = written
    assert change.replaced == {"einstein"} and change.versions == {"einstein": "v1"}
    assert change.edges and {e.doc_id for e in change.edges} == {"einstein"}
    assert set(change.triple_vectors.keys) <= {
        t.text for t in graph.triples_for_document("einstein")
    }
    assert "marie curie" not in change.nodes and "marie curie" not in change.node_vectors.keys

    graph.remove_document("paris")
    removed = written[-1]
    assert removed.edges == [] and removed.versions == {"paris": None}
    assert "paris" in removed.removed_nodes  # an entity only paris named
    graph.close()
    reloaded = KnowledgeGraph(folder, embed_fn)
    assert reloaded.document_ids() == ["curie", "einstein"]
    assert reloaded.document_versions() == {"curie": "v1", "einstein": "v1"}
    np.testing.assert_array_equal(reloaded.snapshot.edge_vectors, graph.snapshot.edge_vectors)
    assert reloaded.snapshot.node_keys == graph.snapshot.node_keys


def test_the_versions_are_read_while_a_change_is_under_way(
    tmp_path: Path, embed_fn: EmbedFn
) -> None:
    """A change edits the documents' versions in place, not a copy of them all (0.4 s a
    change at 1,000,000 documents), yet the sync reads them while a change is held in
    its embedding, without waiting for it: the versions before it, then after it."""
    entered, release = threading.Event(), threading.Event()
    holding = False

    def held_embed(texts: Sequence[str]) -> np.ndarray:
        if holding:
            entered.set()
            release.wait(30)
        return embed_fn(texts)

    graph = KnowledgeGraph(tmp_path / "kg", held_embed)
    graph.replace_documents({"a": supplied("a", ("Marie Curie", "born in", "Warsaw"))}, {"a": "1"})
    holding = True
    change = threading.Thread(
        target=graph.replace_documents,
        args=({"b": supplied("b", ("Pierre Curie", "born in", "Paris"))}, {"b": "1", "a": None}),
    )
    change.start()
    try:
        assert entered.wait(30)
        read: list[dict[str, str]] = []
        reader = threading.Thread(target=lambda: read.append(graph.document_versions()))
        reader.start()
        reader.join(10)
        assert read == [{"a": "1"}]
    finally:
        release.set()
        change.join(30)
    assert graph.document_versions() == {"b": "1"}


def test_a_failed_write_leaves_the_file_at_the_last_change(
    tmp_path: Path, embed_fn: EmbedFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injected: the SQLite commit fails (as on a full disk). Memory has the change;
    the file has the change before it, with the versions it had, so a restart's sync
    sees the document as out of step and repairs it."""
    folder = tmp_path / "kg"
    graph = KnowledgeGraph(folder, embed_fn)
    graph.replace_documents({"a": supplied("a", ("Marie Curie", "born in", "Warsaw"))}, {"a": "1"})

    def full(self: GraphFile, change: GraphChange) -> None:
        raise OSError(28, "injected: ENOSPC")

    monkeypatch.setattr(GraphFile, "write", full)
    with pytest.raises(OSError):
        graph.replace_documents(
            {"a": supplied("a", ("Marie Curie", "died in", "Passy"))}, {"a": "2"}
        )
    assert graph.document_versions() == {"a": "2"}
    monkeypatch.undo()
    graph.close()
    reloaded = KnowledgeGraph(folder, embed_fn)
    assert reloaded.document_versions() == {"a": "1"}
    assert [t.object for t in reloaded.triples_for_document("a")] == ["Warsaw"]


OLD_FOLDER = Path(__file__).resolve().parent.parent / "data" / "old-data-folder" / "kg"


def test_a_folder_of_the_old_layout_moves_into_the_file_once(
    tmp_path: Path, embed_fn: EmbedFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """graph.json, the .npz embeddings and the sync's versions move into graph.sqlite3 in
    one transaction; a crash during the move (injected: the write raises) leaves the old
    files in place, and the next open moves them."""
    folder = tmp_path / "kg"
    shutil.copytree(OLD_FOLDER, folder)
    replace = GraphFile.replace

    def crash(self: GraphFile, rows: object) -> None:
        raise OSError(5, "injected: EIO")

    monkeypatch.setattr(GraphFile, "replace", crash)
    with pytest.raises(OSError):
        KnowledgeGraph(folder, embed_fn)
    assert (folder / LEGACY_GRAPH_FILE).exists()
    monkeypatch.setattr(GraphFile, "replace", replace)

    embed = CountingEmbed(embed_fn)
    graph = KnowledgeGraph(folder, embed)
    assert embed.calls == []  # the vectors moved too
    assert graph.document_ids() == ["bridges/aster", "lighthouse", "rivers/zorn.md"]
    assert set(graph.document_versions()) == set(graph.document_ids())
    assert (graph.node_count, graph.edge_count) == (12, 10)
    assert sorted(p.name for p in folder.glob("*.migrated")) == [
        "graph.json.migrated",
        "node_embeddings.npz.migrated",
        "synced_documents.json.migrated",
        "triple_embeddings.npz.migrated",
    ]
    graph.close()
    again = KnowledgeGraph(folder, embed)
    assert again.triples_for_document("lighthouse") == graph.triples_for_document("lighthouse")
    assert again.document_versions() == graph.document_versions()


def test_failing_embed_changes_nothing(tmp_path: Path) -> None:
    def broken(texts: object) -> np.ndarray:
        raise RuntimeError("embedding service down")

    graph = KnowledgeGraph(tmp_path / "kg", broken)
    with pytest.raises(RuntimeError):
        graph.replace_documents({"a": supplied("a", ("Marie Curie", "born in", "Warsaw"))})
    assert (graph.node_count, graph.edge_count, graph.document_ids()) == (0, 0, [])


def test_search_entities_matches_substrings_and_reports_degree(
    graph: KnowledgeGraph, extractor: TripleExtractor
) -> None:
    graph.replace_documents({doc: corpus_triples(extractor, doc) for doc in ("curie", "paris")})
    hits = graph.search_entities("paris", 10)
    assert [h.key for h in hits] == ["paris", "university of paris"]  # exact match first
    assert hits[0].name == "Paris"
    assert hits[0].degree == 2
    assert graph.search_entities("PARIS", 1)[0].key == "paris"
    top = graph.search_entities("", 1)[0]
    assert (top.key, top.name, top.degree) == ("marie curie", "Marie Curie", 6)
    assert graph.search_entities("no such thing", 10) == []


def test_a_graph_kept_in_memory_saves_whole_and_starts_again_the_same(
    tmp_path: Path, embed_fn: EmbedFn
) -> None:
    """Without autosave nothing is written until ``save``, which writes every edge, name,
    vector and version from the snapshot (``bench.kg_writes`` builds graphs this way)."""
    graph = KnowledgeGraph(tmp_path / "kg", embed_fn, autosave=False)
    graph.replace_documents(
        {
            "a": supplied("a", ("Git", "wraps", "Git"), ("Git", "uses", "SHA-1")),
            "b": supplied("b", ("GIT", "uses", "SHA-1"), ("Lyon", "lies on", "Rhone")),
            "c": supplied("c", ("Ada", "wrote", "Notes")),
        },
        {"a": "v1", "b": "v2", "c": "v3"},
    )
    graph.remove_documents(["c"])
    assert KnowledgeGraph(tmp_path / "kg", embed_fn).edge_count == 0
    graph.save()
    again = KnowledgeGraph(tmp_path / "kg", embed_fn)
    assert snapshot_content(again.snapshot) == snapshot_content(graph.snapshot)
    assert again.document_versions() == {"a": "v1", "b": "v2"}
    for doc in ("a", "b"):
        assert again.triples_for_document(doc) == graph.triples_for_document(doc)
