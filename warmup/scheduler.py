"""APScheduler jobs that drive warmup in the service's event loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from warmup.service import WarmupService

log = logging.getLogger(__name__)


class WarmupScheduler:
    """Periodic detection (a full re-check), TTL sweeps and hot-query warmup."""

    def __init__(
        self,
        service: WarmupService,
        *,
        detect_interval_s: float,
        sweep_interval_s: float,
        hot_interval_s: float,
    ) -> None:
        self.service = service
        self._scheduler = AsyncIOScheduler()
        jobs: dict[str, tuple[Callable[[], Awaitable[Any]], float]] = {
            "detect": (service.recheck, detect_interval_s),
            "ttl_sweep": (service.sweep, sweep_interval_s),
            "hot_warmup": (service.warm_hot, hot_interval_s),
        }
        for job_id, (func, seconds) in jobs.items():
            self._scheduler.add_job(
                self._guard(job_id, func),
                "interval",
                seconds=seconds,
                id=job_id,
                max_instances=1,
                coalesce=True,
            )

    @staticmethod
    def _guard(job_id: str, func: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            try:
                await func()
            except asyncio.CancelledError:  # the service is stopping: not a failure
                log.debug("warmup job %s cancelled", job_id)
            except Exception:  # a failed run must not stop the schedule
                log.exception("warmup job %s failed", job_id)

        run.__name__ = job_id
        return run

    def start(self) -> None:
        self._scheduler.start()

    def shutdown(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)

    def jobs(self) -> list[dict[str, str | None]]:
        return [
            {
                "id": job.id,
                "next_run_time": job.next_run_time.isoformat() if job.next_run_time else None,
            }
            for job in self._scheduler.get_jobs()
        ]
