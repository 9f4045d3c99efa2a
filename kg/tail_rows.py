"""The float32 rows an embedding table writes while the service runs: in memory, and past
``SPILL_BYTES`` in a file of no name in the graph's folder (``kg.file_matrix.RowFile``).

A table a start adopts keeps its rows in the saved snapshot's files, mapped and read by
file reads (``kg.file_matrix``). The rows a running service adds went to memory until
its next start: a graph fed its documents live to 1,000,000 chunks would hold its
3.2 million triples' and 2.1 million entities' vectors there, 8 GB in float32 (a probe of
the entities' table alone, grown to 2.1 million rows: a peak of 6,627 MiB against 4,993
MiB for the same table adopted). Here the rows go to the file a block at a time, as a
start after a crash streams them (``kg.row_files.read_rows``), and are read back the
same way; what stays in memory is the last block, and the int8 codes a question's scan
reads (the table's, not here).

A view (``rows``) is what the table was at a moment, read-only: an array of the rows in
memory, or a ``SpilledMatrix`` of the file's first rows and the memory's. A spill
writes the memory's rows after the file's and starts a new block in new memory, so an
older view still reads its own block; none ever sees a row change.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from kg.file_matrix import RowFile, SpilledMatrix, take_rows

log = logging.getLogger(__name__)

#: The rows in memory go to the file once they take this much (174,762 rows of 384).
SPILL_BYTES = 256 << 20


class TailRows:
    """A table's rows written since its start, appended only, in memory and (with a
    ``folder``) past ``SPILL_BYTES`` in a ``RowFile`` there; module docstring."""

    __slots__ = ("_file", "_folder", "_memory", "_written", "dim", "spill_bytes")

    def __init__(
        self, dim: int, folder: Path | None = None, *, spill_bytes: int | None = None
    ) -> None:
        """``folder``: where rows past ``spill_bytes`` (``SPILL_BYTES``) go (None: all
        stay in memory)."""
        self.dim = dim
        self.spill_bytes = SPILL_BYTES if spill_bytes is None else spill_bytes
        self._folder = folder
        self._file: RowFile | None = None
        self._memory = np.zeros((0, dim), np.float32)  # rows after the file's
        self._written = 0  # of them

    @classmethod
    def over(cls, matrix: np.ndarray) -> TailRows:
        """Rows that are ``matrix``'s own rows (a start that read its vectors into
        memory adopts them so, without a copy); no folder."""
        tail = cls(int(matrix.shape[1]))
        tail._memory, tail._written = matrix, len(matrix)
        return tail

    def __len__(self) -> int:
        return (self._file.count if self._file is not None else 0) + self._written

    @property
    def in_memory(self) -> int:
        """How many of the rows are in memory (the rest are in the file)."""
        return self._written

    @property
    def capacity(self) -> int:
        """Rows the memory holds before it grows or spills."""
        return len(self._memory)

    def spill_to(self, folder: Path | None) -> None:
        """Where rows past ``spill_bytes`` go from now on (None: nowhere)."""
        self._folder = folder

    def rows(self) -> np.ndarray | SpilledMatrix:
        """Every row written so far, as a view that later writes leave as it is."""
        memory = self._memory[: self._written]
        return memory if self._file is None else SpilledMatrix(self._file, self._file.count, memory)

    def append(self, vectors: np.ndarray) -> None:
        """Write ``vectors`` (n, dim) after the rows; past ``spill_bytes`` in memory, the
        memory's rows go to the file (where the disk refuses them, they stay, and the
        table keeps its rows in memory from then on, with a warning)."""
        needed = self._written + len(vectors)
        if needed > len(self._memory):
            # A quarter more at a time: doubling left up to half of it unused.
            size = max(needed, 64, len(self._memory) + len(self._memory) // 4)
            if self._folder is not None:  # no more than a spill's worth, unless one call
                size = max(needed, min(size, self.spill_bytes // (4 * self.dim) + 1))
            grown = np.zeros((size, self.dim), np.float32)
            grown[: self._written] = self._memory[: self._written]
            self._memory = grown
        self._memory[self._written : needed] = vectors
        self._written = needed
        if self._folder is not None and self._written * self.dim * 4 >= self.spill_bytes:
            self._spill()

    def _spill(self) -> None:
        assert self._folder is not None
        try:
            if self._file is None:
                self._file = RowFile(self._folder, self.dim)
            self._file.append(self._memory[: self._written])
        except OSError as exc:
            log.warning(
                "knowledge graph: new vectors stay in memory, %s refused them: %s",
                self._folder,
                exc,
            )
            self._folder = None
            return
        # New memory: views taken before keep the old block (module docstring).
        self._memory = np.zeros((0, self.dim), np.float32)
        self._written = 0

    def compacted(self, rows: np.ndarray) -> TailRows:
        """New rows holding these ``rows`` (an index array), in that order, a block at a
        time (a table's compaction: its live rows, most of them perhaps on the disk)."""
        out = TailRows(self.dim, self._folder, spill_bytes=self.spill_bytes)
        view = self.rows()
        block = max(1, self.spill_bytes // (4 * self.dim))
        for start in range(0, len(rows), block):
            out.append(take_rows(view, rows[start : start + block]))
        return out
