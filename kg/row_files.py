"""A start from the graph's rows (after a crash, or where no snapshot could be read):
its vectors streamed into vector files of no snapshot and mapped, not held.

A start after a crash once held every vector it read in memory until its first change
(8.2 GB at 1,000,000 chunks). ``read_rows`` streams each kind's vectors to a file a
block at a time as the graph's file reads them (``file_sink``); where the disk refuses,
they are read into memory with a warning, and ``map_tables`` tries again once the graph
is prepared for changes. The files belong to no snapshot: the next write or save removes
them (``kg.snapshot_file``); mapped, they stay readable until then.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import IO, Any

import numpy as np

from durable import atomic_write
from kg.embeddings import EmbeddingTable
from kg.file_matrix import FileMatrix
from kg.graph_file import NODE, TRIPLE, GraphFile, GraphRows, Vectors, VectorSink
from kg.saved_vectors import VECTOR_FILE, write_gathered
from kg.snapshot_file import mapped, remove_vector_files

log = logging.getLogger(__name__)

_KINDS = {NODE: "nodes", TRIPLE: "triples"}  # the graph file's kinds, as files name them


def map_tables(
    folder: Path, nodes: EmbeddingTable, triples: EmbeddingTable
) -> tuple[EmbeddingTable, EmbeddingTable] | None:
    """Tables with the same keys and vectors, their matrices written to vector files and
    mapped back: a start after a crash read the vectors into memory, and this moves them
    out of it. The files belong to no snapshot (the next write or save removes them;
    mapped, they stay readable). None, with a warning, where they cannot be written."""
    file_id = uuid.uuid4().hex[:16]
    tables = []
    try:
        for kind, table in (("nodes", nodes), ("triples", triples)):
            keys = table.keys()
            rows = table.rows_for(keys)
            path = folder / VECTOR_FILE.format(id=file_id, kind=kind)
            atomic_write(path, partial(write_gathered, table.matrix, rows))
            matrix = mapped(folder, file_id, kind)
            codes = table.matrix.codes_of(rows)  # the same rows: not coded again
            tables.append(
                EmbeddingTable.adopt(keys, matrix, quantized=table.quantized, codes=codes)
            )
    except (OSError, ValueError) as exc:
        remove_vector_files(folder, keep=None)
        log.warning("knowledge graph: the vectors stay in memory: %s", exc)
        return None
    return tables[0], tables[1]


def read_rows(
    graph_file: GraphFile, folder: Path, legacy: Any = None, to_files: bool = True
) -> GraphRows:
    """Every row of ``graph_file``, its vectors written to vector files of no snapshot
    and mapped (``file_sink``): a start after a crash once held them all in memory
    until its first change (8.2 GB at 1,000,000 chunks). Where the disk refuses
    the files, or not ``to_files`` (a graph that writes nothing), into memory (the
    first with a warning; ``map_tables`` tries again later)."""
    if not to_files:
        return graph_file.read(legacy=legacy)
    remove_vector_files(folder, keep=None)  # no snapshot is read: any are strays
    try:
        return graph_file.read(legacy=legacy, sink=file_sink(folder))
    except (OSError, ValueError) as exc:
        remove_vector_files(folder, keep=None)
        log.warning("knowledge graph: reading the vectors into memory: %s", exc)
        return graph_file.read(legacy=legacy)


def file_sink(folder: Path) -> VectorSink:
    """A ``VectorSink`` that writes each kind's vectors to a vector file of its own
    (named for no snapshot: the next write or save removes it; mapped, it stays
    readable) a block at a time, and maps it."""
    file_id = uuid.uuid4().hex[:16]

    def write(kind: str, count: int, blocks: Iterator[tuple[list[str], np.ndarray]]) -> Vectors:
        keys: list[str] = []
        first_keys, first = next(blocks)
        path = folder / VECTOR_FILE.format(id=file_id, kind=_KINDS[kind])

        def body(out: IO[bytes]) -> None:
            header = {"descr": "<f4", "fortran_order": False, "shape": (count, first.shape[1])}
            np.lib.format.write_array_header_1_0(out, header)
            for block_keys, block in itertools.chain([(first_keys, first)], blocks):
                out.write(block.astype("<f4", copy=False).tobytes())
                keys.extend(block_keys)
            if len(keys) != count:
                raise ValueError(f"{len(keys)} {kind} vectors read, {count} counted")

        atomic_write(path, body)
        return Vectors(keys, FileMatrix.open(path))

    return write
