"""A snapshot saved by an older format that is still read: read back, not rebuilt from
the rows, and saved again in the current format at the stop."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kg.snapshot_file
import kg.table_file
from kg import EmbedFn, KnowledgeGraph
from kg.index import INDEXED_LISTS
from kg.snapshot_file import FILE, VECTOR_FILE
from tests.kg.snapshot_checks import CODE_ROWS, rows_read, saves_made
from tests.kg.test_kg_load import assert_same_snapshot, saved  # noqa: F401  (the fixture)


def as_format_6(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The saved snapshot's meta and arrays as format 6 saved them: the table of strings
    (its files removed here) and each edge's text in the JSON."""
    with np.load(folder / FILE) as held:
        arrays = {name: held[name] for name in held.files}
    meta = json.loads(arrays.pop("meta").tobytes())
    count, size = meta.pop("table")
    path_of = partial(kg.snapshot_file._file_path, folder)
    nones = tuple(arrays.pop("string_nones").tolist())
    table = kg.table_file.read(path_of, kg.table_file.SavedTable(meta["id"], count, size, nones))
    for kind in (kg.table_file.TEXT, kg.table_file.ENDS):
        path_of(meta["id"], kind).unlink()
    meta["edge_text"] = [table[i] for i in arrays.pop("edge_text_strings").tolist()]
    meta["strings"] = table
    meta["format"] = 6
    return meta, arrays


def as_format_5(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """As format 5 saved them: format 6's, with the entities' vector file (rewritten
    here) and codes (moved into the arrays) in node order, no ``node_rows``."""
    meta, arrays = as_format_6(folder)
    node_rows = arrays.pop("node_rows")
    assert not np.array_equal(node_rows, np.arange(len(node_rows)))  # not node order yet
    nodes = folder / VECTOR_FILE.format(id=meta["id"], kind="nodes")
    np.save(nodes, np.load(nodes)[node_rows])
    for name in CODE_ROWS:
        path = folder / VECTOR_FILE.format(id=meta["id"], kind=f"codes-{name}")
        if path.exists():
            arrays[f"entity_codes_{name}"] = np.load(path)[node_rows]
            path.unlink()
    meta["format"] = 5
    return meta, arrays


def as_format_4(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """As format 4 saved them: format 5's, with each list's strings in the JSON and no
    codes."""
    meta, arrays = as_format_5(folder)
    table = meta.pop("strings")
    for name in INDEXED_LISTS:
        if name != "edge_text":  # in the JSON already
            meta[name] = [table[i] for i in arrays.pop(f"{name}_strings").tolist()]
    meta["format"] = 4
    return meta, {k: v for k, v in arrays.items() if not k.startswith("entity_codes_")}


def write_snapshot(folder: Path, meta: dict[str, Any], arrays: dict[str, Any]) -> None:
    with (folder / FILE).open("wb") as out:
        np.savez(out, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)


@pytest.mark.parametrize("older", [as_format_6, as_format_5, as_format_4])
def test_a_snapshot_of_an_older_format_is_read_and_saved_again_as_the_current_one(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
    older: Callable[[Path], tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    """A folder from before format 7 (the table of strings in the JSON), before format 6
    (also the entities' vectors in node order, without ``node_rows``) or before format 5
    (also each list's strings in the JSON, no codes) starts from its snapshot, not from
    the rows, and its stop saves the current format."""
    saved.close()
    write_snapshot(saved.folder, *older(saved.folder))
    reads, saves = rows_read(monkeypatch), saves_made(monkeypatch)
    again = KnowledgeGraph(saved.folder, embed_fn)
    assert reads == []
    assert_same_snapshot(again.snapshot, saved.snapshot)
    again.close()
    assert saves == [saved.folder]
    with np.load(saved.folder / FILE) as held:
        assert json.loads(held["meta"].tobytes())["format"] == kg.snapshot_file.FORMAT
        assert "node_rows" in held.files
    assert_same_snapshot(KnowledgeGraph(saved.folder, embed_fn).snapshot, saved.snapshot)
    assert reads == []
