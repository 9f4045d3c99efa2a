"""Child process of the crash tests: set up a knowledge base and a warm entry, then
run one write with ``WARMRAG_FAULT_KILL_AT`` set, so that it dies at that point.

``main(data_dir, operation, point)`` (or ``python -m tests.api.crash_child DATA_DIR
OPERATION POINT``); OPERATION is one of
``update`` (re-ingest a document with new text and triples), ``add`` (ingest a new
document) or ``delete``. The engine is ``tests.fakes.FakeEngine``: what is tested
is the stores on disk, not vLLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path

from api.config import Settings
from api.runtime import Runtime
from rag.knowledge.base import DocumentNotFoundError
from rag.knowledge.embedding import shared_embedder
from rag.knowledge.faults import KILL_AT_ENV
from rag.knowledge.models import DocumentIn
from tests.fakes import FakeEngine

ZORN_V1 = DocumentIn(
    id="zorn",
    text="The river Zorn is green and flows through Kellerby. Its water is cold.",
    triples=[["Zorn", "flows through", "Kellerby"]],
)
ZORN_V2 = DocumentIn(
    id="zorn",
    text="The river Zorn is purple since the dye works opened upstream in Ostfeld.",
    triples=[["Zorn", "rises in", "Ostfeld"]],
)
ASTER = DocumentIn(
    id="aster",
    text="Aster Bridge is the oldest stone bridge of Kellerby, built in 1432.",
    triples=[["Aster Bridge", "located in", "Kellerby"]],
)
NEW = DocumentIn(
    id="new",
    text="The Ostfeld dye works colour wool in purple and blue.",
    triples=[["Ostfeld dye works", "colours", "wool"]],
)
QUESTION = "What colour is the river Zorn?"


def settings(data_dir: Path) -> Settings:
    return Settings(
        data_dir=data_dir,
        seed_sample_kb=False,
        kg_extraction=False,  # supplied triples are enough to check the graph; spaCy is slow
        warmup_debounce_s=3600.0,  # detection never runs before the crash
    )


def operation(name: str) -> tuple[str, list[DocumentIn] | str]:
    """The request a test sends (and re-sends after the crash)."""
    requests: dict[str, tuple[str, list[DocumentIn] | str]] = {
        "update": ("ingest", [ZORN_V2]),
        "add": ("ingest", [NEW]),
        "delete": ("delete", "zorn"),
    }
    return requests[name]


async def send(runtime: Runtime, op: str) -> None:
    """Send the request of ``op`` (a delete of a document already gone is a no-op)."""
    kind, arg = operation(op)
    if kind == "ingest":
        assert isinstance(arg, list)
        await runtime.knowledge.ingest(arg)
    else:
        assert isinstance(arg, str)
        with contextlib.suppress(DocumentNotFoundError):  # committed before a crash
            await runtime.knowledge.delete(arg)


async def main(data_dir: Path, op: str, point: str) -> None:
    runtime = Runtime(settings(data_dir), embedder=shared_embedder(), llm=FakeEngine())
    await runtime.open()
    assert runtime.warmup is not None
    await runtime.warmup.start()
    await runtime.knowledge.ingest([ZORN_V1, ASTER])
    await runtime.warmup.add_seed_queries([QUESTION])
    assert await runtime.warmup.journal.flush(30)  # the warm entry is on disk
    os.environ[KILL_AT_ENV] = point
    await send(runtime, op)
    # Reached only if POINT is not on this operation's path.
    await runtime.stop()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2], sys.argv[3]))
