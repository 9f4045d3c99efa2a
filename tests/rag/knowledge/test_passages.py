"""Passages from a search's hits (through a real index: ``test_knowledge_base.py``)."""

from __future__ import annotations

from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

from rag.knowledge.ingest import DOC_HASH_KEY
from rag.knowledge.passages import node_text, passages_from_hits, text_hash
from rag.knowledge.vectors import Hit


def hit(doc_id: str, chunk: int, doc_hash: str, score: float) -> Hit:
    node = TextNode(
        id_=f"{doc_id}#{chunk}",
        text=f"text {chunk} of {doc_id}",
        metadata={DOC_HASH_KEY: doc_hash, "title": "A title"},
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)},
    )
    return Hit(node, score)


def test_stale_hits_are_skipped_and_the_rest_cut_to_top_k() -> None:
    hits = [
        hit("a", 0, "old", 0.9),  # replaced: its document's hash moved on
        hit("b", 0, "hb", 0.81234567),
        hit("gone", 0, "hg", 0.8),  # its document was deleted
        hit("a", 1, "ha", 0.7),
        hit("b", 1, "hb", 0.6),
    ]
    current = {"a": "ha", "b": "hb", "gone": None}
    passages = passages_from_hits(hits, current, 2)
    assert [(p.doc_id, p.chunk_id) for p in passages] == [("b", "b#0"), ("a", "a#1")]
    assert passages[0].score == 0.812346
    assert passages[0].text == "text 0 of b"  # without the embedded title
    assert passages[0].content_hash == text_hash("text 0 of b")


def test_a_reader_without_the_lease_trusts_the_points() -> None:
    hits = [hit("a", 0, "old", 0.9), hit("b", 0, "hb", 0.8)]
    passages = passages_from_hits(hits, {"b": "hb"}, 3, trust_points=True)
    assert [p.chunk_id for p in passages] == ["a#0", "b#0"]


def test_node_text_leaves_the_metadata_out() -> None:
    node = hit("a", 0, "h", 1.0).node
    assert node_text(node) == "text 0 of a"
    assert text_hash("x") == text_hash("x") != text_hash("y")
    assert len(text_hash("x")) == 16
