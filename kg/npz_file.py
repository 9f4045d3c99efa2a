"""The graph's snapshot, a zip of ``.npy`` files as ``np.savez`` writes it, written and its
JSON read back with less held at once: at 1,000,000 chunks a save held the
strings' JSON twice (385 MiB as text, 385 as bytes) and, after a start from the rows, the
entities' codes gathered in node order (766 MiB) beside the 4.6 GiB the service held.

Each entry is made as it is written and let go after (``np.savez`` takes them all at
once); an entry may be an ``NpyWriter`` that writes its ``.npy`` file itself, a block at
a time: ``GatheredRows`` (rows of several arrays, in a given order) and ``JsonBytes``
(a JSON text encoded a slice of its long lists at a time). ``np.load`` reads them as the
arrays they stand for; ``read_json`` reads a ``JsonBytes`` entry's text as it is stored,
where the array ``np.load`` makes of it would be copied once more to be parsed."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable, Sequence
from itertools import islice
from typing import IO, Any, Protocol

import numpy as np

from kg.int8_rows import BLOCK_ROWS, fill_rows

JSON_SLICE = 65_536
"""Items of a long list encoded at a time (a few MB of text)."""


class NpyWriter(Protocol):
    def write(self, out: IO[bytes]) -> None:
        """The ``.npy`` file ``np.save`` would write of the array this stands for."""
        ...


class GatheredRows:
    """Rows ``rows`` of the parts' arrays (their rows numbered in order), gathered a block
    of ``BLOCK_ROWS`` at a time as they are written, never whole."""

    def __init__(self, parts: Sequence[np.ndarray], rows: np.ndarray) -> None:
        self.parts = parts
        self.rows = rows
        self.shape = (len(rows), *parts[0].shape[1:])
        self.dtype = parts[0].dtype

    def write(self, out: IO[bytes]) -> None:
        _write_header(out, self.dtype, self.shape)
        self.write_rows(out)

    def write_rows(self, out: IO[bytes]) -> None:
        """The rows alone, without the ``.npy`` header (appended to a file that has one)."""
        for first in range(0, len(self.rows), BLOCK_ROWS):
            block = self.rows[first : first + BLOCK_ROWS]
            gathered = np.empty((len(block), *self.shape[1:]), self.dtype)
            fill_rows(self.parts, block, gathered)
            out.write(gathered.tobytes())


class JsonBytes:
    """``json.dumps(document)`` as a ``uint8`` array, its top level's long lists and dicts
    encoded ``JSON_SLICE`` items at a time: the whole text is held once, as bytes, and
    never also as one ``str`` (the documents' versions at 1,000,000 chunks: 88 MiB)."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.pieces: list[bytes] = [b"{"]
        for n, (key, value) in enumerate(document.items()):
            self.pieces.append(f"{', ' if n else ''}{json.dumps(key)}: ".encode())
            if isinstance(value, list | dict) and len(value) > JSON_SLICE:
                self._slices(value)
            else:
                self.pieces.append(json.dumps(value).encode())
        self.pieces.append(b"}")

    def _slices(self, value: list[Any] | dict[str, Any]) -> None:
        opening, closing = (b"[", b"]") if isinstance(value, list) else (b"{", b"}")
        self.pieces.append(opening)
        items = iter(value.items() if isinstance(value, dict) else value)
        for first in range(0, len(value), JSON_SLICE):
            part = list(islice(items, JSON_SLICE))
            text = json.dumps(dict(part) if isinstance(value, dict) else part)[1:-1]
            self.pieces.append(f"{', ' if first else ''}{text}".encode())
        self.pieces.append(closing)

    def write(self, out: IO[bytes]) -> None:
        _write_header(out, np.dtype(np.uint8), (sum(map(len, self.pieces)),))
        for piece in self.pieces:
            out.write(piece)


def read_json(saved: np.lib.npyio.NpzFile, name: str) -> Any:
    """The document of entry ``name`` (a ``uint8`` array of JSON text, as ``JsonBytes``
    writes it); ``ValueError`` where it is not one."""
    with saved.zip.open(f"{name}.npy") as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
        text = member.read()
    if dtype != np.uint8 or fortran or shape != (len(text),):
        raise ValueError(f"{name} is not a JSON text ({dtype}, {shape})")
    return json.loads(text)


def write_npz(entries: Iterable[tuple[str, np.ndarray | NpyWriter]], out: IO[bytes]) -> None:
    """The zip ``np.savez(out, **dict(entries))`` writes, each entry let go once written."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in entries:
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                if isinstance(array, np.ndarray):
                    np.lib.format.write_array(member, array, allow_pickle=False)
                else:
                    array.write(member)
            del array


def _write_header(out: IO[bytes], dtype: np.dtype[Any], shape: tuple[int, ...]) -> None:
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(out, header)
