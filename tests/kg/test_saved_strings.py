"""The snapshot's string indexes kept in step with its lists (``kg.saved_strings``): a
change edits them as it edits the lists, so a save writes them without looking each
string up; what they say must always be the lists themselves."""

from __future__ import annotations

import itertools
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kg import KnowledgeGraph, saved_strings, snapshot_file
from kg.edge_lists import ChunkIndex
from kg.index import INDEXED_LISTS, GraphSnapshot
from kg.saved_strings import Splice, StringIndexes
from tests.kg.kg_testdata import snapshot_content, supplied
from tests.kg.test_snapshot_apply import hashed_embed, random_document

WORDS = ["ada", "bo", "cy", None, "di", "ek"]


def spliced_list(values: list[str | None], splice: Splice) -> list[str | None]:
    """What ``GraphSnapshot.apply`` does to a list, item by item."""
    drop = set(splice.drop)
    out = [v for i, v in enumerate(values) if i not in drop]
    for offset, (at, new) in enumerate(zip(splice.at, splice.new, strict=True)):
        out.insert(at + offset, new)
    for place, name in (splice.renamed or {}).items():
        out[place] = name
    return out


def random_splice(rng: random.Random, length: int) -> Splice:
    drop = sorted(rng.sample(range(length), rng.randrange(min(length, 4) + 1)))
    left = length - len(drop)
    at = sorted(rng.randrange(left + 1) for _ in range(rng.randrange(4)))
    new = [rng.choice(WORDS) for _ in at]
    renamed = {
        rng.randrange(left + len(at)): rng.choice(WORDS)
        for _ in range(rng.randrange(3) if left + len(at) else 0)
    }
    return Splice(drop, at, new, renamed)


def test_the_lists_come_back_with_each_string_one_object() -> None:
    a, b = " ".join(["entity", "x"]), " ".join(["entity", "x"])  # equal, two objects
    assert a is not b
    strings = StringIndexes.of({"keys": [a, "y", None], "names": ["y", b, a]})
    assert strings.table == ["entity x", "y", None]
    lists = strings.lists()
    assert lists == {"keys": ["entity x", "y", None], "names": ["y", "entity x", "entity x"]}
    assert lists["keys"][0] is lists["names"][1] is lists["names"][2]
    assert lists["keys"][1] is lists["names"][0]


def test_lists_of_distinct_strings_are_added_as_they_are() -> None:
    """The edges' texts are nearly all different: added after the looked-up strings,
    one table entry each (a repeated text twice), not looked up."""
    lists: dict[str, list[str | None]] = {
        "names": ["ada", "bo", "ada"],
        "texts": ["ada meets bo", "bo meets ada", "ada meets bo"],
    }
    strings = StringIndexes.of(lists, distinct=("texts",))
    assert strings.table == ["ada", "bo", *lists["texts"]]
    assert strings.lists() == lists and list(strings.indexes) == ["names", "texts"]
    assert strings.deduplicated().lists() == lists
    assert len(strings.deduplicated().table) == 4


def test_an_index_out_of_the_table_is_refused() -> None:
    strings = StringIndexes(["a"], {"keys": np.array([0, 1], np.int32)})
    with pytest.raises(ValueError, match="not in the snapshot's table"):
        strings.lists()


