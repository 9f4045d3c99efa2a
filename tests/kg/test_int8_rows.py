"""The entities' int8 codes: the bound on their estimates holds, and the candidates they pick
give exactly the full float32 scan's choice (``kg.int8_rows``, ``VectorRows.candidates``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kg.int8_rows as int8_rows
from kg.code_parts import estimate
from kg.embeddings import EmbeddingTable, normalize_rows
from kg.file_matrix import FileMatrix
from kg.int8_rows import CodedQuery, Int8Rows, blocks, fill_rows, gather_rows
from kg.row_matrix import dot_rows
from kg.vector_rows import VectorRows
from tests.kg.kg_testdata import candidates_choice, full_scan_choice

DIM = 48


def _rows(rng: np.random.Generator, count: int) -> np.ndarray:
    """Unit rows with the shapes that stress a per-row scale: skewed ones, one-hot ones,
    near-duplicates and exact duplicates (ties), and a zero row."""
    rows = rng.standard_normal((count, DIM)).astype(np.float32)
    rows[: count // 8, 0] *= 40  # one component dominates
    rows[count // 8 : count // 4] = 0
    rows[count // 8 : count // 4, 3] = 1
    rows[count // 4 : count // 4 + 20] = rows[count // 4 + 20 : count // 4 + 40]
    rows[count // 2 : count // 2 + 20] = rows[count // 2 + 20 : count // 2 + 40] + 1e-6
    rows = normalize_rows(rows)
    rows[-1] = 0
    return rows


def _queries(rng: np.random.Generator, rows: np.ndarray, count: int) -> list[np.ndarray]:
    """Questions near some rows (so several clear the threshold), some right on one."""
    picks = rows[rng.integers(len(rows), size=count)]
    noise = rng.standard_normal(picks.shape).astype(np.float32)
    scale = np.linspace(0.0, 0.6, count, dtype=np.float32)[:, None]
    return list(normalize_rows(picks + scale * noise))


def test_every_estimate_is_within_the_slack_of_the_exact_score() -> None:
    rng = np.random.default_rng(1)
    rows = _rows(rng, 400)
    coded = Int8Rows.of(rows)
    for query in _queries(rng, rows, 60):
        estimates, slack = estimate([coded.head(100), Int8Rows.of(rows[100:])], query)
        exact = rows.astype(np.float64) @ query.astype(np.float64)
        assert np.abs(estimates - exact).max() <= slack
        assert slack < 0.1  # loose enough to be safe, tight enough to leave few candidates


def test_a_question_coded_once_scores_as_its_float32_values_do() -> None:
    """A screen codes its question once for every table it reads (``CodedQuery``): the
    scores and slacks must be those of the float32 question, to the bit."""
    rng = np.random.default_rng(3)
    rows = _rows(rng, 300)
    coded = Int8Rows.of(rows)
    spans = [(0, 40), (100, 101), (250, 300)]
    for query in _queries(rng, rows, 20):
        once = CodedQuery.of(query)
        assert CodedQuery.of(once) is once
        assert not once.codes.flags.writeable  # shared by every table a screen reads
        for args in ((), (np.array([5, 2, 299]),)):
            plain, plain_slack = coded.scores(query, *args)
            again, again_slack = coded.scores(once, *args)
            np.testing.assert_array_equal(again, plain)
            assert again_slack == plain_slack
        in_spans = coded.scores_in(query, spans)[0]
        np.testing.assert_array_equal(coded.scores_in(once, spans)[0], in_spans)
        assert coded.slack(once) == coded.slack(query)


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.9])
def test_the_candidates_give_the_full_scans_choice(threshold: float) -> None:
    rng = np.random.default_rng(2)
    rows = _rows(rng, 600)
    table = EmbeddingTable(quantized=True)
    keys = [f"entity {i:04d}" for i in range(len(rows))]
    table.add(keys, rows)
    vectors = VectorRows.of(table, keys)
    candidates_seen = []
    for query in _queries(rng, rows, 80):
        assert candidates_choice(vectors, query, threshold, 5) == full_scan_choice(
            rows, query, threshold, 5
        )
        candidates_seen.append(len(vectors.candidates(query, threshold, 5)[0]))
    assert max(candidates_seen) < len(rows) // 4  # the codes do narrow the scan


def test_an_item_right_on_the_threshold_or_among_near_ties_is_not_lost() -> None:
    """Scores within the slack of the threshold, and of each other around the fifth place:
    the estimates order them differently from the exact scores."""
    rng = np.random.default_rng(6)
    query = normalize_rows(rng.standard_normal(DIM).astype(np.float32))[0]
    rows = normalize_rows(query + 0.02 * rng.standard_normal((40, DIM)).astype(np.float32))
    rows = np.concatenate([rows, _rows(rng, 200)])
    table = EmbeddingTable(quantized=True)
    keys = [f"k{i:03d}" for i in range(len(rows))]
    table.add(keys, rows)
    vectors = VectorRows.of(table, keys)
    exact = dot_rows(rows, query)
    estimates, _ = table.matrix.estimate(query)
    assert not np.array_equal(np.argsort(-estimates[:40]), np.argsort(-exact[:40]))
    assert candidates_choice(vectors, query, 0.5, 5) == full_scan_choice(rows, query, 0.5, 5)
    for rank in range(1, 12):  # the threshold right on each of the best scores
        threshold = float(np.sort(exact)[-rank])
        assert candidates_choice(vectors, query, threshold, 5) == full_scan_choice(
            rows, query, threshold, 5
        )


def test_ties_broken_by_item_as_the_full_scan_breaks_them() -> None:
    rows = normalize_rows(np.tile(np.eye(DIM, dtype=np.float32)[:1], (12, 1)))
    table = EmbeddingTable(quantized=True)
    keys = [f"same {i:02d}" for i in range(len(rows))]
    table.add(keys, rows)
    query = rows[0]
    assert candidates_choice(VectorRows.of(table, keys), query, 0.5, 5) == [0, 1, 2, 3, 4]


def test_codes_follow_the_table_through_adds_drops_and_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(EmbeddingTable, "_MIN_DEAD", 16)
    rng = np.random.default_rng(3)
    rows = _rows(rng, 300)
    path = tmp_path / "nodes.npy"
    np.save(path, rows[:200])
    mapped = np.load(path, mmap_mode="r")
    table = EmbeddingTable.adopt([f"k{i}" for i in range(200)], mapped, quantized=True)
    table.add([f"k{i}" for i in range(200, 300)], rows[200:])
    token = table.token
    table.discard([f"k{i}" for i in range(120, 260)])  # past the share: compacts
    assert table.token is not token
    table.add(["k125", "k250"], rows[[10, 20]])  # back, with other vectors
    live = {f"k{i}": rows[i] for i in [*range(120), *range(260, 300)]}
    live.update({"k125": rows[10], "k250": rows[20]})
    keys = sorted(live)
    truth = np.stack([live[k] for k in keys])
    vectors = VectorRows.of(table, keys)
    for query in _queries(rng, truth, 40):
        assert candidates_choice(vectors, query, 0.4, 5) == full_scan_choice(truth, query, 0.4, 5)
        estimates, slack = table.matrix.estimate(query)
        exact = table.matrix[vectors.rows] @ query
        assert np.abs(estimates[vectors.rows] - exact).max() <= slack


def test_a_table_without_codes_gives_the_same_choice() -> None:
    rng = np.random.default_rng(4)
    rows = _rows(rng, 300)
    keys = [f"k{i:03d}" for i in range(len(rows))]
    plain, coded = EmbeddingTable(), EmbeddingTable(quantized=True)
    plain.add(keys, rows)
    coded.add(keys, rows)
    for query in _queries(rng, rows, 40):
        assert candidates_choice(VectorRows.of(plain, keys), query, 0.5, 5) == candidates_choice(
            VectorRows.of(coded, keys), query, 0.5, 5
        )


def test_a_mapped_file_is_coded_from_file_reads_and_a_slice_through_its_mapping(
    tmp_path: Path,
) -> None:
    rows = _rows(np.random.default_rng(5), 200)
    np.save(tmp_path / "m.npy", rows)
    mapped = FileMatrix.open(tmp_path / "m.npy")
    for matrix in (mapped, mapped[10:], mapped[:7]):
        read = np.concatenate(list(blocks(matrix)))
        np.testing.assert_array_equal(read, np.asarray(matrix))
    whole, sliced = Int8Rows.of(mapped), Int8Rows.of(mapped[10:])
    np.testing.assert_array_equal(whole.codes[10:], sliced.codes)


def test_a_table_adopts_codes_made_before_and_refuses_codes_of_other_rows() -> None:
    """Codes a snapshot made at the load are taken as they are (not made again); codes
    of another number of rows than the keys' are an error, never a silent mismatch."""
    matrix = normalize_rows(np.random.default_rng(3).normal(size=(5, 8)).astype(np.float32))
    codes = Int8Rows.of(matrix)
    keys = [f"k{i}" for i in range(5)]
    for rows in (matrix, _read_only(matrix)):
        table = EmbeddingTable.adopt(keys, rows, quantized=True, codes=codes)
        assert table.matrix.codes is not None
        parts = [p for p in table.matrix.codes if isinstance(p, Int8Rows)]
        assert any(np.shares_memory(part.codes, codes.codes) for part in parts)
        with pytest.raises(ValueError, match="codes of 5 rows"):
            EmbeddingTable.adopt(keys, rows, quantized=True, codes=Int8Rows.of(matrix[:4]))


