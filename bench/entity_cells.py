"""The entity link by embedding with cells against reading every row: recall and time.

For each size, vectors drawn like the real corpus's entities (``bench.entity_vectors``) are
coded as a start codes them, turned (``kg.lead_rows``), once with cells (``kg.cells``)
and once without, and the scale benchmark's questions (``bench.scale_startup``: half
naming an entity, half the real corpus's) are linked through both, as the selector
links them (``kg.links.most_similar``: at least 0.5, the best five), one after the
other per question. The recall is the share of the entities the full scan links that the
cells' scan links too: the same measure as the index's recall against exact search.

The drawn vectors are a Gaussian with the real entities' mean and covariance: less
clustered than real entities, which cells group better, so the recall here is the lower
one to expect.

    .venv/bin/python -m bench.entity_cells [--entities 209456 2094560] [--questions 300]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import numpy as np

from bench.entity_vectors import VectorShape, real_entity_shape, real_questions
from bench.scale_records import EntityCellsRow
from bench.scale_startup import asked_questions
from kg.lead_rows import LeadRows
from kg.links import most_similar
from kg.rotation import Rotation
from kg.vector_rows import VectorRows
from rag.chat.query import retrieval_text
from rag.knowledge.embedding import shared_embedder

THRESHOLD = 0.5
COUNT = 5
QUESTIONS = 300


def coded(vectors: np.ndarray, cells: bool) -> tuple[VectorRows, float]:
    """``vectors`` as a snapshot read back holds them, coded turned (with cells where
    asked), and the seconds the coding took (the cells' fit included)."""
    started = time.perf_counter()
    rotation = Rotation.fit(vectors)
    if cells:
        rotation = rotation.with_cells(vectors)
    codes = LeadRows.of(vectors, rotation)
    return VectorRows.stacked(vectors, codes), time.perf_counter() - started


def read_share(rows: VectorRows, query: np.ndarray) -> float:
    """The share of the rows in the cells a screen of ``query`` reads."""
    codes = rows.matrix.codes
    assert codes is not None and isinstance(codes[1], LeadRows) and codes[1].cell is not None
    cells = codes[1].rotation.cells_near(query)
    return float(np.isin(codes[1].cell, cells).mean())


def measure(
    vectors: np.ndarray, queries: np.ndarray, log: Callable[[str], None] = print
) -> EntityCellsRow:
    """Both scans over ``vectors`` for each of ``queries`` (rows: unit float32)."""
    every, coding_s = coded(vectors, cells=False)
    with_cells, coding_cells_s = coded(vectors, cells=True)
    log(f"  coded in {coding_s:.1f} s, with cells {coding_cells_s:.1f} s")
    for query in queries[:10]:  # each scan's first use builds what it keeps
        most_similar(every, query, THRESHOLD, COUNT)
        most_similar(with_cells, query, THRESHOLD, COUNT)
    took: dict[str, list[float]] = {"every": [], "cells": []}
    linked = found = same = 0
    shares = []
    for i, query in enumerate(queries):
        chosen = {}
        for name, rows in sorted(
            (("every", every), ("cells", with_cells)), reverse=bool(i % 2)
        ):  # alternate which goes first
            started = time.perf_counter()
            chosen[name] = most_similar(rows, query, THRESHOLD, COUNT)
            took[name].append((time.perf_counter() - started) * 1000)
        linked += len(chosen["every"])
        found += len(set(chosen["every"]) & set(chosen["cells"]))
        same += chosen["every"] == chosen["cells"]
        shares.append(read_share(with_cells, query))
    return EntityCellsRow(
        entities=len(vectors),
        questions=len(queries),
        linked_per_question=round(linked / len(queries), 3),
        recall=round(found / linked, 4) if linked else 1.0,
        same_choice=round(same / len(queries), 4),
        read_share=round(float(np.mean(shares)), 4),
        every_row_ms_p50=round(float(np.median(took["every"])), 3),
        cells_ms_p50=round(float(np.median(took["cells"])), 3),
        every_row_ms_mean=round(float(np.mean(took["every"])), 3),
        cells_ms_mean=round(float(np.mean(took["cells"])), 3),
        coding_s=round(coding_s, 2),
        coding_cells_s=round(coding_cells_s, 2),
    )


def run(
    sizes: Sequence[int],
    questions: int = QUESTIONS,
    shape: VectorShape | None = None,
    real: Sequence[str] | None = None,
    log: Callable[[str], None] = print,
) -> list[EntityCellsRow]:
    """One row per size (``shape`` and ``real`` None: the real corpus's)."""
    if not sizes:
        return []
    shape = shape or real_entity_shape()
    real = real_questions() if real is None else real
    embedder = shared_embedder()
    results = []
    for size in sizes:
        log(f"entity cells: {size} entities")
        vectors = shape.draw(np.random.default_rng(size), size)
        asked = asked_questions(size, questions, real)
        queries = embedder.embed_questions([retrieval_text(q) for q in asked])
        results.append(measure(vectors, queries, log))
        del vectors
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, nargs="+", default=[209_456, 2_094_560])
    parser.add_argument("--questions", type=int, default=QUESTIONS)
    args = parser.parse_args()
    for row in run(args.entities, args.questions, log=lambda line: print(line, flush=True)):
        print(row.model_dump_json(), flush=True)


if __name__ == "__main__":
    main()
