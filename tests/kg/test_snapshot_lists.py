"""A snapshot's lists of strings read through their indexes (``StringColumn``) behave as
the plain lists a snapshot built from the rows holds (``kg.snapshot_lists``)."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

import numpy as np
import pytest

from kg.saved_strings import Splice, StringColumn, StringIndexes
from kg.snapshot_lists import inserted, sorted_place, take, without


def _both(values: list[Any]) -> tuple[list[Any], StringColumn]:
    """The list, and a column saying the same through a table in another order (with
    strings no item uses, as a table that changes grew holds)."""
    table = ["unused", *reversed(values), "unused too"]
    index = np.asarray([len(values) - i for i in range(len(values))], np.int32)
    column = StringColumn(table, index)
    assert list(column) == values
    return values, column


def test_a_column_reads_as_its_list() -> None:
    values, column = _both(["ada", "bo", None, "cy", "bo"])
    assert len(column) == 5 and column[2] is None and column[-1] == "bo"
    assert column[np.int32(3)] == "cy"  # a snapshot's own numbers index it
    assert column[1:4] == values[1:4] and column[::-2] == values[::-2]
    assert column == values and values == column and column == tuple(values)
    assert column != ["ada"] and column != [*values[:-1], "x"]
    assert "cy" in column and column.index("cy") == 3 and column.count("bo") == 2
    with pytest.raises(IndexError):
        column[5]
    with pytest.raises(TypeError):
        hash(column)


def test_take_and_sorted_place_agree_for_lists_and_columns() -> None:
    keys = sorted(f"entity {i:03d}" for i in range(0, 300, 3))
    values, column = _both(keys)
    positions = np.asarray([5, 0, 99, 5, 42])
    assert take(column, positions) == take(values, positions) == [keys[p] for p in positions]
    for probe in ["", "entity 000", "entity 001", "entity 150", "entity 297", "entity 298", "~"]:
        assert sorted_place(column, probe) == sorted_place(values, probe)
        assert sorted_place(values, probe) == bisect_left(keys, probe)


def test_columns_and_the_list_helpers_give_the_splice_of_the_indexes() -> None:
    """``without`` then ``inserted`` on a plain list, and ``Splice`` on its indexes read
    through columns, give the same list: the two ways ``GraphSnapshot.apply`` changes one."""
    values = ["a", "b", None, "c", "d", "e"]
    strings = StringIndexes.of({"xs": values})
    spliced = strings.spliced({"xs": Splice(drop=[1, 4], at=[0, 2, 4], new=["n", "o", "p"])})
    expected = inserted(without(values, [1, 4]), [0, 2, 4], ["n", "o", "p"])
    assert spliced.columns()["xs"] == expected == ["n", "a", None, "o", "c", "e", "p"]
    assert strings.columns()["xs"] == values  # the older indexes read as they were
