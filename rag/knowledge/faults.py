"""Named points on the write path where a test can kill the process.

``WARMRAG_FAULT_KILL_AT=<point>`` makes the process SIGKILL itself when it reaches
that point: no ``finally``, no rollback, no flush, as in a power cut or an OOM kill.
The crash tests run a write in a child process with each point in turn and check
that a restart finds the knowledge base, the graph and the warm registry in step.
Unset (always, outside those tests), a checkpoint is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

KILL_AT_ENV = "WARMRAG_FAULT_KILL_AT"

#: Every checkpoint, in the order a write reaches them.
INGEST_POINTS = (
    "ingest.embedded",  # chunks embedded, nothing written
    "ingest.vectors_added",  # new chunks in Qdrant, docstore not yet saved
    "ingest.committed",  # docstore (the commit point) saved
    "ingest.old_chunks_removed",  # replaced chunks removed from Qdrant
    "ingest.graph_synced",  # graph written
)
DELETE_POINTS = (
    "delete.committed",  # docstore saved without the document
    "delete.chunks_removed",  # its chunks removed from Qdrant
    "delete.graph_synced",  # graph written
)
POINTS = INGEST_POINTS + DELETE_POINTS


def checkpoint(point: str) -> None:
    """SIGKILL this process if a test asked for a crash at ``point``."""
    if os.environ.get(KILL_AT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
