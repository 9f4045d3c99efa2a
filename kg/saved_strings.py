"""The snapshot's repeated strings as its file saves them: one table of strings, and for
each list the index of each of its items in that table, kept in step with the lists by
every change (``GraphSnapshot.apply``).

The snapshot file saves the lists whose strings repeat (an entity's key and name in each
of its edges, a document's id in each of its triples) as indexes into one table of their
strings (``kg.snapshot_file``). Finding each string's index at the save took 15 s at
1,000,000 chunks (23.6 million strings, each looked up in a dict of 6.1 million) of a
66-69 s stop after any change. A snapshot read back already has its indexes; a change
now edits them as it edits the lists (array deletes and inserts, its new strings added
to the table), and the save writes the strings the lists still use with their indexes
renumbered: array work, no lookup per string (the stop: 49 s).

The table is shared by a snapshot and those that changes make from it, and only ever
grows: the first ``n`` strings a snapshot's indexes point to never change, so an older
snapshot stays whole however many changes came after it. What changes added and later
dropped stays in it until it is compacted (``_REBUILD_SHARE``). A table read back from a
snapshot's files is saved as it stands, those files grown by what changes appended
(``kg.table_file``); one compacted, or built from the rows, is saved whole, each string
once.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, SupportsIndex, overload

import numpy as np

from kg.numbering import INDEX
from kg.table_file import SavedTable

#: A change that finds the table grown by more than this share of its size at its last
#: compaction (strings added by changes, many since dropped) compacts it first, so that a
#: service that replaces documents for months holds a quarter more strings than its lists
#: use at most (or 100,000 more), not every string a change ever added.
_REBUILD_SHARE = 0.25
_REBUILD_MIN = 100_000
#: Items per list a save compares with the list before it trusts the indexes: a wrong
#: index would save another string in its place, so a mismatch makes the save look each
#: string up as before.
CHECKED = 1_000

Strings = Sequence[str | None]


@dataclass(frozen=True)
class Splice:
    """One change to one list, as ``GraphSnapshot.apply`` makes it: the items at ``drop``
    (ascending) removed, then ``new[m]`` inserted before the item at ``at[m]`` (non-
    decreasing), then the item at each of ``renamed``'s positions set to its string."""

    drop: Sequence[int] = ()
    at: Sequence[int] = ()
    new: Strings = ()
    renamed: Mapping[int, str | None] | None = None


@dataclass(frozen=True)
class StringIndexes:
    """Lists of strings as indexes into one append-only table (see the module docstring)."""

    table: list[str | None]
    indexes: Mapping[str, np.ndarray]
    #: The table's length when it was last compacted (or made).
    compacted_at: int = 0
    #: The snapshot files that hold the table's first strings, as they are (read from
    #: them, and appended to since, never compacted): a save grows them
    #: (``kg.table_file``).
    saved: SavedTable | None = None

    @classmethod
    def of(cls, lists: Mapping[str, Strings], distinct: Collection[str] = ()) -> StringIndexes:
        """Each string looked up: the table holds each distinct string once, in the order
        first met. The lists named in ``distinct`` (strings nearly all different: the
        edges' texts, 3.2 million at 1,000,000 chunks) are added after, as they are,
        without a lookup."""
        found: dict[str | None, int] = {}
        indexes = {
            name: np.fromiter((found.setdefault(v, len(found)) for v in values), INDEX, len(values))
            for name, values in lists.items()
            if name not in distinct
        }
        table = list(found)
        del found
        for name, values in lists.items():
            if name in distinct:
                indexes[name] = _added(table, values)
        return cls(table, {name: indexes[name] for name in lists}, len(table))

    def check(self) -> None:
        """Raise ValueError where an index is out of the table."""
        table = self.table
        if any(i.size and (i.min() < 0 or i.max() >= len(table)) for i in self.indexes.values()):
            raise ValueError("a list's strings are not in the snapshot's table")

    def lists(self) -> dict[str, list[str | None]]:
        """The lists back, each string one object wherever it is repeated (within and
        across the lists, as the table holds it once). Raises ValueError where an index
        is out of the table."""
        self.check()
        return {name: list(column) for name, column in self.columns().items()}

    def columns(self) -> dict[str, StringColumn]:
        """Each list, read through the table (``StringColumn``), nothing copied."""
        return {name: StringColumn(self.table, index) for name, index in self.indexes.items()}

    def spliced(self, splices: Mapping[str, Splice]) -> StringIndexes:
        """The indexes after ``splices`` (lists it does not hold ignored); their new
        strings added to the table, compacted first where it has grown enough."""
        base = self._compacted() if self._due() else self
        table, indexes = base.table, dict(base.indexes)
        for name, splice in splices.items():
            if name not in indexes:
                continue
            index = np.delete(indexes[name], np.asarray(splice.drop, np.int64))
            index = np.insert(index, np.asarray(splice.at, np.int64), _added(table, splice.new))
            if splice.renamed:
                places = np.fromiter(splice.renamed, np.int64, len(splice.renamed))
                index[places] = _added(table, list(splice.renamed.values()))
            indexes[name] = index.astype(INDEX, copy=False)
        return StringIndexes(table, indexes, base.compacted_at, base.saved)

    def matches(self, lists: Mapping[str, Strings], rng: np.random.Generator) -> bool:
        """Whether each list is as long as its indexes and, at ``CHECKED`` places drawn
        from ``rng`` (its ends included), holds the string its index points to."""
        if set(lists) != set(self.indexes):
            return False
        for name, values in lists.items():
            index = self.indexes[name]
            if len(values) != len(index):
                return False
            if not len(values):
                continue
            places = {0, len(values) - 1, *rng.integers(len(values), size=CHECKED).tolist()}
            if any(self.table[int(index[p])] != values[p] for p in places):
                return False
        return True

    def deduplicated(self) -> StringIndexes:
        """The table of the distinct strings the lists use, and their indexes into it.
        Equal strings a change added again are made one here (the hashes compared,
        1-2 s at 6.1 million strings): each string stands once in a table saved whole,
        so a start that reads it back holds one object for each, however many changes and
        restarts came before (a table that grows between compactions may hold a string
        twice, and a start then holds it twice: ``_REBUILD_SHARE`` bounds them)."""
        compact = self._compacted()
        first = _first_equal(compact.table)
        if first is None:
            return compact
        keep = first == np.arange(len(compact.table))
        renumber = (np.cumsum(keep, dtype=np.int64) - 1)[first].astype(INDEX)
        table = list(map(compact.table.__getitem__, np.flatnonzero(keep).tolist()))
        indexes = {name: renumber[index] for name, index in compact.indexes.items()}
        return StringIndexes(table, indexes, len(table))

    def _due(self) -> bool:
        grown = len(self.table) - self.compacted_at
        return grown > max(_REBUILD_MIN, _REBUILD_SHARE * self.compacted_at)

    def _compacted(self) -> StringIndexes:
        """A new table of the strings some index uses (in table order), and the indexes
        renumbered into it; this one left as it is."""
        used = np.zeros(len(self.table), bool)
        for index in self.indexes.values():
            used[index] = True
        kept = np.flatnonzero(used)
        renumber = np.cumsum(used, dtype=np.int64).astype(INDEX) - 1
        table = list(map(self.table.__getitem__, kept.tolist()))
        indexes = {name: renumber[index] for name, index in self.indexes.items()}
        return StringIndexes(table, indexes, len(table))


