"""SQLite faults (locked, full, I/O error): a failed write is rolled back, the store
works again without a restart, and chats never notice."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rag.chat.change_rule import ContextBars
from rag.chat.query import normalize_query
from tests.conftest import Service
from tests.fakes import FakeEngine
from tests.warmup.faults import SQLiteFaults
from tests.warmup.rig import DOCS, QUESTIONS
from warmup.journal import Journal
from warmup.models import QueryRecord, WarmEntry
from warmup.registry import Registry
from warmup.store import WarmupStore

MESSAGES = ["database is locked", "database or disk is full", "disk I/O error"]


def entry(fingerprint: str) -> WarmEntry:
    return WarmEntry(
        fingerprint=fingerprint,
        messages=[{"role": "system", "content": fingerprint}],
        chunk_ids=["c1"],
        doc_ids=["d1"],
        content_hashes=["h1"],
        triples=[],
        prefix_tokens=100,
        cached_block_tokens=96,
        warmed_at=0.0,
        expires_at=10.0,
    )


def filled_store(path: Path, faults: SQLiteFaults) -> WarmupStore:
    """One entry, two queries pointing to it."""
    store = WarmupStore(path / "warmup.sqlite3", connection_factory=faults.connection_class())
    store.put_entry(entry("fp1"))
    for key in ("a", "b"):
        record = QueryRecord(key=key, text=key, count=1.0, fingerprint="fp1", kth_score=0.5)
        store.put_query(record, np.ones(4, np.float32))
    return store


@pytest.mark.parametrize("message", MESSAGES)
def test_a_failed_write_is_rolled_back_and_the_next_one_works(tmp_path: Path, message: str) -> None:
    faults = SQLiteFaults()
    store = filled_store(tmp_path, faults)
    faults.arm(message, skip=1)  # retire's DELETE goes through, its UPDATE fails
    with pytest.raises(sqlite3.OperationalError, match=message):
        store.retire("fp1")
    assert not store.in_transaction and store.failures == 1
    held = store.load()  # what the file holds: the whole retire rolled back
    assert [e.fingerprint for e in held.entries] == ["fp1"]
    assert {q.fingerprint for q, _ in held.queries} == {"fp1"}
    store.retire("fp1")  # the same store, no restart
    held = store.load()
    assert held.entries == [] and {q.fingerprint for q, _ in held.queries} == {None}
    store.close()


def test_a_failed_commit_is_rolled_back(tmp_path: Path) -> None:
    faults = SQLiteFaults()
    store = filled_store(tmp_path, faults)
    faults.arm("database or disk is full", statements=("COMMIT",))
    with pytest.raises(sqlite3.OperationalError, match="full"):
        store.put_entry(entry("fp2"))
    assert [e.fingerprint for e in store.load().entries] == ["fp1"]
    store.put_entry(entry("fp2"))
    assert [e.fingerprint for e in store.load().entries] == ["fp1", "fp2"]
    store.close()


def test_a_lock_held_elsewhere_fails_a_write_only_until_it_is_released(tmp_path: Path) -> None:
    path = tmp_path / "warmup.sqlite3"
    store = WarmupStore(path, busy_timeout_s=0.1)
    store.put_entry(entry("fp1"))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        store.put_entry(entry("fp2"))
    assert time.monotonic() - started < 2.0  # the busy timeout, not forever
    other.execute("ROLLBACK")
    other.close()
    store.put_entry(entry("fp2"))
    assert [e.fingerprint for e in store.load().entries] == ["fp1", "fp2"]
    store.close()


def test_the_journal_rewrites_the_store_once_it_takes_writes_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        faults = SQLiteFaults()
        store = WarmupStore(
            tmp_path / "warmup.sqlite3", connection_factory=faults.connection_class()
        )
        registry = Registry(persist=lambda write: journal.write(write))
        journal = Journal(store, registry.snapshot, retry_s=0.01)
        faults.arm("disk I/O error", times=3)  # the first batch, and two rewrites
        registry.put_entry(entry("fp1"))
        registry.record_query("a", "a", np.ones(4), 0.0, 3600.0)
        registry.assign("a", "fp1", ContextBars(0.5))
        registry.record_query("a", "a", np.ones(4), 0.0, 3600.0)
        assert await journal.flush(5.0)
        assert faults.raised == 3 and journal.failures == 3
        held = store.load()
        assert [e.fingerprint for e in held.entries] == ["fp1"]
        [(query, _)] = held.queries
        assert query == registry.query("a") and query.count == 2.0
        registry.retire("fp1")  # and later writes go through as they come
        assert await journal.flush(5.0)
        assert store.load().entries == []
        await journal.aclose()
        store.close()

    asyncio.run(scenario())


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.parametrize("message", MESSAGES)
def test_chats_answer_while_sqlite_fails_and_the_store_catches_up(
    start_fake_service: Callable[..., tuple[Service, FakeEngine]], message: str
) -> None:
    service, _ = start_fake_service(FakeEngine(num_blocks=4096))
    service.ingest(*[d.model_dump() for d in DOCS])
    question = QUESTIONS["zorn"]
    resp = service.client.post(
        "/admin/warmup/queries", json={"queries": [question]}, headers=service.admin()
    )
    assert resp.status_code == 200
    warmup = service.runtime.warmup
    assert warmup is not None
    faults = SQLiteFaults()
    store = warmup.store
    store.close()
    store.connection_factory = faults.connection_class()
    store.open()
    faults.arm(message, times=1_000_000)  # every write fails until disarmed
    for _ in range(3):
        body = service.chat(question)  # the chat path never waits for SQLite
        assert body["cache"]["warm_hit"] is True
    wait_for(lambda: warmup.journal.failures >= 1, "no write was attempted")
    assert not store.in_transaction
    faults.disarm()
    wait_for(lambda: warmup.journal.backlog == 0, "the store did not catch up")
    held = WarmupStore(store_path(service)).load()  # what a restart would read
    key = normalize_query(question)
    assert [q for q, _ in held.queries if q.key == key] == [warmup.registry.query(key)]
    assert [e.hits for e in held.entries] == [3]


def store_path(service: Service) -> Path:
    return service.settings.data_dir / "warmup.sqlite3"
