"""Rows of a mapped vector file read from the file (``kg.file_matrix``): the same values
as the mapping gives, and no page of the file mapped into the process."""

from __future__ import annotations

import errno
import gc
import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kg.file_matrix
import kg.grown_file
from kg.embeddings import EmbeddingTable
from kg.file_matrix import FileMatrix, copy_rows, take_rows
from kg.int8_rows import Int8Rows
from kg.row_matrix import RowMatrix

SMAPS = Path("/proc/self/smaps")


def mapped_kib(path: Path) -> int:
    """KiB of ``path``'s pages mapped into this process now (its mappings' ``Rss``)."""
    total, inside = 0, False
    for line in SMAPS.read_text().splitlines():
        head = line.split(maxsplit=5)
        if len(head) >= 5 and "-" in head[0] and ":" in head[3]:  # a mapping's first line
            inside = len(head) == 6 and head[5].removesuffix(" (deleted)") == str(path)
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


needs_smaps = pytest.mark.skipif(not SMAPS.exists(), reason="needs /proc/self/smaps")


@pytest.fixture()
def saved_rows(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A 1,000 x 96 float32 matrix saved to a ``.npy`` file (375 KiB)."""
    rows = np.random.default_rng(7).normal(size=(1000, 96)).astype(np.float32)
    path = tmp_path / "rows.npy"
    np.save(path, rows)
    return path, rows


@pytest.mark.parametrize(
    "index",
    [
        [5, 900, 3, 3, 999, 0],  # scattered, repeated, unsorted
        list(range(100, 400)),  # one run
        [*range(10, 20), 40, *range(41, 45), 2],  # runs and single rows
        [-1, -1000],  # from the end, as numpy counts
        [],
        [[1, 2], [3, 4]],  # any shape, as numpy's
    ],
)
def test_rows_read_from_the_file_are_the_mapping_s(
    saved_rows: tuple[Path, np.ndarray], index: list[int]
) -> None:
    path, rows = saved_rows
    matrix = FileMatrix.open(path)
    got = matrix.rows(np.array(index, dtype=np.int64))
    np.testing.assert_array_equal(got, rows[np.array(index, dtype=np.int64)])
    assert type(got) is np.ndarray and got.flags.writeable


def test_rows_out_of_range_are_an_index_error(saved_rows: tuple[Path, np.ndarray]) -> None:
    matrix = FileMatrix.open(saved_rows[0])
    for bad in ([1000], [-1001]):
        with pytest.raises(IndexError, match="out of range"):
            matrix.rows(np.array(bad))


@needs_smaps
def test_reading_rows_maps_no_page_of_the_file(saved_rows: tuple[Path, np.ndarray]) -> None:
    """What a selection at 1M chunks needs: its rows read, the file's pages not in RSS.
    The same rows through the mapping do map pages (so the measure can see them)."""
    path, rows = saved_rows
    matrix = FileMatrix.open(path)
    picked = np.random.default_rng(1).choice(len(rows), 300, replace=False)
    table = RowMatrix(matrix, np.zeros((2, 96), np.float32))  # as a table adopts it
    np.testing.assert_array_equal(table[picked], rows[picked])
    np.testing.assert_array_equal(take_rows(matrix, picked), rows[picked])
    np.testing.assert_array_equal(np.concatenate(list(matrix.blocks(64))), rows)
    Int8Rows.of(matrix)
    assert mapped_kib(path) == 0
    np.asarray(matrix[:][picked])  # a view reads through the mapping
    assert mapped_kib(path) > 0


def test_a_view_reads_through_the_mapping(
    saved_rows: tuple[Path, np.ndarray],
) -> None:
    path, rows = saved_rows
    matrix = FileMatrix.open(path)
    assert matrix.reads_file
    for derived in (matrix[10:], matrix[:], matrix.view(FileMatrix)):
        assert isinstance(derived, FileMatrix) and not derived.reads_file
    view = matrix[10:]
    np.testing.assert_array_equal(take_rows(view, np.array([0, 5])), rows[[10, 15]])
    assert isinstance(view, FileMatrix)
    with pytest.raises(ValueError, match="reads through its mapping"):
        view.rows(np.array([0]))


def test_a_removed_file_is_still_read_and_closed_with_its_matrix(
    saved_rows: tuple[Path, np.ndarray],
) -> None:
    """A newer snapshot removes the files of the one before while tables still read
    them; the file stays open as long as its matrix lives, and no longer."""
    path, rows = saved_rows
    matrix = FileMatrix.open(path)
    fd = matrix._fd
    assert fd is not None
    path.unlink()
    np.testing.assert_array_equal(matrix.rows(np.array([7, 999])), rows[[7, 999]])
    del matrix
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_file_cut_short_after_it_was_opened_is_an_os_error(
    saved_rows: tuple[Path, np.ndarray],
) -> None:
    path, _ = saved_rows
    matrix = FileMatrix.open(path)
    with open(path, "r+b") as file:
        file.truncate(path.stat().st_size - 96 * 4 * 10)  # the last ten rows
    np.testing.assert_array_equal(matrix.rows(np.array([0])).shape, (1, 96))
    with pytest.raises(OSError, match="ends before its rows"):
        matrix.rows(np.array([995]))
    with pytest.raises(OSError, match="ends before its rows"):
        matrix.rows(np.array([0, 995]))  # scattered: read first where cached, then the rest


@pytest.mark.parametrize(
    "content",
    [np.zeros((4, 3), np.float64), np.zeros(12, np.float32), np.zeros((3, 4), np.float32).T],
)
def test_only_a_c_ordered_float32_matrix_opens(tmp_path: Path, content: np.ndarray) -> None:
    path = tmp_path / "other.npy"
    np.save(path, content)
    with pytest.raises(ValueError, match="not float32 rows"):
        FileMatrix.open(path)


def test_a_table_adopts_it_as_its_read_only_base(saved_rows: tuple[Path, np.ndarray]) -> None:
    path, rows = saved_rows
    table = EmbeddingTable.adopt([f"k{i}" for i in range(len(rows))], FileMatrix.open(path))
    table.add(["new"], rows[:1] * 2)
    assert isinstance(table.matrix.base, FileMatrix) and table.matrix.base.reads_file
    expected = np.stack([rows[3], rows[0] * 2, rows[999]])
    np.testing.assert_array_equal(table.gather(["k3", "new", "k999"]), expected)


Call = tuple[str, int, int]


def record_reads(monkeypatch: pytest.MonkeyPatch, miss: frozenset[int] = frozenset()) -> list[Call]:
    """Record the module's announcements and reads as (kind, offset, bytes); a read
    that must not wait, of a span starting at an offset in ``miss``, finds none of it in
    the page cache (injected: ``BlockingIOError``)."""
    if not kg.file_matrix._NOWAIT or not hasattr(os, "posix_fadvise"):
        pytest.skip("no reads that wait for no disk here")
    calls: list[Call] = []
    advise, read, readv = os.posix_fadvise, os.pread, os.preadv

    def advising(fd: int, offset: int, length: int, advice: int) -> None:
        assert advice == os.POSIX_FADV_WILLNEED
        calls.append(("advise", offset, length))
        advise(fd, offset, length, advice)

    def reading(fd: int, size: int, offset: int) -> bytes:
        calls.append(("read", offset, size))
        return read(fd, size, offset)

    def reading_into(fd: int, buffers: list[memoryview], offset: int, flags: int = 0) -> int:
        size = sum(len(b) for b in buffers)
        if flags == os.RWF_NOWAIT:
            calls.append(("cached", offset, size))
            if offset in miss:
                raise BlockingIOError(errno.EAGAIN, "not in the page cache")
        else:
            calls.append(("read", offset, size))
        return readv(fd, buffers, offset, flags)

    monkeypatch.setattr(os, "posix_fadvise", advising)
    monkeypatch.setattr(os, "pread", reading)
    monkeypatch.setattr(os, "preadv", reading_into)
    return calls


def scattered_spans(matrix: FileMatrix) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Rows in three runs, and the (offset, bytes) of each run."""
    row = 96 * 4
    runs = [(900, 1), (3, 3), (40, 1)]
    index = np.array([900, 3, 4, 5, 40])
    return index, [(matrix.offset + first * row, count * row) for first, count in runs]


def test_scattered_rows_in_the_page_cache_are_read_once_each_unannounced(
    saved_rows: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that waits for no disk per run of rows, nothing announced; a single run
    is read by one call (the kernel reads ahead on its own)."""
    path, rows = saved_rows
    matrix = FileMatrix.open(path)
    calls = record_reads(monkeypatch)
    index, spans = scattered_spans(matrix)
    np.testing.assert_array_equal(matrix.rows(index), rows[index])
    assert calls == [("cached", *span) for span in spans]
    calls.clear()
    row = 96 * 4
    matrix.rows(np.arange(10, 20))
    assert calls == [("read", matrix.offset + 10 * row, 10 * row)]


def test_rows_out_of_the_page_cache_are_announced_together_then_read(
    saved_rows: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """So the kernel reads them from the disk side by side, not one after another."""
    path, rows = saved_rows
    matrix = FileMatrix.open(path)
    index, spans = scattered_spans(matrix)
    calls = record_reads(monkeypatch, miss=frozenset({spans[0][0], spans[2][0]}))
    np.testing.assert_array_equal(matrix.rows(index), rows[index])
    missed = [spans[0], spans[2]]
    assert calls == [
        *[("cached", *span) for span in spans],
        *[("advise", *span) for span in missed],
        *[("read", *span) for span in missed],
    ]


def test_a_file_system_without_such_reads_announces_then_reads(
    saved_rows: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected: the first read that must not wait fails with ``EOPNOTSUPP``. The rows
    are read as before it (every run announced, then read), and so are later ones."""
    path, rows = saved_rows
    matrix = FileMatrix.open(path)
    calls = record_reads(monkeypatch)
    readv = os.preadv

    def unsupported(fd: int, buffers: list[memoryview], offset: int, flags: int = 0) -> int:
        if flags == os.RWF_NOWAIT:
            raise OSError(errno.EOPNOTSUPP, "not supported")
        return readv(fd, buffers, offset, flags)

    monkeypatch.setattr(os, "preadv", unsupported)
    monkeypatch.setattr(kg.file_matrix, "_NOWAIT", True)
    index, spans = scattered_spans(matrix)
    for _ in range(2):
        np.testing.assert_array_equal(matrix.rows(index), rows[index])
        assert calls == [("advise", *span) for span in spans] + [("read", *span) for span in spans]
        calls.clear()
    assert kg.file_matrix._NOWAIT is False


def test_a_long_run_is_read_in_pieces(
    saved_rows: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One read returns at most 2 GiB: a run is read ``_MAX_READ`` bytes at a time."""
    path, rows = saved_rows
    monkeypatch.setattr(kg.file_matrix, "_MAX_READ", 1000)  # not a whole row
    np.testing.assert_array_equal(FileMatrix.open(path).rows(np.arange(2, 900)), rows[2:900])


def test_rows_copied_file_to_file_are_the_file_s_bytes(
    saved_rows: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    """``copy_rows`` appends the rows' bytes after what ``out`` holds, buffered writes
    included, and leaves ``out`` at its end for the writes after."""
    path, rows = saved_rows
    matrix = FileMatrix.open(path)
    with open(tmp_path / "out", "wb") as out:
        out.write(b"head")  # still in the buffer: flushed before the kernel writes
        assert copy_rows(matrix, 100, 250, out)
        assert out.tell() == 4 + 250 * 96 * 4
        out.write(b"tail")
    written = (tmp_path / "out").read_bytes()
    assert written[:4] == b"head" and written[-4:] == b"tail"
    np.testing.assert_array_equal(np.frombuffer(written[4:-4], np.float32), rows[100:350].ravel())


def test_rows_out_of_range_are_not_copied(
    saved_rows: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    matrix = FileMatrix.open(saved_rows[0])
    with open(tmp_path / "out", "wb") as out, pytest.raises(IndexError):
        copy_rows(matrix, 900, 101, out)


def test_what_cannot_be_copied_file_to_file_is_left_to_the_caller(
    saved_rows: tuple[Path, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """False, and nothing written: not a file, a matrix that reads through its mapping,
    one in memory, or a kernel or file system that refuses (injected: EXDEV after part
    of the rows, as between file systems on older kernels); a full disk is raised."""
    path, rows = saved_rows
    matrix = FileMatrix.open(path)
    assert not copy_rows(matrix, 0, 10, io.BytesIO())
    with open(tmp_path / "out", "wb") as out:
        assert not copy_rows(matrix[5:], 0, 10, out)
        assert not copy_rows(rows, 0, 10, out)
        out.write(b"head")
        real = os.copy_file_range
        calls = []

        def refusing(src: int, dst: int, count: int, *offsets: int) -> int:
            calls.append(count)
            if len(calls) == 1:
                return real(src, dst, 96 * 4, *offsets)  # one row, then a refusal
            raise OSError(errno.EXDEV, "Invalid cross-device link")

        monkeypatch.setattr(os, "copy_file_range", refusing)
        assert not copy_rows(matrix, 0, 10, out)
        assert out.tell() == 4
        out.write(b"rest")

        def full(src: int, dst: int, count: int, *offsets: int) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "copy_file_range", full)
        with pytest.raises(OSError, match="No space"):
            copy_rows(matrix, 0, 10, out)
    assert (tmp_path / "out").read_bytes()[:8] == b"headrest"


def appending(rows: np.ndarray) -> Any:
    """A ``grow_file`` writer that appends ``rows``."""
    return lambda out: out.write(np.ascontiguousarray(rows, "<f4").tobytes())


def test_a_grown_file_keeps_its_rows_and_reads_back_whole(
    saved_rows: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    """``grow_file`` appends, sets the header's count and renames: the same file (its
    rows not written again), read by ``np.load`` and by a new ``FileMatrix`` as the old
    rows then the new; the matrix that grew it still reads its own rows."""
    path, rows = saved_rows
    matrix = FileMatrix.open(path)
    inode = path.stat().st_ino
    added = np.random.default_rng(8).normal(size=(123_456, 96)).astype(np.float32)
    to = tmp_path / "grown.npy"  # a row count of more digits: the header keeps its length
    assert kg.file_matrix.grow_file(matrix, to, appending(added))
    assert not path.exists() and to.stat().st_ino == inode
    whole = np.concatenate([rows, added])
    np.testing.assert_array_equal(np.load(to), whole)
    grown = FileMatrix.open(to)
    assert grown.shape == whole.shape and grown._data_offset == matrix._data_offset
    np.testing.assert_array_equal(
        grown.rows(np.array([0, 999, 1000, len(whole) - 1])), whole[[0, 999, 1000, -1]]
    )
    np.testing.assert_array_equal(matrix.rows(np.arange(1000)), rows)


def test_a_file_that_cannot_grow_is_left_to_the_caller(
    saved_rows: tuple[Path, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """False, the file as it was: a matrix that reads no file, a file renamed or
    replaced since the matrix opened it, rows not whole, a header with no room; a full
    disk (injected after some rows) is raised with the file cut back to its rows."""
    path, rows = saved_rows
    matrix = FileMatrix.open(path)
    to = tmp_path / "grown.npy"
    assert not kg.file_matrix.grow_file(rows, to, appending(rows))
    assert not kg.file_matrix.grow_file(matrix[5:], to, appending(rows))
    assert not kg.file_matrix.grow_file(matrix, to, lambda out: out.write(b"odd"))
    monkeypatch.setattr(kg.grown_file, "npy_header", lambda shape, dtype, offset: None)
    assert not kg.file_matrix.grow_file(matrix, to, appending(rows[:3]))
    monkeypatch.undo()

    def filling(out: Any) -> None:
        out.write(rows[:7].tobytes())
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        kg.file_matrix.grow_file(matrix, to, filling)
    assert not to.exists()
    np.testing.assert_array_equal(np.load(path), rows)
    assert path.stat().st_size == matrix._data_offset + rows.nbytes
    np.save(tmp_path / "other.npy", rows)
    os.replace(tmp_path / "other.npy", path)  # another file at the name
    assert not kg.file_matrix.grow_file(matrix, to, appending(rows[:3]))
    os.replace(path, tmp_path / "moved.npy")
    assert not kg.file_matrix.grow_file(matrix, to, appending(rows[:3]))
    assert not to.exists()
    np.testing.assert_array_equal(np.load(tmp_path / "moved.npy"), rows)