def _read_only(matrix: np.ndarray) -> np.ndarray:
    """A copy the table must keep as its base (as it keeps a mapped file)."""
    copy = matrix.copy()
    copy.flags.writeable = False
    return copy


def test_codes_gathered_across_both_parts_are_those_of_the_rows_gathered() -> None:
    """A mapped base and in-memory rows after it, gathered in any order (as a save
    gathers them after a crash's start): each row's codes are the ones that row alone
    codes to, and the parts' bounds carry over."""
    matrix = np.random.default_rng(4).normal(size=(12, 8)).astype(np.float32)
    parts = (Int8Rows.of(matrix[:5]), Int8Rows.of(matrix[5:]))
    rows = np.array([7, 0, 11, 3, 5, 4, 10], dtype=np.int64)
    taken = gather_rows(parts, rows)
    alone = Int8Rows.of(matrix[rows])
    assert np.array_equal(taken.codes, alone.codes) and np.array_equal(taken.unit, alone.unit)
    assert taken.max_error == max(p.max_error for p in parts)
    assert taken.max_norm == max(p.max_norm for p in parts)


def test_rows_are_filled_a_block_at_a_time_from_every_part(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``fill_rows`` puts each row of the parts where ``rows`` says, across blocks and
    parts of any size (an empty one among them)."""
    monkeypatch.setattr(int8_rows, "BLOCK_ROWS", 7)
    rng = np.random.default_rng(9)
    whole = rng.integers(-127, 128, size=(60, 5)).astype(np.int8)
    parts = [whole[:23], whole[23:23], whole[23:41], whole[41:]]
    rows = rng.permutation(60)[:50]
    out = np.zeros((50, 5), np.int8)
    fill_rows(parts, rows, out)
    np.testing.assert_array_equal(out, whole[rows])
