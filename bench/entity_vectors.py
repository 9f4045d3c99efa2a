"""Vectors for a graph built at scale, shaped like the real corpus's entities'.

The scale section files a synthetic graph (``bench.scale_folder``): 2.09 entities per
chunk, 2.1 million at 1,000,000 chunks, too many to embed their names. Random unit
vectors stood in for them. But those have no principal axes, and against a question
none of them scores near the link's threshold (0.5): no question ever linked to an entity
by embedding, so the scan was measured on a link that keeps nothing, and the turned codes
(``kg.lead_rows``) would have nothing to drop.

These are drawn from a Gaussian with the mean and covariance of the vectors of the real
corpus's entities (every section of Git's documentation through the graph's own extractor,
embedded by the default embedder), then normalized. Against the real corpus's questions
they score as the real entities' spread would at scale: at 209,456 vectors (100,000
chunks) 96 a question reach 0.5 (median fifth best 0.47). The real entities themselves are
more clustered (2 % of 2,939 reach 0.5), so a scan on real entities at this size keeps
more rows than these let it. The scale section's questions naming an entity
(``bench.scale_startup.entity_questions``) score at most 0.32 against either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from bench.real_corpus import load_sections
from kg.extract import TripleExtractor
from rag.knowledge.embedding import shared_embedder

_DRAW_ROWS = 65_536
"""Rows drawn at a time."""


@dataclass(frozen=True)
class VectorShape:
    """A mean and a covariance (as its lower Cholesky factor) to draw vectors from."""

    mean: np.ndarray
    factor: np.ndarray
    fit_to: int  # how many vectors they were estimated from

    @classmethod
    def fit(cls, vectors: np.ndarray) -> VectorShape:
        """The shape of ``vectors`` (n, dim), n > dim."""
        sample = np.asarray(vectors, np.float64)
        covariance = np.cov(sample.T) + 1e-9 * np.eye(sample.shape[1])
        return cls(sample.mean(axis=0), np.linalg.cholesky(covariance), len(sample))

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``count`` unit float32 vectors drawn with this shape, a block of rows at a time
        (the same vectors as at once: the generator's stream runs on), so that 2 million
        take 3 GB, not the float64 draws' 13."""
        out = np.empty((count, len(self.mean)), np.float32)
        for start in range(0, count, _DRAW_ROWS):
            rows = min(_DRAW_ROWS, count - start)
            drawn = rng.standard_normal((rows, len(self.mean))) @ self.factor.T + self.mean
            out[start : start + rows] = drawn / np.linalg.norm(drawn, axis=1, keepdims=True)
        return out


class ShapedEmbedder:
    """An embed function for ``kg.KnowledgeGraph`` that draws each text's vector from a
    shape (a seeded generator: the same texts in the same order get the same vectors)."""

    def __init__(self, shape: VectorShape, seed: int) -> None:
        self._shape = shape
        self._rng = np.random.default_rng(seed)
        self.texts = 0

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += len(texts)
        return self._shape.draw(self._rng, len(texts))


@cache
def real_entity_shape() -> VectorShape:
    """The shape of the real corpus's entity vectors (about 15 s: the extractor over every
    section, then the names embedded)."""
    sections = load_sections()
    extracted = TripleExtractor().extract_documents(
        {s.id: [(f"{s.id}#0", s.body)] for s in sections}
    )
    ends = (end for triples in extracted.values() for t in triples for end in (t.subject, t.object))
    names = sorted(set(ends))
    return VectorShape.fit(shared_embedder().embed_texts(names))


@cache
def real_questions() -> tuple[str, ...]:
    """The real corpus's questions, in its order."""
    return tuple(s.question for s in load_sections() if s.question)
