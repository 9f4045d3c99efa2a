"""A saved snapshot that cannot be trusted (damaged, foreign, of a format no longer read,
with files that do not match it) is ignored and the start builds from the rows; a save
that fails leaves nothing a start could read."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kg.snapshot_file
from kg import EmbedFn, KnowledgeGraph
from kg.snapshot_file import FILE, VECTOR_FILE
from tests.kg.snapshot_checks import SNAPSHOT_FILES, assert_built_from_the_rows, rows_read
from tests.kg.test_kg_load import assert_same_snapshot, saved  # noqa: F401  (the fixture)


def test_a_damaged_or_foreign_snapshot_is_ignored(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    saved.close()
    (saved.folder / FILE).write_bytes(b"not a snapshot")
    (saved.folder / ".snapshot-left-by-a-crash.npz").write_bytes(b"partial")
    with caplog.at_level(logging.WARNING, logger="kg.snapshot_file"):
        again = KnowledgeGraph(saved.folder, embed_fn)
    assert "ignoring the saved snapshot" in caplog.text
    assert_same_snapshot(again.snapshot, saved.snapshot)
    assert not (saved.folder / ".snapshot-left-by-a-crash.npz").exists()


def test_a_snapshot_of_an_older_format_is_ignored(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A start after an upgrade that changed the saved fields builds from the rows."""
    monkeypatch.setattr(kg.snapshot_file, "FORMAT", 1)
    saved.close()
    monkeypatch.undo()
    assert_built_from_the_rows(saved, embed_fn, caplog, monkeypatch, "(format 1)")


def test_a_snapshot_whose_string_indexes_are_out_of_range_is_ignored(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    saved.close()
    path = saved.folder / FILE
    with np.load(path) as held:
        arrays = {name: held[name] for name in held.files}
    arrays["edge_doc_strings"][0] = 1 << 30
    with path.open("wb") as out:  # np.savez would add ".npz" to a name without it
        np.savez(out, **arrays)
    assert_built_from_the_rows(saved, embed_fn, caplog, monkeypatch, "not in the snapshot's table")


@pytest.mark.parametrize("kind", ["nodes", "strings", "string-ends"])
@pytest.mark.parametrize("damage", ["missing", "truncated", "other-size"])
def test_vector_files_that_do_not_match_their_snapshot_are_ignored(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    caplog: pytest.LogCaptureFixture,
    damage: str,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A crash between the vector files and ``snapshot.npz`` leaves the snapshot absent
    (it is renamed into place last); a file of its vectors, or of its table of strings,
    lost or damaged afterwards makes the start build from the rows, with a warning,
    never read vectors or strings that do not fit."""
    saved.close()
    path = next(saved.folder.glob(VECTOR_FILE.format(id="*", kind=kind)))
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    else:
        held = np.load(path)
        np.save(path, np.zeros((1, 8), np.float32) if kind == "nodes" else held[:-1])
    assert_built_from_the_rows(saved, embed_fn, caplog, monkeypatch, "ignoring the saved")


def test_a_save_cut_short_leaves_no_snapshot_and_no_stray_files(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The vector files are written first: a save that fails at ``snapshot.npz`` removes
    them, and files a crash left (named by no snapshot) go at the next save."""
    real = kg.snapshot_file.atomic_write

    def failing(path: Path, write: Any) -> None:
        if path.name == FILE:
            raise OSError(28, "No space left on device")
        real(path, write)

    monkeypatch.setattr(kg.snapshot_file, "atomic_write", failing)
    saved.close()  # logs the failure; the graph's file is whole
    monkeypatch.undo()
    assert not (saved.folder / FILE).exists()
    assert not list(saved.folder.glob(VECTOR_FILE.format(id="*", kind="*")))
    again = KnowledgeGraph(saved.folder, embed_fn)  # built from the rows
    assert_same_snapshot(again.snapshot, saved.snapshot)
    stray = saved.folder / VECTOR_FILE.format(id="0123456789abcdef", kind="nodes")
    np.save(stray, np.zeros((2, 4), np.float32))  # a save a crash cut short
    again.close()
    assert (saved.folder / FILE).exists() and not stray.exists()
    assert len(list(saved.folder.glob(VECTOR_FILE.format(id="*", kind="*")))) == len(SNAPSHOT_FILES)


def test_a_save_that_fails_while_writing_its_arrays_leaves_nothing(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fault injected: the disk fills after the JSON and a few arrays are written (each
    array goes out as it is made). No snapshot, no temporary file and no vector file
    is left; the next start builds from the rows and its stop saves a readable one."""
    real = np.lib.format.write_array
    written: list[int] = []

    def filling(member: Any, array: np.ndarray, **kwargs: Any) -> None:
        written.append(array.size)
        if len(written) == 4:
            raise OSError(28, "No space left on device")
        real(member, array, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", filling)
    saved.close()  # logs the failure
    monkeypatch.undo()
    assert len(written) == 4
    assert sorted(p.name for p in saved.folder.iterdir() if "snapshot" in p.name) == []
    reads = rows_read(monkeypatch)
    again = KnowledgeGraph(saved.folder, embed_fn)
    assert len(reads) == 1
    assert_same_snapshot(again.snapshot, saved.snapshot)
    again.close()
    with np.load(saved.folder / FILE) as held:
        assert {"meta", "edge_rows", "node_keys_strings"} <= set(held.files)
    assert_same_snapshot(KnowledgeGraph(saved.folder, embed_fn).snapshot, saved.snapshot)
