"""Knowledge graph of warmrag: triples from documents, and the few that matter for a question.

- ``validate_triples`` / ``supplied_triples``: check caller-supplied ``[s, p, o]`` triples.
- ``TripleExtractor``: spaCy dependency rules, text -> triples with chunk provenance.
- ``KnowledgeGraph``: the persisted, document-consistent networkx store (+ embeddings).
- ``SubgraphSelector``: links a question to nodes and returns at most 3 ranked triples.
"""

from kg.embeddings import EmbeddingTable, EmbedFn
from kg.extract import TripleExtractor
from kg.index import GraphSnapshot
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
from kg.subgraph import LinkedNodes, PassageRef, SubgraphSelector

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
