"""Shared test data and helpers for the knowledge-graph tests (imported by conftest and tests)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kg import EmbedFn, Triple, TripleExtractor


class CountingEmbed:
    """Delegates to the real embedder and records every call, to prove what was (re)embedded."""

    def __init__(self, inner: EmbedFn) -> None:
        self._inner = inner
        self.calls: list[list[str]] = []

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return self._inner(texts)

    @property
    def texts(self) -> list[str]:
        return [text for call in self.calls for text in call]


def supplied(doc_id: str, *triples: tuple[str, str, str]) -> list[Triple]:
    """Supplied (document-level) triples for ``doc_id``."""
    return [Triple(subject=s, predicate=p, object=o, doc_id=doc_id) for s, p, o in triples]


CORPUS: dict[str, list[tuple[str, str]]] = {
    "curie": [
        (
            "curie#0",
            "Marie Curie was born in Warsaw. Marie Curie discovered polonium and radium.",
        ),
        (
            "curie#1",
            "Marie Curie won the Nobel Prize in 1903. The University of Paris hired Marie Curie.",
        ),
    ],
    "einstein": [
        (
            "einstein#0",
            "Albert Einstein was born in Ulm. Albert Einstein developed the theory of "
            "relativity. Albert Einstein won the Nobel Prize in 1921.",
        ),
    ],
    "paris": [
        (
            "paris#0",
            "Paris is the capital of France. The Eiffel Tower was designed by Gustave Eiffel. "
            "The Eiffel Tower stands in Paris.",
        ),
    ],
}
"""A small real corpus: chunk texts per document, as the ingest pipeline would pass them."""


def corpus_triples(extractor: TripleExtractor, doc_id: str) -> list[Triple]:
    """Extracted triples of one corpus document, plus one supplied triple for "curie"."""
    triples = extractor.extract_chunks(doc_id, CORPUS[doc_id])
    if doc_id == "curie":
        triples += supplied("curie", ("Warsaw", "capital of", "Poland"))
    return triples
