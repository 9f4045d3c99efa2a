"""A table's codes in parts (``kg.row_matrix``: a base coded at a start and a tail
coded as rows are added), each plain (``kg.int8_rows``) or turned (``kg.lead_rows``), and
what reads or gathers across them, numbering their rows in order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kg.best_rows import Best
from kg.int8_rows import Int8Rows, gather_rows
from kg.lead_rows import Codes, LeadRows


def estimate(parts: Sequence[Codes], query: np.ndarray) -> tuple[np.ndarray, float]:
    """Every row's estimated dot product with the float32 ``query`` (the parts' rows in
    order), and the slack: each exact score lies within it of its estimate."""
    scored = [part.scores(query) for part in parts]
    scores = [s for s, _ in scored]
    slack = max((s for _, s in scored), default=0.0)
    return np.concatenate(scores) if scores else np.zeros(0, np.float32), slack


def screen(
    parts: Sequence[Codes], query: np.ndarray, floor: float, best: Best | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """The rows (numbered as ``estimate`` numbers them, ascending) whose exact score with
    ``query`` can reach ``floor``, their estimates, and the slack; with ``best``, turned
    parts leave out rows that cannot be among the best (``kg.best_rows``). Turned parts
    drop most rows after their leading codes; plain ones estimate every row."""
    found, estimates, slacks, start = [], [], [0.0], 0
    for part in parts:
        if not len(part):  # a table's empty base, or tail: nothing to code the query for
            continue
        if isinstance(part, LeadRows):
            part_best = None if best is None else best.of_part(start, len(part))
            rows, scores, slack = part.screen(query, floor, part_best)
        else:
            every, slack = part.scores(query)
            rows = np.flatnonzero(every >= floor - slack)
            scores = every[rows]
        found.append(rows + start)
        estimates.append(scores)
        slacks.append(slack)
        start += len(part)
    if not found:
        return np.zeros(0, np.int64), np.zeros(0, np.float32), 0.0
    return np.concatenate(found), np.concatenate(estimates), max(slacks)


def gather(parts: Sequence[Codes], rows: np.ndarray) -> Codes | None:
    """A new one with ``rows`` of the parts' rows (numbered in order, as ``estimate``
    numbers them), in the order given; the parts' bounds hold for them. None where the
    parts holding rows are coded differently (plain and turned, or turned two ways).
    Turned codes with cells get their cell order here (0.7 s and 290 MB at 2.1 million
    rows: codes that are only saved are gathered as they are written instead,
    ``kg.npz_file.GatheredRows``)."""
    plain = [p for p in parts if isinstance(p, Int8Rows)]
    if all(isinstance(p, Int8Rows) for p in parts if len(p)):
        # Parts without rows add none, whatever their kind: number the plain ones alone.
        return gather_rows(plain, rows) if plain else None
    turned = turned_parts(parts)
    if turned is None:
        return None
    norms = np.concatenate([p.rest_norm for p in turned])
    cells = [p.cell for p in turned if p.cell is not None]  # all or none: one rotation
    gathered = LeadRows(
        turned[0].rotation,
        gather_rows([p.lead for p in turned], rows),
        gather_rows([p.rest for p in turned], rows),
        norms[rows],
        np.concatenate(cells)[rows] if cells else None,
    )
    gathered._cell_order()
    return gathered


def turned_parts(parts: Sequence[Codes]) -> list[LeadRows] | None:
    """The parts holding rows, where all are turned one way (their rows numbered as
    ``estimate`` numbers them: parts without rows add none); else None."""
    held = [p for p in parts if len(p)]
    turned = [p for p in held if isinstance(p, LeadRows)]
    if not turned or len(turned) != len(held):
        return None
    return turned if all(p.rotation is turned[0].rotation for p in turned) else None
