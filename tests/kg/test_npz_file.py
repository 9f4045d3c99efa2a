"""The snapshot's zip written entry by entry (``kg.npz_file``): ``np.load`` reads what
``np.savez`` would have written, rows gathered and JSON encoded a piece at a time."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest

import kg.npz_file as npz_file
from kg.npz_file import GatheredRows, JsonBytes, read_json, write_npz


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(npz_file, "BLOCK_ROWS", 4)
    monkeypatch.setattr(npz_file, "JSON_SLICE", 3)


DOCUMENTS: list[dict[str, Any]] = [
    {},
    {"format": 5, "id": "ab12", "versions": {"doc": "v1", "é": "v2"}},
    {"strings": ["Paris", "Zoë", 'a "quoted" name', "tab\there", "日本", "", "x"], "n": 1},
    {"exactly": ["a", "b", "c"], "one more": ["a", "b", "c", "d"], "empty": []},
    {"texts": [str(i) for i in range(10)], "rows": [[1, 2], [3]], "none": None},
    {"versions": {f"doc {i}": f"v{i}" for i in range(7)}, "exactly": {"a": 1, "b": 2, "c": 3}},
    {"one more": {"a": "x", "b": "y", "c": "z", "d": "w"}, "nested": {"a": {"b": [1]}}},
]


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("document", DOCUMENTS)
def test_json_is_the_text_json_dumps_writes(document: dict[str, Any]) -> None:
    out = io.BytesIO()
    JsonBytes(document).write(out)
    out.seek(0)
    array = np.lib.format.read_array(out)
    assert array.dtype == np.uint8
    assert array.tobytes() == json.dumps(document).encode()
    assert json.loads(array.tobytes()) == document


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize(
    "long", [[f"doc {i}" for i in range(7)], {f"doc {i}": "v" for i in range(7)}]
)
def test_long_lists_and_dicts_are_encoded_a_slice_at_a_time(
    long: list[str] | dict[str, str],
) -> None:
    """No piece of the text holds more than ``JSON_SLICE`` of their items."""
    pieces = JsonBytes({"long": long, "short": ["a"]}).pieces
    assert [piece.count(b'"doc ') for piece in pieces if b"doc " in piece] == [3, 3, 1]


@pytest.mark.usefixtures("small_pieces")
def test_a_zip_of_every_kind_of_entry_reads_back_as_savez_writes_it() -> None:
    rng = np.random.default_rng(3)
    whole = rng.integers(-127, 128, size=(19, 6)).astype(np.int8)
    norms = rng.random(19).astype(np.float32)
    rows = rng.permutation(19)
    document = {"strings": [f"entity {i}" for i in range(11)], "format": 5}
    entries: list[tuple[str, Any]] = [
        ("meta", JsonBytes(document)),
        ("plain", np.arange(7, dtype=np.int32)),
        ("codes", GatheredRows([whole[:8], whole[8:8], whole[8:]], rows)),
        ("norms", GatheredRows([norms[:10], norms[10:]], rows)),
    ]
    ours, theirs = io.BytesIO(), io.BytesIO()
    write_npz(iter(entries), ours)
    np.savez(
        theirs,
        meta=np.frombuffer(json.dumps(document).encode(), np.uint8),
        plain=np.arange(7, dtype=np.int32),
        codes=whole[rows],
        norms=norms[rows],
    )
    with np.load(io.BytesIO(ours.getvalue())) as a, np.load(io.BytesIO(theirs.getvalue())) as b:
        assert read_json(a, "meta") == read_json(b, "meta") == document
        with pytest.raises(ValueError, match="plain is not a JSON text"):
            read_json(a, "plain")
        assert a.files == b.files
        for name in b.files:
            assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape
            np.testing.assert_array_equal(a[name], b[name])
