"""The entities' turned int8 codes, saved with the snapshot and read back at a start
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

Each array of a row each (``FIELDS``) is a ``.npy`` file of its own beside the entities'
vector file, a row for each of that file's rows, in its order; the bounds, the basis and
the cells' centres are in ``snapshot.npz``. Where the entities' vector file grew at a
stop (``kg.snapshot_file``) and the codes of its rows are the ones a start read back from
these files, the files grow by the new rows' codes likewise: a stop after a change no
longer writes every entity's codes (766 MB at 1,000,000 chunks). Snapshots of format 5
kept the arrays in ``snapshot.npz``; they are read from there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import IO

import numpy as np

from durable import atomic_write
from kg.code_parts import turned_parts
from kg.grown_file import grow
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
"""The saved arrays of a part's rows (and ``cell``, where it has cells): a file each."""
FIELDS = (*_FIELDS, "cell")


def _cells(part: LeadRows) -> np.ndarray:
    assert part.cell is not None
    return part.cell


CodePath = Callable[[str, str], Path]
"""The file of a snapshot's codes array: (the snapshot's id, the array's name) -> path."""


def save(
    matrix: RowMatrix,
    rows: np.ndarray,
    path_of: CodePath,
    snapshot_id: str,
    grown_from: str | None = None,
) -> dict[str, np.ndarray]:
    """Save the turned codes of ``matrix``'s ``rows`` (the entities' vector file's rows,
    in its order) to the files of snapshot ``snapshot_id``; return the arrays for
    ``snapshot.npz`` (none, and no file, where the codes are plain or turned two ways).

    ``grown_from``: where the entities' vector file grew from the one of that snapshot
    (``rows`` then start with the base's rows, in order), the code files of that
    snapshot grow by the codes of the rows after them, as long as the base's codes are
    the ones read back from those files (``LeadRows.saved_as``). Otherwise, or where a
    file cannot grow, each is written: a part's codes as they are where the rows are
    that part's, in order (a start's own part); else gathered as they are written
    (after a start from the rows: 766 MB at 1,000,000 chunks, not held at once)."""
    parts = matrix.codes
    turned = None if parts is None else turned_parts(parts)
    if turned is None:
        return {}
    rotation = turned[0].rotation
    fields = dict(_FIELDS)
    if rotation.cells is not None and turned[0].cell is not None:  # all or none
        fields["cell"] = _cells
    base = turned[0]
    split = len(base) if grown_from is not None and base.saved_as == grown_from else None
    whole = _whole_part(rows, turned)
    for name, field in fields.items():
        path = path_of(snapshot_id, name)
        if split is not None and split <= len(rows):
            added = GatheredRows([field(p) for p in turned], rows[split:])
            if grow(path_of(grown_from or "", name), split, path, added.write_rows):
                continue
        if whole is not None:
            atomic_write(path, partial(_write_array, np.ascontiguousarray(field(whole))))
        else:
            atomic_write(path, GatheredRows([field(p) for p in turned], rows).write)
    saved = {
        "bounds": np.array(
            [
                max(p.lead.max_error for p in turned),
                max(p.lead.max_norm for p in turned),
                max(p.rest.max_error for p in turned),
                max(p.rest.max_norm for p in turned),
            ],
            np.float64,
        ),
        "basis": rotation.basis,
    }
    if "cell" in fields:
        assert rotation.cells is not None
        saved["centres"] = rotation.cells.centres
    return {_PREFIX + name: array for name, array in saved.items()}


def _write_array(array: np.ndarray, out: IO[bytes]) -> None:
    np.lib.format.write_array(out, array, allow_pickle=False)


def read(
    saved: Mapping[str, np.ndarray],
    rotation: Rotation | None,
    rows: int,
    path_of: CodePath,
    snapshot_id: str,
) -> LeadRows | None:
    """The codes ``save`` saved for snapshot ``snapshot_id`` (``saved``: its
    ``snapshot.npz``), in cell order, where they were made by ``rotation`` (basis and
    cells the same) for ``rows`` rows; None where none were saved or they were made
    otherwise (logged: the start codes the rows again). ``ValueError`` or ``OSError``
    where the arrays do not fit together or a file is missing (a damaged snapshot)."""
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
    in_files = _PREFIX + "lead" not in names  # format 5 kept them in snapshot.npz

    def array(name: str) -> np.ndarray:
        if not in_files:
            return saved[_PREFIX + name]
        return np.asarray(np.load(path_of(snapshot_id, name), allow_pickle=False))

    bounds = [float(b) for b in saved[_PREFIX + "bounds"]]
    lead = Int8Rows(array("lead"), array("lead_unit"), *bounds[:2])
    rest = Int8Rows(array("rest"), array("rest_unit"), *bounds[2:])
    norms = array("rest_norm")
    cell = array("cell") if centres is not None else None
    lengths = {len(lead.codes), len(lead.unit), len(rest.codes), len(rest.unit), len(norms)}
    if lengths != {rows} or (cell is not None and len(cell) != rows):
        raise ValueError(f"entity codes of {sorted(lengths)} rows for {rows} entities")
    if lead.codes.shape[1] + rest.codes.shape[1] != rotation.dim:
        raise ValueError(f"entity codes {lead.codes.shape[1]} + {rest.codes.shape[1]} wide")
    codes = LeadRows(rotation, lead, rest, norms, cell)
    codes.prepare(rows)  # the cell order a first question would make (as a start's coding)
    if in_files:
        codes.saved_as = snapshot_id
    return codes


def _whole_part(rows: np.ndarray, turned: Sequence[LeadRows]) -> LeadRows | None:
    """The part whose rows are ``rows``, in order (a start's own part), if any."""
    start = 0
    for part in turned:
        if len(rows) == len(part) and np.array_equal(rows, np.arange(start, start + len(part))):
            return part
        start += len(part)
    return None
