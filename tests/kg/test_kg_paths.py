"""Path-aware triple choice (kg/paths.py, kg/intent.py) with the real embedding model:
two-step questions get the triple that answers them, restatements give way, and the
order stays canonical and repeatable."""

from __future__ import annotations

from pathlib import Path

import pytest

from kg import EmbedFn, KnowledgeGraph, ScoredTriple, SubgraphSelector, Triple
from kg.intent import RelationIntent
from kg.normalize import default_normalizer

WORLDS = {
    ("Aquila soil sensor", "Brightfield Instruments", "Tamsworth", "Mara Quint", "based in"),
    ("Borealis grain dryer", "Coldwater Agritech", "Kelbridge", "Tobias Lenk", "headquartered in"),
}


def documents() -> dict[str, list[Triple]]:
    docs: dict[str, list[Triple]] = {}
    for product, company, city, founder, located in sorted(WORLDS):
        pid, cid = f"product:{product}", f"company:{company}"
        docs[pid] = [
            Triple(subject=s, predicate=p, object=o, doc_id=pid)
            for s, p, o in [
                (product, "made by", company),
                (company, "builds", product),  # the same pair, the inverse predicate
                ("growers", "use", product),
                (product, "measures", "soil moisture"),
                (product, "sold in", "Northern Europe"),
            ]
        ]
        docs[cid] = [
            Triple(subject=s, predicate=p, object=o, doc_id=cid)
            for s, p, o in [
                (company, located, city),
                (company, "founded by", founder),
                (company, "founded in", "1987"),
                (company, "employs", "forty engineers"),
            ]
        ]
    return docs


@pytest.fixture(scope="module")
def world_graph(tmp_path_factory: pytest.TempPathFactory, embed_fn: EmbedFn) -> KnowledgeGraph:
    graph = KnowledgeGraph(tmp_path_factory.mktemp("kg"), embed_fn)
    graph.replace_documents(documents())
    return graph


def choose(
    selector: SubgraphSelector, embed_fn: EmbedFn, question: str, product: str
) -> list[tuple[str, str, str]]:
    passages = [(f"product:{product}", f"product:{product}#0")]  # what retrieval finds
    chosen = selector.select(question, embed_fn([question])[0], passages)
    return [(t.subject, t.predicate, t.object) for t in chosen]


@pytest.mark.parametrize(
    ("question", "product", "answer"),
    [
        (
            "Where is the company that makes the Aquila soil sensor based?",
            "Aquila soil sensor",
            ("Brightfield Instruments", "based in", "Tamsworth"),
        ),
        (  # "based" asked, "headquartered in" stated: one relation group
            "Where is the maker of the Borealis grain dryer based?",
            "Borealis grain dryer",
            ("Coldwater Agritech", "headquartered in", "Kelbridge"),
        ),
        (
            "Who founded the company that makes the Aquila soil sensor?",
            "Aquila soil sensor",
            ("Brightfield Instruments", "founded by", "Mara Quint"),
        ),
    ],
)
def test_a_two_step_question_gets_the_triple_that_answers_it(
    world_graph: KnowledgeGraph,
    embed_fn: EmbedFn,
    question: str,
    product: str,
    answer: tuple[str, str, str],
) -> None:
    plain = choose(SubgraphSelector(world_graph, path_weights=None), embed_fn, question, product)
    paths = choose(SubgraphSelector(world_graph), embed_fn, question, product)
    assert answer not in plain  # each triple by its own score: near-duplicates win
    assert answer in paths
    assert paths == sorted(paths)  # canonical order: the prompt prefix is stable
    # the bridge that leads there is kept; its inverse restatement is not
    company = answer[0]
    assert (product, "made by", company) in paths
    assert (company, "builds", product) not in paths


def test_the_choice_is_repeatable_and_scores_say_what_won(
    world_graph: KnowledgeGraph, embed_fn: EmbedFn
) -> None:
    question = "Where is the company that makes the Aquila soil sensor based?"
    vector = embed_fn([question])[0]
    passages = [("product:Aquila soil sensor", "x")]
    first = SubgraphSelector(world_graph).select(question, vector, passages)
    again = SubgraphSelector(world_graph).select(question, vector, passages)
    assert first == again
    answer = next(t for t in first if t.predicate == "based in")
    assert isinstance(answer, ScoredTriple) and answer.score >= 0.3


def test_the_reach_is_the_entities_the_chosen_triples_join(
    world_graph: KnowledgeGraph, embed_fn: EmbedFn
) -> None:
    question = "Where is the company that makes the Aquila soil sensor based?"
    triples, reach = SubgraphSelector(world_graph).select_with_reach(
        question, embed_fn([question])[0], [("product:Aquila soil sensor", "x")]
    )
    normalize = default_normalizer().normalize
    assert reach == {normalize(name) for t in triples for name in (t.subject, t.object)}
    assert normalize("Tamsworth") in reach


def test_empty_graph_and_no_slots(tmp_path: Path, embed_fn: EmbedFn) -> None:
    graph = KnowledgeGraph(tmp_path / "kg", embed_fn)
    vector = embed_fn(["Where is Brightfield based?"])[0]
    assert SubgraphSelector(graph).select_with_reach("Where?", vector) == ([], frozenset())


@pytest.mark.parametrize(
    ("question", "predicate", "matches"),
    [
        ("Where is the maker based?", "headquartered in", True),
        ("Where is the maker based?", "located in", True),
        ("Who founded the firm?", "founded by", True),
        ("Who founded the firm?", "sold in", False),
        ("Which company owns the brand?", "owned by", True),  # "own" is a stop word to spaCy
        ("Where is the Aquila soil sensor sold?", "soil sensor of", False),  # entity words
        ("What is it?", "made by", False),  # nothing asked for
    ],
)
def test_relation_intent(question: str, predicate: str, matches: bool) -> None:
    intent = RelationIntent(default_normalizer(), question, ["aquila", "soil", "sensor"])
    assert intent.matches(predicate) is matches
