"""Knowledge graph of warmrag: triples from documents, and the few that matter for a question.

- ``validate_triples`` / ``supplied_triples``: check caller-supplied ``[s, p, o]`` triples.
- ``TripleExtractor``: spaCy dependency rules, text -> triples with chunk provenance.
- ``KnowledgeGraph``: the persisted, document-consistent triple store (+ embeddings).
- ``SubgraphSelector``: links a question to nodes and returns at most 3 ranked triples.

The names below load on first use (PEP 562): ``kg.models``, which the API's request
models import, must not pull in spaCy (3.5 s at import here) for the CLI's every start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kg.embeddings import EmbeddingTable, EmbedFn
    from kg.extract import TripleExtractor
    from kg.index import GraphSnapshot
    from kg.links import LinkedNodes, PassageRef
    from kg.models import (
        MAX_TERM_LENGTH,
        EntityInfo,
        ScoredTriple,
        Triple,
        TripleValidationError,
        supplied_triples,
        validate_triples,
    )
    from kg.nlp import load_nlp
    from kg.normalize import EntityNormalizer, default_normalizer, normalize_entity
    from kg.store import KnowledgeGraph
    from kg.subgraph import SubgraphSelector

#: Each exported name and the module that defines it.
_EXPORTS = {
    "EmbeddingTable": "kg.embeddings",
    "EmbedFn": "kg.embeddings",
    "TripleExtractor": "kg.extract",
    "GraphSnapshot": "kg.index",
    "MAX_TERM_LENGTH": "kg.models",
    "EntityInfo": "kg.models",
    "ScoredTriple": "kg.models",
    "Triple": "kg.models",
    "TripleValidationError": "kg.models",
    "supplied_triples": "kg.models",
    "validate_triples": "kg.models",
    "load_nlp": "kg.nlp",
    "EntityNormalizer": "kg.normalize",
    "default_normalizer": "kg.normalize",
    "normalize_entity": "kg.normalize",
    "KnowledgeGraph": "kg.store",
    "LinkedNodes": "kg.links",
    "PassageRef": "kg.links",
    "SubgraphSelector": "kg.subgraph",
}

__all__ = [
    "MAX_TERM_LENGTH",
    "EmbedFn",
    "EmbeddingTable",
    "EntityInfo",
    "EntityNormalizer",
    "GraphSnapshot",
    "KnowledgeGraph",
    "LinkedNodes",
    "PassageRef",
    "ScoredTriple",
    "SubgraphSelector",
    "Triple",
    "TripleExtractor",
    "TripleValidationError",
    "default_normalizer",
    "load_nlp",
    "normalize_entity",
    "supplied_triples",
    "validate_triples",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kg' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
