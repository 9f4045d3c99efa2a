"""The snapshot's table of strings in two files that grow (``kg.table_file``): read back
as written (Nones, empty strings, text that is not ASCII, lone surrogates, across
blocks), grown by the strings after those a saved table holds, and refused where the
files do not hold what the snapshot says."""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from kg import table_file
from kg.table_file import ENDS, TEXT, SavedTable

STRINGS: list[str | None] = [
    "ada",
    None,
    "",
    "git-stash.html#3",
    "藏匿条目",  # the seeds' documents are Chinese
    "naïve café",
    "\ud800 lone",  # a lone surrogate, which JSON kept
    "ada",  # twice: the table holds what it is given
    *(f"entity {i}" for i in range(12)),
    "a\0b",  # a NUL of its own: its block is cut by the offsets, not split
    *(f"entity {i}" for i in range(12, 20)),
]


def path_of(folder: Path, snapshot_id: str, kind: str) -> Path:
    return folder / f"snapshot-{snapshot_id}-{kind}.npy"


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 4 strings: ASCII blocks and blocks that are not, one whose string holds
    a NUL, and a last block cut short."""
    monkeypatch.setattr(table_file, "_BLOCK", 4)


def write(
    folder: Path, table: list[str | None], snapshot_id: str, base: SavedTable | None
) -> SavedTable:
    return table_file.write(table, partial(path_of, folder), snapshot_id, base)


def read(folder: Path, saved: SavedTable) -> list[str | None]:
    return table_file.read(partial(path_of, folder), saved)


def test_a_table_written_whole_reads_back_as_it_was(tmp_path: Path) -> None:
    saved = write(tmp_path, STRINGS, "a", None)
    size = sum(len((s or "").encode("utf-8", "surrogatepass")) + 1 for s in STRINGS)
    assert saved == SavedTable("a", len(STRINGS), size, (1,))
    assert read(tmp_path, saved) == STRINGS


def test_an_empty_table_reads_back_empty(tmp_path: Path) -> None:
    saved = write(tmp_path, [], "a", None)
    assert saved == SavedTable("a", 0, 0)
    assert read(tmp_path, saved) == []


def test_a_table_grows_by_the_strings_after_those_saved(tmp_path: Path) -> None:
    """The files are the first save's, renamed, with the new strings' bytes and ends
    after their own: neither is written again. The Nones are the first save's and the
    new ones."""
    table = [*STRINGS, None]
    first = write(tmp_path, table[:10], "a", None)
    inodes = {kind: path_of(tmp_path, "a", kind).stat().st_ino for kind in (TEXT, ENDS)}
    grown = write(tmp_path, table, "b", first)
    assert {kind: path_of(tmp_path, "b", kind).stat().st_ino for kind in inodes} == inodes
    assert not path_of(tmp_path, "a", TEXT).exists()
    whole = write(tmp_path, table, "c", None)
    assert grown == dataclasses.replace(whole, snapshot_id="b")
    assert grown.nones == (1, len(STRINGS))
    for kind in inodes:  # the same arrays as a table written whole
        np.testing.assert_array_equal(
            np.load(path_of(tmp_path, "b", kind)), np.load(path_of(tmp_path, "c", kind))
        )
    assert read(tmp_path, grown) == table


def test_files_that_are_not_as_the_saved_table_says_are_written_anew(tmp_path: Path) -> None:
    """A table said to hold more strings than its files (a stale ``SavedTable``: the
    text grows, its ends do not), or files that are gone: the save writes the whole
    table."""
    first = write(tmp_path, STRINGS[:10], "a", None)
    stale = dataclasses.replace(first, count=first.count + 1)
    saved = write(tmp_path, STRINGS, "b", stale)
    assert saved == write(tmp_path, STRINGS, "b", None)
    assert read(tmp_path, saved) == STRINGS
    gone = write(tmp_path, STRINGS, "c", SavedTable("x", 3, 9))
    assert read(tmp_path, gone) == STRINGS


@pytest.mark.parametrize("damage", ["count", "size", "order", "nones", "missing"])
def test_files_that_do_not_hold_the_table_are_refused(tmp_path: Path, damage: str) -> None:
    saved = write(tmp_path, STRINGS, "a", None)
    if damage == "count":
        saved = dataclasses.replace(saved, count=saved.count - 1)
    elif damage == "size":
        saved = dataclasses.replace(saved, size=saved.size + 1)
    elif damage == "order":
        ends = np.load(path_of(tmp_path, "a", ENDS))
        ends[3], ends[4] = ends[4], ends[3]
        np.save(path_of(tmp_path, "a", ENDS), ends)
    elif damage == "nones":
        saved = dataclasses.replace(saved, nones=(len(STRINGS),))
    else:
        path_of(tmp_path, "a", TEXT).unlink()
    with pytest.raises(OSError if damage == "missing" else ValueError):
        read(tmp_path, saved)
