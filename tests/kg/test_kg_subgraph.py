"""Subgraph selection over a small real graph, with the real embedding model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kg import (
    EmbedFn,
    KnowledgeGraph,
    ScoredTriple,
    SubgraphSelector,
    TripleExtractor,
)
from tests.kg.kg_testdata import CORPUS, CountingEmbed, corpus_triples, supplied

DOCS = ("curie", "einstein", "paris")


@pytest.fixture(scope="module")
def corpus_graph(
    tmp_path_factory: pytest.TempPathFactory,
    embed_fn: EmbedFn,
    extractor: TripleExtractor,
) -> KnowledgeGraph:
    graph = KnowledgeGraph(tmp_path_factory.mktemp("kg"), embed_fn)
    graph.replace_documents({doc: corpus_triples(extractor, doc) for doc in DOCS})
    return graph


@pytest.fixture(scope="module")
def selector(corpus_graph: KnowledgeGraph) -> SubgraphSelector:
    return SubgraphSelector(corpus_graph)


def ask(
    selector: SubgraphSelector,
    embed_fn: EmbedFn,
    question: str,
    passages: list[tuple[str, str]] | None = None,
    **kwargs: int,
) -> list[ScoredTriple]:
    return selector.select(question, embed_fn([question])[0], passages or [], **kwargs)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Where was Marie Curie born?", ["Marie Curie", "born in", "Warsaw"]),
        ("Where was Curie born?", ["Marie Curie", "born in", "Warsaw"]),  # linked by embedding
        ("Who designed the Eiffel Tower?", ["Gustave Eiffel", "design", "Eiffel Tower"]),
        ("What did Einstein develop?", ["Albert Einstein", "develop", "theory of relativity"]),
        ("What is the capital of France?", ["Paris", "be capital of", "France"]),
    ],
)
def test_relation_question_gets_the_relevant_triple_first(
    selector: SubgraphSelector,
    embed_fn: EmbedFn,
    question: str,
    expected: list[str],
) -> None:
    triples = ask(selector, embed_fn, question)
    assert expected in [t.as_list() for t in triples]
    best = max(triples, key=lambda t: t.score)
    assert best.as_list() == expected


def test_at_most_three_triples_in_canonical_order(
    selector: SubgraphSelector, embed_fn: EmbedFn
) -> None:
    # Marie Curie has seven triples within two hops; only three may reach the prompt.
    triples = ask(selector, embed_fn, "Tell me about Marie Curie and her work.")
    assert len(triples) == 3
    keys = [(t.subject, t.predicate, t.object) for t in triples]
    assert keys == sorted(keys)
    assert all(isinstance(t.score, float) for t in triples)


def test_max_triples_is_respected(selector: SubgraphSelector, embed_fn: EmbedFn) -> None:
    one = ask(selector, embed_fn, "Where was Marie Curie born?", max_triples=1)
    assert [t.as_list() for t in one] == [["Marie Curie", "born in", "Warsaw"]]
    assert ask(selector, embed_fn, "Where was Marie Curie born?", max_triples=0) == []


def test_same_inputs_same_output_across_instances(
    tmp_path: Path,
    corpus_graph: KnowledgeGraph,
    selector: SubgraphSelector,
    embed_fn: EmbedFn,
    extractor: TripleExtractor,
) -> None:
    question = "Which prizes did Marie Curie and Albert Einstein win?"
    vector = embed_fn([question])[0]
    passages = [("curie", "curie#1"), ("einstein", "einstein#0")]
    first = selector.select(question, vector, passages)
    assert selector.select(question, vector, passages) == first

    # Reloaded from disk, and built in another order: same answer.
    reloaded = SubgraphSelector(KnowledgeGraph(corpus_graph.folder, embed_fn))
    assert reloaded.select(question, vector, passages) == first
    reverse = KnowledgeGraph(tmp_path / "reverse", embed_fn)
    for doc in reversed(DOCS):
        reverse.replace_documents({doc: corpus_triples(extractor, doc)})
    assert SubgraphSelector(reverse).select(question, vector, passages) == first


def test_passages_link_and_boost_their_triples(
    selector: SubgraphSelector, embed_fn: EmbedFn
) -> None:
    # The question names no entity of the graph; the retrieved chunk supplies the link.
    question = "Who designed that famous iron landmark?"
    with_passage = ask(selector, embed_fn, question, [("paris", "paris#0")])
    assert ["Gustave Eiffel", "design", "Eiffel Tower"] in [t.as_list() for t in with_passage]
    boosted = {tuple(t.as_list()): t.score for t in with_passage}
    plain = SubgraphSelector(selector.graph, passage_boost=0.0, min_score=-1.0)
    unboosted = {
        tuple(t.as_list()): t.score
        for t in plain.select(question, embed_fn([question])[0], [("paris", "paris#0")])
    }
    key = ("Gustave Eiffel", "design", "Eiffel Tower")
    assert boosted[key] == pytest.approx(unboosted[key] + selector.passage_boost, abs=1e-5)


def test_supplied_triples_link_through_any_passage_of_their_document(
    selector: SubgraphSelector, embed_fn: EmbedFn
) -> None:
    linked = selector.link(
        "What country is it in?",
        embed_fn(["What country is it in?"])[0],
        [("curie", "curie#1")],
    )
    snap = selector.graph.snapshot
    assert {snap.node_keys[i] for i in linked.passage} >= {"warsaw", "poland"}


def test_unrelated_question_gets_no_triples(selector: SubgraphSelector, embed_fn: EmbedFn) -> None:
    assert ask(selector, embed_fn, "How long should I knead bread dough?") == []


def test_one_fact_from_two_documents_is_offered_once(tmp_path: Path, embed_fn: EmbedFn) -> None:
    graph = KnowledgeGraph(tmp_path / "kg", embed_fn)
    graph.replace_documents({"a": supplied("a", ("Marie Curie", "born in", "Warsaw"))})
    graph.replace_documents({"b": supplied("b", ("marie curie", "born in", "warsaw"))})
    triples = ask(SubgraphSelector(graph, min_score=-1.0), embed_fn, "Where was Curie born?")
    assert len(triples) == 1


def test_candidate_cap_bounds_the_work_deterministically(tmp_path: Path, embed_fn: EmbedFn) -> None:
    hub = [("Qdrant", "integrates with", f"Tool {i}") for i in range(40)]
    graph = KnowledgeGraph(tmp_path / "kg", embed_fn)
    graph.replace_documents({"hub": supplied("hub", *hub)})
    selector = SubgraphSelector(graph, max_candidate_edges=10, min_score=-1.0)
    question = "What does Qdrant integrate with?"
    vector = embed_fn([question])[0]
    linked = selector.link(question, vector, [])
    candidates = selector.candidate_edges(graph.snapshot, linked)
    assert candidates.size == 10
    first = selector.select(question, vector, [])
    assert len(first) == 3
    assert selector.select(question, vector, []) == first


def test_empty_graph_selects_nothing(tmp_path: Path, counting_embed: CountingEmbed) -> None:
    graph = KnowledgeGraph(tmp_path / "kg", counting_embed)
    vector = np.ones(384, dtype=np.float32)
    assert SubgraphSelector(graph).select("Where was Marie Curie born?", vector, []) == []


def test_corpus_is_what_the_tests_think(corpus_graph: KnowledgeGraph) -> None:
    assert corpus_graph.document_ids() == sorted(CORPUS)


def test_links_made_before_the_passages_select_what_one_call_selects(
    selector: SubgraphSelector, embed_fn: EmbedFn
) -> None:
    """The retriever links a question while its passages are searched, then selects with
    those links: the same triples and reach as a selection that links by itself."""
    question = "Where was Curie born?"
    vector = embed_fn([question])[0]
    passages = [("curie", "curie#1")]
    links = selector.link_question(question, vector)
    assert links.similar and links.snap is selector.graph.snapshot
    whole = selector.select_with_reach(question, vector, passages)
    assert whole[0]
    assert selector.select_with_reach(question, vector, passages, links=links) == whole


def test_a_selection_reads_the_snapshot_its_links_were_made_from(
    tmp_path: Path, embed_fn: EmbedFn
) -> None:
    """A change between the link and the rest of the selection does not mix two
    snapshots: the selection is the one of the graph the question was linked on."""
    graph = KnowledgeGraph(tmp_path / "kg", embed_fn)
    graph.replace_documents({"a": supplied("a", ("Marie Curie", "born in", "Warsaw"))})
    selector = SubgraphSelector(graph, min_score=-1.0)
    question = "Where was Marie Curie born?"
    vector = embed_fn([question])[0]
    links = selector.link_question(question, vector)
    graph.replace_documents({"a": supplied("a", ("Marie Curie", "died in", "Passy"))})
    before, _ = selector.select_with_reach(question, vector, links=links)
    after, _ = selector.select_with_reach(question, vector)
    assert [t.object for t in before] == ["Warsaw"]
    assert [t.object for t in after] == ["Passy"]


def test_an_empty_graph_links_nothing(tmp_path: Path, counting_embed: CountingEmbed) -> None:
    graph = KnowledgeGraph(tmp_path / "kg", counting_embed)
    links = SubgraphSelector(graph).link_question("Where?", np.ones(384, dtype=np.float32))
    assert (links.lexical, links.similar) == ([], [])
