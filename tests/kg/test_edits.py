"""``kg.edits.GraphEdits``: each entity's incident edges as documents come and go."""

from __future__ import annotations

from kg.edits import GraphEdits, KeyedTriple
from kg.models import Triple


def keyed(doc_id: str, *facts: tuple[str, str, str]) -> list[KeyedTriple]:
    """Facts keyed by their lower-cased names (what the normalizer does to these)."""
    return [
        (Triple(subject=s, predicate=p, object=o, doc_id=doc_id), s.lower(), p, o.lower())
        for s, p, o in facts
    ]


def test_a_self_loop_is_one_incident_edge_and_counts_twice() -> None:
    edits = GraphEdits()
    edits.add_edges("a", keyed("a", ("Git", "wraps", "Git"), ("Git", "uses", "SHA-1")))
    assert len(edits.incident["git"]) == 2
    assert (edits.degree("git"), edits.degree("sha-1"), edits.degree("nothing")) == (3, 1, 0)


def test_dropping_a_document_keeps_the_other_documents_edges_on_a_shared_entity() -> None:
    edits = GraphEdits()
    edits.add_edges("a", keyed("a", ("Git", "uses", "SHA-1"), ("git", "stores", "Blobs")))
    edits.add_edges("b", keyed("b", ("GIT", "tracks", "Files")))
    released: set[str] = set()
    touched = edits.drop_edges("a", released)
    assert touched == {"git", "sha-1", "blobs"}
    assert [r.doc_id for r in edits.incident["git"]] == ["b"]
    assert edits.settle_nodes(touched) == {"sha-1", "blobs"}
    assert "sha-1" not in edits.incident
    assert edits.node_names["git"] == "GIT"  # the surviving document's surface form
    assert edits.degree("git") == 1
    assert released == {"Git uses SHA-1", "git stores Blobs"}


def test_rebuilt_from_rows_the_incident_edges_are_the_same() -> None:
    edits = GraphEdits()
    edits.add_edges("a", keyed("a", ("Git", "wraps", "Git"), ("Git", "uses", "SHA-1")))
    edits.add_edges("b", keyed("b", ("SHA-1", "hashes", "Blobs")))
    again = GraphEdits.of_rows(list(edits.edges()), edits.node_names)
    assert again.incident == edits.incident
    assert again.text_refs == edits.text_refs
