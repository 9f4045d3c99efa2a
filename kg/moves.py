"""Where a change moves the items of a snapshot's ordered arrays.

A ``GraphSnapshot`` (``kg.index``) keeps its nodes in key order and its edges in their
canonical order. A change drops some of each and inserts others at their places among
those kept, as ``np.insert`` places them: so an item that stays keeps its order relative
to every other that stays, and its new number follows from the two lists alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from kg.numbering import INDEX


@dataclass(frozen=True)
class Moves:
    """A change's items (a snapshot's edges, or its nodes): ``keep`` is true for each old
    item that stays, and added item ``m`` goes before kept item ``positions[m]`` (non-
    decreasing; ``np.insert``'s rule)."""

    keep: np.ndarray
    positions: np.ndarray

    @classmethod
    def of(cls, keep: np.ndarray, positions: Sequence[int]) -> Moves:
        return cls(keep, np.asarray(positions, INDEX))

    @cached_property
    def moved(self) -> np.ndarray:
        """Each old item's number after the change (-1: dropped)."""
        kept = np.arange(int(self.keep.sum()), dtype=INDEX)
        moved = np.full(len(self.keep), -1, INDEX)
        moved[self.keep] = kept + np.searchsorted(self.positions, kept, "right").astype(INDEX)
        return moved

    @cached_property
    def added(self) -> np.ndarray:
        """Each added item's number after the change, ascending."""
        return self.positions + np.arange(len(self.positions), dtype=INDEX)
