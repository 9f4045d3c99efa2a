"""``kg.edits.plan``: what a change does to the graph, planned from its snapshot alone
(``tests/kg/test_snapshot_apply.py`` checks, over random changes, that the snapshot
applied with it is the one a start builds from the file)."""

from __future__ import annotations

from pathlib import Path

from kg import EmbedFn, KnowledgeGraph
from kg.edits import GraphEdit, keyed_triples, plan
from kg.views import around, degrees
from tests.kg.kg_testdata import supplied


def planned(graph: KnowledgeGraph, **documents: list[tuple[str, str, str]]) -> GraphEdit:
    """The plan for replacing each document's triples (an empty list: the document goes)."""
    keyed = {
        doc: keyed_triples(doc, supplied(doc, *facts), graph.normalizer)
        for doc, facts in documents.items()
    }
    return plan(graph.snapshot, keyed)


def test_dropping_a_document_keeps_the_other_documents_edges_on_a_shared_entity(
    tmp_path: Path, embed_fn: EmbedFn
) -> None:
    graph = KnowledgeGraph(tmp_path / "kg", embed_fn)
    graph.replace_documents(
        {
            "a": supplied("a", ("Git", "uses", "SHA-1"), ("git", "stores", "Blob")),
            "b": supplied("b", ("GIT", "tracks", "Files")),
        }
    )
    git = graph.snapshot.node_position("git")
    assert git is not None and graph.snapshot.node_names[git] == "Git"
    edit = planned(graph, a=[])
    assert edit.touched == {"git", "sha-1", "blob"}
    assert edit.change.removed_nodes == {"sha-1", "blob"}
    assert edit.change.names == {"git": "GIT"}  # the surviving document's surface form
    assert edit.released == {"Git uses SHA-1", "git stores Blob"}
    assert list(edit.change.edges) == [] and set(edit.change.removed_docs) == {"a"}


def test_a_text_goes_only_when_no_edge_states_it(tmp_path: Path, embed_fn: EmbedFn) -> None:
    graph = KnowledgeGraph(tmp_path / "kg", embed_fn)
    fact = ("Ada", "wrote", "Notes")
    graph.replace_documents(
        {"a": supplied("a", fact, ("Ada", "knew", "Babbage")), "b": supplied("b", fact)}
    )
    assert planned(graph, a=[]).released == {"Ada knew Babbage"}  # b still states it
    assert planned(graph, a=[], b=[]).released == {"Ada wrote Notes", "Ada knew Babbage"}
    # Dropped by one document and stated by another in the same change: it stays.
    assert planned(graph, a=[], c=[fact]).released == {"Ada knew Babbage"}
    assert planned(graph, a=[fact]).released == {"Ada knew Babbage"}


def test_a_new_entity_takes_the_first_name_given_and_an_old_one_keeps_a_true_one(
    tmp_path: Path, embed_fn: EmbedFn
) -> None:
    graph = KnowledgeGraph(tmp_path / "kg", embed_fn)
    graph.replace_documents({"a": supplied("a", ("Lyon", "lies on", "Rhone"))})
    edit = planned(
        graph,
        b=[("LYON", "twinned with", "Turin"), ("turin", "lies on", "Po")],
        c=[("TURIN", "capital of", "Piedmont")],
    )
    assert edit.change.names == {
        "lyon": "Lyon",  # a still names it so
        "turin": "Turin",  # the first name the rows give
        "po": "Po",
        "piedmont": "Piedmont",
    }
    assert edit.change.removed_nodes == set()
    # The only edge that named it "Lyon" goes: the least of the remaining names.
    edit = planned(graph, a=[("lyon", "lies on", "Rhone")], b=[("LYON", "near", "Vienne")])
    assert edit.change.names["lyon"] == "LYON"


def test_a_self_loop_is_one_incident_edge_and_counts_twice(
    tmp_path: Path, embed_fn: EmbedFn
) -> None:
    graph = KnowledgeGraph(tmp_path / "kg", embed_fn)
    graph.replace_documents({"a": supplied("a", ("Git", "wraps", "Git"), ("Git", "uses", "SHA-1"))})
    snap = graph.snapshot
    git, sha = snap.node_position("git"), snap.node_position("sha-1")
    assert git is not None and sha is not None
    assert len(snap.incident(git)) == 2
    assert (degrees(snap)[git], degrees(snap)[sha]) == (3, 1)
    found = around(snap, graph.normalizer, "GIT", 10)
    assert found is not None and found.entity.degree == 3
    assert [t.object for t in found.outgoing] == ["SHA-1", "Git"]
    assert found.incoming == [] and found.total == 2
    edit = planned(graph, a=[("Git", "uses", "SHA-1")])
    assert edit.change.removed_nodes == set() and edit.released == {"Git wraps Git"}
