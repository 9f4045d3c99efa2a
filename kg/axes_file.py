"""The entity codes' rotation and cells, kept in the graph's folder between starts.

A start codes every entity's vector again (``kg.lead_rows``). Fitting the rotation and the
cells anew each time would give different cells after every restart, and with them, for a
few questions, other entities linked than before it, so the warm registry's prompts would
no longer be what a chat builds. So the first fit is written here and later starts code
by it; the cells are fit again only as ``kg.cells.due`` says.

The file changes nothing a chat could find wrong: any rotation codes exactly, and any
cells are cells. One lost or unreadable is fit again (logged); one that cannot be written
is fit again at the next start.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np

from durable import atomic_write, remove_stale_temps
from kg.cells import Cells
from kg.rotation import Rotation

log = logging.getLogger(__name__)

FILE = "entity-axes.npz"
FORMAT = 1
ORTHONORMAL = 1e-5
"""How far a saved basis may be from orthonormal (a float32 fit's is 2.4e-6 off)."""


def read(folder: Path) -> Rotation | None:
    """The rotation saved in ``folder`` (None: none, or unreadable: logged)."""
    remove_stale_temps(folder, FILE)  # a write a crash cut short
    path = folder / FILE
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as saved:
            if int(saved["format"]) != FORMAT:
                raise ValueError(f"format {int(saved['format'])}")
            basis = np.asarray(saved["basis"], np.float32)
            centres = np.asarray(saved["centres"], np.float32)
            fitted_rows = int(saved["fitted_rows"])
        if basis.ndim != 2 or basis.shape[0] != basis.shape[1]:
            raise ValueError(f"a basis of shape {basis.shape}")
        product = basis.astype(np.float64) @ basis.T.astype(np.float64)
        if not np.allclose(product, np.eye(len(basis)), rtol=0.0, atol=ORTHONORMAL):
            raise ValueError("a basis that is not orthonormal")  # the screen's bound needs it
        if centres.size and (centres.ndim != 2 or centres.shape[1] >= basis.shape[0]):
            raise ValueError(f"centres of shape {centres.shape}")
    except (OSError, ValueError, KeyError) as exc:
        log.warning("knowledge graph: fitting the entity codes' axes again: %s: %s", path, exc)
        return None
    cells = Cells(centres, fitted_rows) if centres.size else None
    return Rotation(basis, cells)


def write(folder: Path, rotation: Rotation) -> None:
    """Keep ``rotation`` in ``folder`` for the next start (atomically); a failure is
    logged, not raised: the next start fits one again."""
    cells = rotation.cells
    buffer = io.BytesIO()
    np.savez(
        buffer,
        format=np.int64(FORMAT),
        basis=rotation.basis,
        centres=cells.centres if cells is not None else np.zeros((0, 0), np.float32),
        fitted_rows=np.int64(cells.fitted_rows if cells is not None else 0),
    )
    try:
        atomic_write(folder / FILE, lambda out: out.write(buffer.getvalue()))
    except OSError as exc:
        log.warning("knowledge graph: the entity codes' axes were not kept: %s", exc)


def keep(folder: Path, rotation: Rotation | None, kept: Rotation | None) -> Rotation | None:
    """Write ``rotation`` (the table's now) where it is not ``kept`` (the folder's): fit by
    this start, or its cells fit again; returns what the folder keeps now."""
    if rotation is None or rotation is kept:
        return kept
    cells = rotation.cells
    log.info(
        "knowledge graph: entity codes turned by new axes%s",
        f", {cells.count} cells fit to {cells.fitted_rows} entities" if cells else "",
    )
    write(folder, rotation)
    return rotation
