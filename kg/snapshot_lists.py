"""The snapshot's lists of strings, and how a change makes the next snapshot's.

A ``GraphSnapshot`` (``kg.index``) holds its nodes' keys and names, its predicates' keys
and seven strings per edge. Where it keeps their indexes into one table of strings
(``kg.saved_strings``: a snapshot read back, or grown from an empty one), the lists are
read through those indexes (``StringColumn``) and a change splices the indexes alone.
A snapshot built from the graph's rows (a start after a crash) holds plain lists, and a
change copies them with its items dropped and inserted (``without``, ``inserted``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from kg.models import EdgeRow
from kg.normalize import normalize_predicate
from kg.saved_strings import StringColumn

#: The per-edge lists of strings, in field order.
EDGE_LISTS = (
    "edge_subject_name",
    "edge_predicate",
    "edge_object_name",
    "edge_text",
    "edge_doc",
    "edge_chunk",
    "edge_source",
)
#: The lists of strings, saved as indexes into one table of their strings
#: (``kg.saved_strings``): most repeat (an entity's key and name in each of its edges);
#: the edges' texts are nearly all different, but in the table they are saved with it,
#: a stop appending those a change added (``kg.table_file``).
INDEXED_LISTS = (
    "node_keys",
    "node_names",
    "predicate_keys",
    *EDGE_LISTS,
)


def canonical_rows(edges: Iterable[EdgeRow], texts: Mapping[str, str]) -> list[tuple[Any, ...]]:
    """One row per edge, its canonical sort key first: (subject key, predicate key,
    object key, doc, chunk or "", position), then predicate, the edge, chunk, text (the
    object ``texts`` holds for it, if any). The edge itself is kept, not a dict of its
    attributes: at 323,000 triples those dicts held 69 MiB after a crash's start (the
    pools they freed were not given back) and raised its peak as much."""
    rows = []
    # Few distinct predicates, many edges: normalizing each edge's took a third of
    # the build at 100,000 triples.
    predicate_keys: dict[str, str] = {}
    for edge in edges:
        predicate = edge.predicate
        predicate_key = predicate_keys.get(predicate)
        if predicate_key is None:
            predicate_key = predicate_keys[predicate] = normalize_predicate(predicate)
        text = edge.text
        rows.append(
            (
                edge.subject,
                predicate_key,
                edge.object,
                edge.doc_id,
                edge.chunk_id or "",
                edge.position,
                predicate,
                edge,
                edge.chunk_id,
                texts.get(text, text),
            )
        )
    return rows


def edge_lists(rows: Sequence[tuple[Any, ...]]) -> dict[str, list[Any]]:
    """The ``EDGE_LISTS`` of ``canonical_rows``' rows, in their order."""
    return {
        "edge_subject_name": [r[7].subject_name for r in rows],
        "edge_predicate": [r[6] for r in rows],
        "edge_object_name": [r[7].object_name for r in rows],
        "edge_text": [r[9] for r in rows],
        "edge_doc": [r[3] for r in rows],
        "edge_chunk": [r[8] for r in rows],
        "edge_source": [r[7].source for r in rows],
    }


def without(values: Sequence[Any], drop: Sequence[int]) -> list[Any]:
    """A new list: ``values`` without the items at ``drop`` (ascending)."""
    out: list[Any] = []
    start = 0
    for i in drop:
        out.extend(values[start:i])
        start = i + 1
    out.extend(values[start:])
    return out


def inserted(values: Sequence[Any], positions: Sequence[int], new: Sequence[Any]) -> list[Any]:
    """A new list: ``new[m]`` inserted before ``values[positions[m]]`` (non-decreasing)."""
    out: list[Any] = []
    start = 0
    for position, value in zip(positions, new, strict=True):
        out.extend(values[start:position])
        out.append(value)
        start = position
    out.extend(values[start:])
    return out


def take(strings: Sequence[Any], positions: np.ndarray) -> list[Any]:
    """``strings[p]`` for each of ``positions``; a ``StringColumn``'s gathered at once
    (a question's candidate facts: thousands)."""
    if isinstance(strings, StringColumn):
        return strings.take(positions)
    return [strings[p] for p in positions.tolist()]


def sorted_place(strings: Sequence[Any], string: str) -> int:
    """``bisect.bisect_left`` of sorted ``strings``; a ``StringColumn``'s probed in C."""
    if isinstance(strings, StringColumn):
        return strings.bisect_left(string)
    return bisect_left(strings, string)
