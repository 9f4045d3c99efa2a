"""Embeddings of node names and triple texts, kept in memory (the graph's file persists them).

Vectors are computed once, when a triple first enters the graph, through an injected
``embed`` function; a restart loads them from disk instead of re-embedding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

EmbedFn = Callable[[Sequence[str]], np.ndarray]
"""Maps texts to a (len(texts), dim) array of L2-normalized rows."""


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """Return float32 rows scaled to unit length (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(vectors / norms, dtype=np.float32)


def embed_checked(embed: EmbedFn, texts: Sequence[str]) -> np.ndarray:
    """Call ``embed`` and check its shape; rows are re-normalized to guard cosine scores."""
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    vectors = np.asarray(embed(list(texts)))
    if vectors.ndim != 2 or vectors.shape[0] != len(texts):
        raise ValueError(
            f"embed returned shape {vectors.shape} for {len(texts)} texts; expected (n, dim)"
        )
    return normalize_rows(vectors)


class EmbeddingTable:
    """A key -> vector map stored as one matrix, so lookups gather rows without copying dicts.

    Removed keys free their row for reuse; the matrix grows by doubling.
    """

    def __init__(self, dim: int | None = None) -> None:
        self._dim = dim
        self._rows: dict[str, int] = {}
        self._free: list[int] = []
        self._matrix = np.zeros((0, dim or 0), dtype=np.float32)

    @classmethod
    def adopt(cls, keys: Sequence[str], matrix: np.ndarray) -> EmbeddingTable:
        """A table over ``matrix`` itself (row i is ``keys[i]``, keys unique): a start
        loads every stored vector this way, without a second copy of them."""
        table = cls(int(matrix.shape[1]) if len(keys) else None)
        if len(keys):
            if matrix.shape[0] != len(keys) or matrix.dtype != np.float32:
                raise ValueError(f"expected {len(keys)} float32 rows, got {matrix.shape}")
            table._rows = dict(zip(keys, range(len(keys)), strict=True))
            if len(table._rows) != len(keys):
                raise ValueError("keys repeat")
            table._matrix = np.require(matrix, requirements=["C", "W"])
        return table

    @property
    def dim(self) -> int | None:
        """Vector size, known after the first vectors arrive."""
        return self._dim

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def keys(self) -> list[str]:
        """All keys, in no particular order."""
        return list(self._rows)

    def missing(self, keys: Iterable[str]) -> list[str]:
        """The keys (deduplicated, in first-seen order) that have no vector yet."""
        return [k for k in dict.fromkeys(keys) if k not in self._rows]

    def add(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        """Store one vector per key (an existing key's vector is replaced)."""
        if len(keys) == 0:
            return
        vectors = np.asarray(vectors, dtype=np.float32)
        if self._dim is None:
            self._dim = int(vectors.shape[1])
            self._matrix = np.zeros((0, self._dim), dtype=np.float32)
        if vectors.shape != (len(keys), self._dim):
            raise ValueError(f"expected {(len(keys), self._dim)} vectors, got {vectors.shape}")
        rows = np.empty(len(keys), dtype=np.int64)
        for i, key in enumerate(keys):
            row = self._rows.get(key)
            if row is None:
                row = self._free.pop() if self._free else len(self._rows) + len(self._free)
                self._rows[key] = row
            rows[i] = row
        # One growth and one scatter for the whole call: a start adds every stored
        # vector at once (532,000 at 323,000 triples), where a check per row cost 2.5 s.
        self._reserve(int(rows.max()) + 1)
        self._matrix[rows] = vectors

    def retain(self, keep: set[str]) -> set[str]:
        """Drop every key not in ``keep``; return the dropped keys."""
        dropped = {k for k in self._rows if k not in keep}
        self.discard(dropped)
        return dropped

    def discard(self, keys: Iterable[str]) -> None:
        """Drop ``keys`` where present (their rows are zeroed and reused later)."""
        for key in keys:
            row = self._rows.pop(key, None)
            if row is not None:
                self._matrix[row] = 0.0
                self._free.append(row)

    def rows_for(self, keys: Sequence[str]) -> np.ndarray:
        """The matrix rows of ``keys`` (all must be present), as an index array."""
        return np.fromiter((self._rows[k] for k in keys), dtype=np.int64, count=len(keys))

    def gather(self, keys: Sequence[str]) -> np.ndarray:
        """A new contiguous (len(keys), dim) array with the vectors of ``keys``."""
        if self._dim is None:
            return np.zeros((len(keys), 0), dtype=np.float32)
        return np.ascontiguousarray(self._matrix[self.rows_for(keys)])

    def _reserve(self, rows: int) -> None:
        """Grow the matrix (by doubling) to hold at least ``rows`` rows."""
        if rows <= self._matrix.shape[0]:
            return
        size = max(64, self._matrix.shape[0])
        while size < rows:
            size *= 2
        grown = np.zeros((size, self._matrix.shape[1]), np.float32)
        grown[: self._matrix.shape[0]] = self._matrix
        self._matrix = grown
