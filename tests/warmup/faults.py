"""SQLite faults on demand: a ``sqlite3.Connection`` subclass for ``WarmupStore``'s
``connection_factory`` that raises ``sqlite3.OperationalError`` where a test says."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

WRITES = ("INSERT", "UPDATE", "DELETE")


@dataclass
class SQLiteFaults:
    """Armed with ``arm``, the matching statements raise ``message``: after letting
    ``skip`` of them through, the next ``times`` fail."""

    message: str = ""
    statements: tuple[str, ...] = WRITES
    skip: int = 0
    times: int = 0
    raised: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def arm(
        self, message: str, *, times: int = 1, skip: int = 0, statements: tuple[str, ...] = WRITES
    ) -> None:
        with self._lock:
            self.message, self.times, self.skip, self.statements = message, times, skip, statements

    def disarm(self) -> None:
        with self._lock:
            self.times = 0

    def check(self, sql: str) -> None:
        with self._lock:
            if not self.times or not sql.lstrip().upper().startswith(self.statements):
                return
            if self.skip:
                self.skip -= 1
                return
            self.times -= 1
            self.raised += 1
        raise sqlite3.OperationalError(self.message)

    def connection_class(self) -> type[sqlite3.Connection]:
        faults = self

        class FaultyConnection(sqlite3.Connection):
            def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
                faults.check(sql)
                return super().execute(sql, parameters)

            def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
                faults.check(sql)
                return super().executemany(sql, parameters)

        return FaultyConnection
