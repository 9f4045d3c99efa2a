"""Triple extraction with the real spaCy model, on sentences with known answers."""

from __future__ import annotations

import pytest

from kg import KnowledgeGraph, TripleExtractor, load_nlp
from tests.kg.kg_testdata import CORPUS


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("Marie Curie was born in Warsaw.", ("Marie Curie", "born in", "Warsaw")),
        ("Curie was born in Warsaw.", ("Curie", "born in", "Warsaw")),
        (
            "Polonium was discovered by Marie Curie in 1898.",
            ("Marie Curie", "discover", "Polonium"),
        ),
        (
            "The Eiffel Tower was designed by Gustave Eiffel.",
            ("Gustave Eiffel", "design", "Eiffel Tower"),
        ),
        ("Marie Curie won the Nobel Prize in 1903.", ("Marie Curie", "win", "Nobel Prize")),
        ("Marie Curie won the Nobel Prize in 1903.", ("Marie Curie", "win in", "1903")),
        ("Paris is the capital of France.", ("Paris", "be capital of", "France")),
        ("Marie Curie is a physicist.", ("Marie Curie", "be", "physicist")),
        (
            "The University of Paris hired Marie Curie.",
            ("University of Paris", "hire", "Marie Curie"),
        ),
        (
            "Albert Einstein developed the theory of relativity.",
            ("Albert Einstein", "develop", "theory of relativity"),
        ),
        (
            "Alan Turing did not invent the telephone.",
            ("Alan Turing", "not invent", "telephone"),
        ),
        ("The company set up a new office in Berlin.", ("company", "set up in", "Berlin")),
        (
            "Marie Curie studied radioactive elements with many other scientists.",
            ("Marie Curie", "study", "radioactive elements"),
        ),
        (
            "Marie Curie studied radioactive elements with many other scientists.",
            ("Marie Curie", "study with", "scientists"),
        ),
    ],
)
def test_extracts_expected_triple(
    extractor: TripleExtractor, sentence: str, expected: tuple[str, str, str]
) -> None:
    assert expected in extractor.extract(sentence)


def test_conjoined_subjects_and_objects(extractor: TripleExtractor) -> None:
    triples = extractor.extract("Pierre and Marie Curie discovered polonium and radium.")
    assert set(triples) == {
        ("Pierre", "discover", "polonium"),
        ("Pierre", "discover", "radium"),
        ("Marie Curie", "discover", "polonium"),
        ("Marie Curie", "discover", "radium"),
    }


def test_conjoined_verb_borrows_the_subject(extractor: TripleExtractor) -> None:
    triples = extractor.extract("Curie was born in Warsaw and moved to Paris.")
    assert ("Curie", "move to", "Paris") in triples


DOURO = (
    "Vineyards in the Douro valley irrigate at night. "
    "Growers in the Douro valley use the Kestrel sensor to schedule irrigation."
)


def test_a_place_no_verb_joins_is_an_entity_the_search_finds(
    extractor: TripleExtractor, graph: KnowledgeGraph
) -> None:
    # No verb joins "Douro valley" (the small model even reads the first sentence as one
    # noun phrase); it modifies "Growers", so it comes as (Growers, in, Douro valley).
    graph.replace_documents({"douro": extractor.extract_chunks("douro", [("douro#0", DOURO)])})
    triples = [t.as_list() for t in graph.triples_for_document("douro")]
    assert ["Growers", "use", "Kestrel sensor"] in triples
    assert ["Growers", "use to", "schedule irrigation"] in triples
    assert ["Growers", "in", "Douro valley"] in triples
    assert [(e.key, e.name) for e in graph.search_entities("douro")] == [
        ("douro valley", "Douro valley")
    ]
    assert [(e.key, e.name) for e in graph.search_entities("DOURO VALLEY")] == [
        ("douro valley", "Douro valley")
    ]


def test_only_modifiers_of_entities_a_verb_triple_joins_are_kept(
    extractor: TripleExtractor,
) -> None:
    triples = extractor.extract("Curie left the laboratory in Warsaw for a post in Paris.")
    assert ("Curie", "leave for", "post") in triples
    assert ("post", "in", "Paris") in triples
    # "Vineyards in the Douro valley irrigate" parses as one noun phrase, no verb: nothing.
    assert extractor.extract(DOURO.split(". ")[0]) == []
    # An "of" complement is part of the name, not a triple of its own.
    assert extractor.extract("Einstein joined the faculty of Princeton in 1933.") == [
        ("Einstein", "join", "faculty of Princeton"),
        ("Einstein", "join in", "1933"),
    ]


def test_pronoun_subjects_are_skipped(extractor: TripleExtractor) -> None:
    assert extractor.extract("She moved to Paris in 1891.") == []


def test_relative_pronoun_resolves_to_the_noun(extractor: TripleExtractor) -> None:
    triples = extractor.extract("The woman who discovered radium was Marie Curie.")
    assert ("woman", "discover", "radium") in triples


def test_chunks_carry_provenance(extractor: TripleExtractor) -> None:
    triples = extractor.extract_chunks(
        "doc-7",
        [("doc-7#0", "Marie Curie was born in Warsaw."), ("doc-7#1", "Nothing to see here.")],
    )
    assert [t.as_list() for t in triples] == [["Marie Curie", "born in", "Warsaw"]]
    assert triples[0].doc_id == "doc-7"
    assert triples[0].chunk_id == "doc-7#0"
    assert triples[0].source == "extracted"


def test_duplicates_within_a_text_are_dropped(extractor: TripleExtractor) -> None:
    text = "Marie Curie was born in Warsaw. Marie Curie was born in Warsaw."
    assert extractor.extract(text) == [("Marie Curie", "born in", "Warsaw")]


def test_model_is_loaded_once_per_process(extractor: TripleExtractor) -> None:
    assert load_nlp() is load_nlp()
    assert extractor.nlp is load_nlp()


def test_documents_in_one_stream_match_one_by_one(extractor: TripleExtractor) -> None:
    together = extractor.extract_documents(CORPUS)
    assert list(together) == list(CORPUS)
    for doc_id, chunks in CORPUS.items():
        assert together[doc_id] == extractor.extract_chunks(doc_id, chunks)
    assert extractor.extract_documents({"empty": []}) == {"empty": []}


def test_unused_components_are_skipped() -> None:
    # Extraction never reads entities: the recognizer was over half of the parse time.
    assert "ner" not in load_nlp().pipe_names
    assert {"tagger", "parser", "lemmatizer"} <= set(load_nlp().pipe_names)
