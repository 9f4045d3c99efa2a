"""What ``warmrag ingest`` did to each file, as the service's answers come back."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from api.schemas import IngestResponse
from rag.knowledge.files import SourceFile
from rag.knowledge.models import DocumentIn


class IngestTally:
    """Each file's outcome as batches of its documents come back; a file's documents may
    span requests (a large .jsonl), and one request may hold several files."""

    NAMES = ("added", "updated", "unchanged")

    def __init__(self, sources: Sequence[SourceFile]) -> None:
        self.sources = list(sources)
        self.owner = {d.id: s.path for s in sources for d in s.documents}
        self.counts: dict[Path, Counter[str]] = {s.path: Counter() for s in sources}
        self.failed: dict[Path, str] = {}

    def add(self, result: IngestResponse) -> None:
        for name in self.NAMES:
            for doc_id in getattr(result, name):
                self.counts[self.owner[doc_id]][name] += 1

    def fail(self, batch: Sequence[DocumentIn], problem: str) -> None:
        for doc in batch:
            self.failed[self.owner[doc.id]] = problem

    def totals(self) -> str:
        total = sum(self.counts.values(), Counter())
        return ", ".join(f"{name} {total[name]}" for name in self.NAMES)

    def table(self, note: str = "not sent") -> Table:
        """One row per file: invalid, failed, what it did, or ``note`` when not sent."""
        table = Table("file", "documents", "outcome", title="ingest")
        for source in self.sources:
            counts = self.counts[source.path]
            done = ", ".join(f"{n} {counts[n]}" for n in self.NAMES if counts[n])
            if source.error:
                outcome = "[red]invalid[/red]"
            elif source.path in self.failed:
                then = f"{done}, then " if done else ""
                outcome = f"{then}[red]failed[/red]: {self.failed[source.path]}"
            else:
                outcome = done or note
            table.add_row(str(source.path), str(len(source.documents)), outcome)
        return table