class StringColumn(Sequence[str | None]):
    """One list of a ``StringIndexes`` read as a list: item ``i`` is the table's string at
    the list's index ``i``. A snapshot whose changes keep its indexes (``GraphSnapshot.
    strings``) holds its lists of strings so: a change splices their int32 indexes
    instead of copying lists of millions of strings, each copy touching every string's
    reference count (in a profile at 1,000,000 synthetic triples, 0.35 s of the patch's
    0.5 s), and no list's references are held (26.8 million at 1,000,000 chunks: the
    service held 215-251 MiB less after the same changes)."""

    __slots__ = ("_index", "_items", "_table")

    def __init__(self, table: list[str | None], index: np.ndarray) -> None:
        self._table = table
        self._index = index
        self._items = np.ascontiguousarray(index).data  # items read as Python ints

    def __len__(self) -> int:
        return len(self._index)

    @overload
    def __getitem__(self, i: SupportsIndex) -> str | None: ...
    @overload
    def __getitem__(self, i: slice) -> list[str | None]: ...
    def __getitem__(self, i: SupportsIndex | slice) -> str | list[str | None] | None:
        if isinstance(i, slice):
            return list(map(self._table.__getitem__, self._index[i].tolist()))
        return self._table[self._items[i]]

    def bisect_left(self, string: str) -> int:
        """``bisect.bisect_left`` of a sorted column, each probe in C (the index's item,
        then the table's string): about a list's 4-5 µs at 2.1 million keys, where
        probing through ``__getitem__`` took 11."""
        string_at: Callable[[int], Any] = self._table.__getitem__
        return bisect_left(self._items, string, key=string_at)

    def take(self, positions: np.ndarray) -> list[str | None]:
        """The strings at ``positions``, their indexes gathered at once."""
        return list(map(self._table.__getitem__, self._index[positions].tolist()))

    def __iter__(self) -> Iterator[str | None]:
        return map(self._table.__getitem__, self._index.tolist())

    def __eq__(self, other: object) -> bool:
        """Equal to a list, tuple or column of the same strings, as a list would be."""
        if not isinstance(other, StringColumn | list | tuple):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # compared by value, as lists are

    def __repr__(self) -> str:
        return f"StringColumn({len(self)} strings)"


def _added(table: list[str | None], strings: Strings) -> np.ndarray:
    """The indexes of ``strings`` appended to ``table`` (equal strings already there are
    not looked for: a lookup would need every string's index, which is what this spares)."""
    start = len(table)
    table.extend(strings)
    return np.arange(start, len(table), dtype=INDEX)


def _first_equal(strings: Strings) -> np.ndarray | None:
    """For each string, the place of the first one equal to it; None where all differ.
    Only strings whose hash another shares are compared."""
    hashes = np.fromiter(map(hash, strings), np.int64, len(strings))
    order = np.argsort(hashes, kind="stable")
    same = np.flatnonzero(hashes[order[1:]] == hashes[order[:-1]])
    if not same.size:
        return None
    first = np.arange(len(strings))
    found: dict[str | None, int] = {}
    for place in np.union1d(order[same], order[same + 1]).tolist():  # ascending
        first[place] = found.setdefault(strings[place], place)
    return first
