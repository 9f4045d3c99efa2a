"""A lock granted in arrival order (the embedder's: ``rag.knowledge.embedding``)."""

from __future__ import annotations

import threading


class FairLock:
    """A lock granted in arrival order.

    ``threading.Lock`` is not fair: a thread that releases it and asks again at once
    (an ingest embedding batch after batch) usually wins over a thread that has been
    waiting (a chat's question), which then waits for the whole ingest. Measured: a
    chat's retrieval waited 25 s during a 50,000-word ingest."""

    def __init__(self) -> None:
        self._turns = threading.Condition()
        self._next_ticket = 0
        self._serving = 0

    def __enter__(self) -> None:
        with self._turns:
            ticket = self._next_ticket
            self._next_ticket += 1
            while ticket != self._serving:
                self._turns.wait()

    def __exit__(self, *exc: object) -> None:
        with self._turns:
            self._serving += 1
            self._turns.notify_all()