@pytest.mark.parametrize("seed", range(4))
def test_splices_keep_the_indexes_equal_to_the_lists(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 random splices (drops, inserts, renames) of two lists, the table compacted
    now and then; after each, the indexes say the lists, and every older one still says
    its own lists (the table they share only grows)."""
    monkeypatch.setattr(saved_strings, "_REBUILD_MIN", 8)
    rng = random.Random(seed)
    lists: dict[str, list[str | None]] = {"a": ["ada", "bo", "bo"], "b": []}
    strings = StringIndexes.of(lists)
    history = [(strings, {k: list(v) for k, v in lists.items()})]
    compactions = 0
    for _ in range(200):
        splices = {name: random_splice(rng, len(values)) for name, values in lists.items()}
        splices["not held"] = Splice((), [0], ["ignored"])
        before = strings
        strings = strings.spliced(splices)
        compactions += strings.table is not before.table
        lists = {name: spliced_list(values, splices[name]) for name, values in lists.items()}
        assert strings.lists() == lists
        history.append((strings, {k: list(v) for k, v in lists.items()}))
    assert compactions > 3
    for old, old_lists in history:
        assert old.lists() == old_lists
    saved = strings.deduplicated()
    used = {s for values in lists.values() for s in values}
    assert set(saved.table) == used and len(saved.table) == len(used)  # each used, once
    assert saved.lists() == lists


def test_matches_finds_indexes_that_say_other_strings() -> None:
    lists = {"keys": [f"key {i}" for i in range(50)], "docs": ["d"] * 50}
    strings = StringIndexes.of(lists)
    rng = np.random.default_rng(0)
    assert strings.matches(lists, rng)
    shifted = StringIndexes(strings.table, {**strings.indexes, "keys": strings.indexes["keys"] + 1})
    assert not shifted.matches({**lists, "keys": [*lists["keys"][:-1], "d"]}, rng)
    assert not strings.matches({**lists, "keys": lists["keys"][:-1]}, rng)  # shorter
    assert not strings.matches({"keys": lists["keys"]}, rng)  # a list missing


def changed_graph(folder: Path, steps: int, seed: int = 5) -> KnowledgeGraph:
    rng = random.Random(seed)
    graph = KnowledgeGraph(folder, hashed_embed)
    for step in range(steps):
        doc = f"doc-{step % 5}"
        if step % 4 == 3:
            graph.remove_documents([doc])
        else:
            graph.replace_documents({doc: random_document(rng, doc)}, {doc: f"v{step}"})
    return graph


def lists_of(snapshot: GraphSnapshot) -> dict[str, list[str | None]]:
    return {name: list(getattr(snapshot, name)) for name in INDEXED_LISTS}


def looked_up(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The strings each ``StringIndexes.of`` looks up from here on."""
    calls: list[int] = []
    make = StringIndexes.of.__func__  # type: ignore[attr-defined]

    def counting(
        cls: type[StringIndexes], lists: dict[str, list[str | None]], **options: Any
    ) -> StringIndexes:
        calls.append(sum(map(len, lists.values())))
        return make(cls, lists, **options)

    monkeypatch.setattr(StringIndexes, "of", classmethod(counting))
    return calls


def test_a_graph_keeps_its_strings_indexed_through_changes_stops_and_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new graph keeps the indexes from its first change on; its stop saves them
    without a lookup; the next start reads them back, its changes keep them, and its
    stop saves them again without a lookup: each start reads the graph it stopped."""
    graph = changed_graph(tmp_path / "kg", 12)
    assert graph.snapshot.strings is not None
    assert graph.snapshot.strings.lists() == lists_of(graph.snapshot)
    calls = looked_up(monkeypatch)
    graph.close()
    assert calls == []
    graph = KnowledgeGraph(tmp_path / "kg", hashed_embed)
    assert graph.snapshot.strings is not None
    rng = random.Random(9)
    for step in range(6):
        graph.replace_documents({"doc-1": random_document(rng, "doc-1")}, {"doc-1": f"w{step}"})
        assert graph.snapshot.strings.lists() == lists_of(graph.snapshot)
    expected = snapshot_content(graph.snapshot)
    table = list(graph.snapshot.strings.table)
    graph.close()
    assert calls == []
    read_back = KnowledgeGraph(tmp_path / "kg", hashed_embed, autosave=False)
    assert snapshot_content(read_back.snapshot) == expected
    # The stop grew the table's files by what the changes added (``kg.table_file``):
    # read back, it is the table the graph held, strings the changes added again (a
    # replaced document's id, its entities' names) twice, until a compaction.
    strings = read_back.snapshot.strings
    assert strings is not None and strings.saved is not None
    assert strings.table == table and len(set(table)) < len(table)
    # A table written whole (the first stop's, or a compacted one's) holds each once.
    assert len(set(strings.deduplicated().table)) == len(strings.deduplicated().table)


def test_a_start_from_the_rows_saves_by_looking_the_strings_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = changed_graph(tmp_path / "kg", 6)
    expected = snapshot_content(graph.snapshot)
    graph.close()
    snapshot_file.discard(tmp_path / "kg")  # as after a crash
    calls = looked_up(monkeypatch)
    graph = KnowledgeGraph(tmp_path / "kg", hashed_embed)
    assert graph.snapshot.strings is None
    graph.close()
    assert calls == [sum(map(len, lists_of(graph.snapshot).values()))]
    assert snapshot_content(KnowledgeGraph(tmp_path / "kg", hashed_embed).snapshot) == expected


def test_indexes_that_do_not_match_are_not_saved(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Fault injected: the kept indexes point one string off. The save says so and looks
    every string up; the next start reads the graph's own strings."""
    graph = changed_graph(tmp_path / "kg", 8)
    snap = graph.snapshot
    assert snap.strings is not None
    expected = snapshot_content(snap)
    wrong = {**snap.strings.indexes, "edge_doc": np.roll(snap.strings.indexes["edge_doc"], 1)}
    object.__setattr__(snap, "strings", StringIndexes(snap.strings.table, wrong))
    with caplog.at_level(logging.WARNING, logger="kg.snapshot_file"):
        graph.close()
    assert "string indexes do not match" in caplog.text
    assert snapshot_content(KnowledgeGraph(tmp_path / "kg", hashed_embed).snapshot) == expected


def test_a_graph_whose_table_is_compacted_in_a_change_is_saved_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Documents replaced until a change compacts the table (strings of replaced
    documents dropped from it); the save and the next start have every list whole."""
    monkeypatch.setattr(saved_strings, "_REBUILD_MIN", 50)
    graph = KnowledgeGraph(tmp_path / "kg", hashed_embed)
    tables, lengths = [], []
    for round_ in range(4):
        facts = [(f"e{round_}-{i}", "is", f"f{i}") for i in range(30)]
        graph.replace_documents({f"doc-{d}": supplied(f"doc-{d}", *facts) for d in range(3)})
        strings = graph.snapshot.strings
        assert strings is not None and strings.lists() == lists_of(graph.snapshot)
        tables.append(strings.table)
        lengths.append(len(strings.table))
    assert any(a is not b for a, b in itertools.pairwise(tables))  # a change compacted it
    # Each round adds as many strings as the first (600-odd): kept all, 2,500-odd.
    assert lengths[-1] <= 2 * lengths[0]
    expected = snapshot_content(graph.snapshot)
    graph.close()
    assert snapshot_content(KnowledgeGraph(tmp_path / "kg", hashed_embed).snapshot) == expected


def test_the_chunks_index_of_a_table_with_a_string_twice_is_the_lists_own() -> None:
    """A change adds its strings to the table without looking them up, so a document's
    id can stand there twice: the chunks' index read from the indexes is the one the
    lists give (``ChunkIndex.of``), one document and chunk for equal strings."""
    table = ["d1", "d1#0", None, "d2", "d1", "d1#0", "d2#1"]
    doc = np.array([0, 3, 4, 0, 4, 3, 0], np.int32)
    chunk = np.array([1, 6, 5, 2, 1, 2, 5], np.int32)
    from_indexes = ChunkIndex.of_indexes(doc, chunk, table)
    from_lists = ChunkIndex.of([table[i] for i in doc], [table[i] for i in chunk])
    assert (
        from_indexes.documents
        == from_lists.documents
        == {
            "d1": {"d1#0": 0, None: 2},
            "d2": {"d2#1": 1, None: 3},
        }
    )
    for name in ("edge_chunk", "ptr", "order"):
        assert getattr(from_indexes, name).tolist() == getattr(from_lists, name).tolist(), name
