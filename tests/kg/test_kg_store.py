"""The graph store: consistency with documents, persistence, embeddings and the admin views."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kg import EmbedFn, KnowledgeGraph, TripleExtractor
from kg.store import GRAPH_FILE, NODE_VECTORS_FILE, TRIPLE_VECTORS_FILE
from tests.kg.kg_testdata import CountingEmbed, corpus_triples, supplied


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

    # The files are plain node-link JSON and pickle-free .npz; no temp files are left over.
    payload = json.loads((folder / GRAPH_FILE).read_text())
    assert {"nodes", "edges"} <= set(payload["graph"])
    for name in (NODE_VECTORS_FILE, TRIPLE_VECTORS_FILE):
        with np.load(folder / name, allow_pickle=False) as data:
            assert data["vectors"].shape[1] == 384
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [GRAPH_FILE, NODE_VECTORS_FILE, TRIPLE_VECTORS_FILE]
    )

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
    KnowledgeGraph(folder, embed_fn).replace_documents(
        {"a": supplied("a", ("Marie Curie", "born in", "Warsaw"))}
    )
    (folder / TRIPLE_VECTORS_FILE).unlink()  # as if a crash lost this write
    embed = CountingEmbed(embed_fn)
    graph = KnowledgeGraph(folder, embed)
    assert embed.texts == ["Marie Curie born in Warsaw"]
    assert graph.snapshot.edge_vectors.shape == (1, 384)


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
