"""The entities' turned int8 codes, saved in the graph's snapshot and read back at a start
instead of coded again.

A start after a clean stop mapped the entities' vectors from the snapshot and coded every
one (``kg.lead_rows``: turned, coded, filed under its cell): at 1,000,000 chunks (2.1
million entities) 20 s of a 65 s start, reading 3.2 GB of vectors. The codes are a
quarter of that (404 bytes an entity) and, made by the same rotation from the same rows,
are the same bytes each time; so a clean stop saves them with the snapshot and the next
start reads them back, where its rotation is the one they were made by (the folder's
``kg.axes_file``, unless the cells are due to be fit again). Otherwise, or where none were
saved (plain codes: a table under ``lead_rows.MIN_ROWS``, coded in a moment), the start
codes them as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from kg.code_parts import turned_parts
from kg.int8_rows import Int8Rows
from kg.lead_rows import LeadRows
from kg.npz_file import GatheredRows
from kg.rotation import Rotation
from kg.row_matrix import RowMatrix

log = logging.getLogger(__name__)

_PREFIX = "entity_codes_"

_FIELDS: dict[str, Callable[[LeadRows], np.ndarray]] = {
    "lead": lambda p: p.lead.codes,
    "lead_unit": lambda p: p.lead.unit,
    "rest": lambda p: p.rest.codes,
    "rest_unit": lambda p: p.rest.unit,
    "rest_norm": lambda p: p.rest_norm,
}
"""The saved arrays of a part's rows (and ``cell``, where it has cells)."""


def _cells(part: LeadRows) -> np.ndarray:
    assert part.cell is not None
    return part.cell


def arrays(matrix: RowMatrix, rows: np.ndarray) -> dict[str, np.ndarray | GatheredRows]:
    """The arrays to save for the turned codes of ``matrix``'s ``rows``, in that order
    (the rows of the entities' saved vector file; none where the codes are plain, or
    the parts are turned two ways): a part's codes as they are where the rows are that
    part's, in order (a start's own part, its file kept); else each gathered as it is
    written (after a start from the rows: 766 MB at 1,000,000 chunks, not held at once)."""
    parts = matrix.codes
    turned = None if parts is None else turned_parts(parts)
    if turned is None:
        return {}
    whole = _whole_part(rows, turned)

    def rows_of(field: Callable[[LeadRows], np.ndarray]) -> np.ndarray | GatheredRows:
        if whole is not None:
            return np.ascontiguousarray(field(whole))
        return GatheredRows([field(p) for p in turned], rows)

    saved = {name: rows_of(field) for name, field in _FIELDS.items()}
    saved["bounds"] = np.array(
        [
            max(p.lead.max_error for p in turned),
            max(p.lead.max_norm for p in turned),
            max(p.rest.max_error for p in turned),
            max(p.rest.max_norm for p in turned),
        ],
        np.float64,
    )
    rotation = turned[0].rotation
    saved["basis"] = rotation.basis
    if rotation.cells is not None and turned[0].cell is not None:  # all or none
        saved["cell"] = rows_of(_cells)
        saved["centres"] = rotation.cells.centres
    return {_PREFIX + name: array for name, array in saved.items()}


def read(saved: Mapping[str, np.ndarray], rotation: Rotation | None, rows: int) -> LeadRows | None:
    """The codes ``arrays`` saved, in cell order, where they were made by ``rotation``
    (basis and cells the same) for ``rows`` rows; None where none were saved or they were
    made otherwise (logged: the start codes the rows again). ``ValueError`` where the
    arrays do not fit together (a damaged snapshot)."""
    names = set(saved)
    if rotation is None or _PREFIX + "basis" not in names:
        return None
    centres = saved[_PREFIX + "centres"] if _PREFIX + "centres" in names else None
    same_cells = (
        centres is None
        if rotation.cells is None
        else centres is not None and np.array_equal(centres, rotation.cells.centres)
    )
    if not (np.array_equal(saved[_PREFIX + "basis"], rotation.basis) and same_cells):
        log.info("knowledge graph: coding the entities again: their axes or cells changed")
        return None
    bounds = [float(b) for b in saved[_PREFIX + "bounds"]]
    lead = Int8Rows(saved[_PREFIX + "lead"], saved[_PREFIX + "lead_unit"], *bounds[:2])
    rest = Int8Rows(saved[_PREFIX + "rest"], saved[_PREFIX + "rest_unit"], *bounds[2:])
    norms = saved[_PREFIX + "rest_norm"]
    cell = saved[_PREFIX + "cell"] if centres is not None else None
    lengths = {len(lead.codes), len(lead.unit), len(rest.codes), len(rest.unit), len(norms)}
    if lengths != {rows} or (cell is not None and len(cell) != rows):
        raise ValueError(f"entity codes of {sorted(lengths)} rows for {rows} entities")
    if lead.codes.shape[1] + rest.codes.shape[1] != rotation.dim:
        raise ValueError(f"entity codes {lead.codes.shape[1]} + {rest.codes.shape[1]} wide")
    codes = LeadRows(rotation, lead, rest, norms, cell)
    codes.prepare(rows)  # the cell order a first question would make (as a start's coding)
    return codes


def _whole_part(rows: np.ndarray, turned: Sequence[LeadRows]) -> LeadRows | None:
    """The part whose rows are ``rows``, in order (a start's own part), if any."""
    start = 0
    for part in turned:
        if len(rows) == len(part) and np.array_equal(rows, np.arange(start, start + len(part))):
            return part
        start += len(part)
    return None
