"""Warmup operations as queued jobs, each with its cycle report.

Every operation (a restore, a change's detection, a hot cycle, a re-touch) is a
*body* that fills a ``CycleReport``; ``Cycles`` queues it on the one ``JobQueue`` and
files its report in the ``ReportLog`` when it ends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from warmup.jobs import JobQueue, Priority
from warmup.reports import CycleKind, CycleReport, ReportLog

Body = Callable[[CycleReport], Awaitable[None]]


class Cycles:
    def __init__(self, queue: JobQueue, reports: ReportLog) -> None:
        self.queue = queue
        self.reports = reports

    async def run(self, priority: Priority, kind: CycleKind, body: Body) -> CycleReport:
        """Queue ``body`` as a job of this kind and wait for its report."""
        report: CycleReport = await self.queue.run(priority, kind, lambda: self._report(kind, body))
        return report

    def spawn(
        self, priority: Priority, kind: CycleKind, body: Body, *, coalesce: bool = True
    ) -> None:
        """Queue ``body`` without waiting (``coalesce``: unless a job of this kind is
        already waiting)."""
        self.queue.spawn(priority, kind, lambda: self._report(kind, body), coalesce=coalesce)

    async def _report(self, kind: CycleKind, body: Body) -> CycleReport:
        report = self.reports.begin(kind)
        await body(report)
        return self.reports.finish(report)
