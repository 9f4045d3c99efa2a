"""A start from the graph's rows (``kg.row_files``): its vectors streamed into files of
no snapshot and mapped, or, where the disk refuses them, read into memory and moved to
files once it takes them; the graph is the one the rows give either way."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kg.graph_file
import kg.row_files
from kg import EmbedFn, KnowledgeGraph
from kg.file_matrix import FileMatrix
from kg.snapshot_file import FILE, VECTOR_FILE
from tests.kg.kg_testdata import supplied
from tests.kg.snapshot_checks import assert_coded, codes_made
from tests.kg.test_kg_load import assert_same_snapshot, saved  # noqa: F401  (the fixture)


def test_a_start_after_a_crash_moves_the_vectors_it_read_into_mapped_files(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No snapshot to read back: the start reads the vectors into memory, and once the
    graph is prepared for changes they move to vector files mapped back, the snapshot unchanged;
    the entities' codes move with them, not made a second time."""
    coded = codes_made(monkeypatch)
    crashed = KnowledgeGraph(saved.folder, embed_fn)  # never closed: no snapshot saved
    assert not (saved.folder / FILE).exists()
    assert crashed.wait_prepared(timeout=30)
    for vectors in (crashed.snapshot.node_vectors, crashed.snapshot.edge_vectors):
        assert isinstance(vectors.matrix.base, np.memmap) and not len(vectors.matrix.tail)
    assert_coded(crashed)
    assert coded == [len(crashed.snapshot.node_keys)]
    assert len(list(saved.folder.glob(VECTOR_FILE.format(id="*", kind="*")))) == 2
    assert_same_snapshot(crashed.snapshot, saved.snapshot)
    for graph in (crashed, saved):
        graph.replace_documents({"new": supplied("new", ("Lyon", "lies on", "Rhone"))})
    assert_same_snapshot(crashed.snapshot, saved.snapshot)
    assert not (saved.folder / FILE).exists()  # the write; the mapped files stay
    assert len(list(saved.folder.glob(VECTOR_FILE.format(id="*", kind="*")))) == 2
    crashed.close()
    assert_same_snapshot(KnowledgeGraph(saved.folder, embed_fn).snapshot, saved.snapshot)


def test_a_start_after_a_crash_streams_the_vectors_into_mapped_files(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The vectors go from the graph's file to vector files a block at a time, never
    all in memory (8.2 GB at 1M chunks), before anything else is built; strays an
    earlier start left (no snapshot names them) are removed first."""
    stray = saved.folder / VECTOR_FILE.format(id="0123456789abcdef", kind="triples")
    np.save(stray, np.zeros((2, 4), np.float32))
    in_memory: list[str] = []
    monkeypatch.setattr(kg.graph_file, "in_memory", lambda kind, *_: in_memory.append(kind))
    monkeypatch.setattr(kg.graph_file, "_VECTOR_BLOCK_ROWS", 3)
    crashed = KnowledgeGraph(saved.folder, embed_fn, load=False)
    crashed.load(prepare=False)
    assert in_memory == [] and not stray.exists()
    files = sorted(saved.folder.glob(VECTOR_FILE.format(id="*", kind="*")))
    assert [p.name.rsplit("-", 1)[1] for p in files] == ["nodes.npy", "triples.npy"]
    for vectors in (crashed.snapshot.node_vectors, crashed.snapshot.edge_vectors):
        assert isinstance(vectors.matrix.base, FileMatrix) and vectors.matrix.base.reads_file
    assert_same_snapshot(crashed.snapshot, saved.snapshot)
    assert_coded(crashed)


def test_vectors_that_cannot_be_written_out_stay_in_memory(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full disk after a crash's start: the vectors stay where the start read them,
    with a warning, and no partial vector file is left; later changes do not try again
    (each would write every vector)."""

    def full(path: Path, write: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(kg.row_files, "atomic_write", full)
    with caplog.at_level(logging.WARNING, logger="kg.row_files"):
        crashed = KnowledgeGraph(saved.folder, embed_fn, load=False)
        crashed.load(prepare=False)
        crashed.remove_documents(["paris"])  # prepares the graph for changes, in this thread
        crashed.remove_documents(["curie"])
    assert "reading the vectors into memory" in caplog.text
    assert caplog.text.count("the vectors stay in memory") == 1
    assert not isinstance(crashed.snapshot.node_vectors.matrix.tail, np.memmap)
    assert_coded(crashed)
    assert not list(saved.folder.glob(VECTOR_FILE.format(id="*", kind="*")))
    saved.remove_documents(["paris"])
    saved.remove_documents(["curie"])
    assert_same_snapshot(crashed.snapshot, saved.snapshot)


def test_vectors_read_into_memory_move_to_files_once_the_disk_takes_them(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The disk refuses the vector files while a start after a crash reads the rows (the
    vectors go to memory, with a warning), then takes them: preparing the graph for its
    first change writes both tables to files and maps them (``kg.row_files.map_tables``),
    and the graph is the one the saved snapshot holds."""
    real = kg.row_files.atomic_write
    refused: list[str] = []

    def full_once(path: Path, write: Any) -> None:
        if len(refused) < 1:
            refused.append(path.name)
            raise OSError(28, "No space left on device")
        real(path, write)

    monkeypatch.setattr(kg.row_files, "atomic_write", full_once)
    with caplog.at_level(logging.WARNING, logger="kg.row_files"):
        crashed = KnowledgeGraph(saved.folder, embed_fn, load=False)
        crashed.load(prepare=False)
        assert not isinstance(crashed.snapshot.node_vectors.matrix.base, FileMatrix)
        crashed.remove_documents(["paris"])  # prepares the graph for changes, in this thread
    assert refused and "reading the vectors into memory" in caplog.text
    assert "the vectors stay in memory" not in caplog.text
    files = sorted(saved.folder.glob(VECTOR_FILE.format(id="*", kind="*")))
    assert [p.name.rsplit("-", 1)[1] for p in files] == ["nodes.npy", "triples.npy"]
    for table in (crashed._tables.nodes, crashed._tables.triples):
        assert isinstance(table.matrix.base, FileMatrix) and table.matrix.base.reads_file
    assert_coded(crashed)
    saved.remove_documents(["paris"])
    assert_same_snapshot(crashed.snapshot, saved.snapshot)
