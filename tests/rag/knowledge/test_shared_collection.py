"""A collection on a Qdrant server, shared with other writers (no server here: the
same code runs on one local-mode client that every "instance" shares, as they would
share a server). What another writer left must survive; only one instance writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from rag.knowledge import collection as shared_points
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.collection import SharedCollection
from rag.knowledge.embedding import EMBEDDING_DIM, Embedder
from rag.knowledge.kvstore import SqliteKVStore
from rag.knowledge.lease import LEASE_POINT_ID, CollectionLease, CollectionLeasedError
from rag.knowledge.models import DocumentIn
from rag.knowledge.shared_commit import SharedCommit

NAME = "shared"
CURIE = DocumentIn(id="curie", text="Marie Curie discovered polonium and radium in Paris.")
RIVER = DocumentIn(id="river", text="The Amazon River empties into the Atlantic Ocean in Brazil.")
THEIRS = DocumentIn(id="theirs", text="The lighthouse of Kellerby was built from granite in 1870.")
FOREIGN_ID = "6f1c0c3e-1111-4a4a-9b9b-000000000001"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[QdrantClient]:
    c = QdrantClient(path=str(tmp_path / "server"))
    yield c
    c.close()


@pytest.fixture
def instance(client: QdrantClient, tmp_path: Path, embedder: Embedder) -> Iterator[object]:
    """``instance(name)``: a warmrag knowledge base with its own data folder."""
    opened: list[KnowledgeBase] = []

    def open_(name: str, folder: str | None = None) -> KnowledgeBase:
        shared = SharedCollection(writer_id=f"id-{folder or name}", writer_name=name)
        kb = KnowledgeBase(
            tmp_path / (folder or name),
            client,
            embedder,
            collection=NAME,
            commit=SharedCommit(shared),
        )
        opened.append(kb)
        return kb

    yield open_
    for kb in opened:
        kb.release_writer()


def all_ids(client: QdrantClient) -> set[str]:
    points, _ = client.scroll(NAME, limit=10_000, with_payload=False)
    return {str(p.id) for p in points}


def top(kb: KnowledgeBase, question: str) -> list[str]:
    return [p.doc_id for p in kb.retrieve(kb.embedder.embed_query(question), 3)]


def insert_foreign_point(client: QdrantClient) -> None:
    """Another application's point in the same collection: no document id at all."""
    shared_points.ensure_collection(client, NAME, EMBEDDING_DIM, hnsw_m=16, hnsw_ef_construct=100)
    vector = [0.0] * EMBEDDING_DIM
    vector[3] = 1.0
    client.upsert(NAME, [qm.PointStruct(id=FOREIGN_ID, vector=vector, payload={"note": "x"})])


def test_points_of_other_writers_survive_start_up_and_ingests(
    instance, client: QdrantClient, embedder: Embedder
) -> None:
    insert_foreign_point(client)
    other = instance("other-host:1")
    other.upsert([THEIRS])
    other.release_writer()
    theirs_points = all_ids(client) - {FOREIGN_ID, LEASE_POINT_ID}
    assert len(theirs_points) == 1

    kb = instance("new-host:2")  # a different data folder, as on a fresh machine
    assert kb.writable
    assert kb.document_ids() == ["theirs"]
    kb.upsert([CURIE, RIVER])
    kb.upsert([DocumentIn(id="river", text="The Amazon River flows through Brazil and Peru.")])
    kb.delete("curie")
    kb.reconcile()
    left = all_ids(client)
    assert FOREIGN_ID in left and theirs_points <= left
    assert kb.document_ids() == ["river", "theirs"]
    assert top(kb, "lighthouse granite")[0] == "theirs"


def test_a_new_data_folder_sees_existing_documents_as_unchanged(
    instance, embedder: Embedder
) -> None:
    first = instance("first")
    first.upsert([CURIE, RIVER])
    first.release_writer()

    again = instance("again", folder="fresh-folder")
    before = embedder.texts_embedded
    change = again.upsert([CURIE, RIVER])
    assert change.unchanged == ["curie", "river"] and not change.added
    assert embedder.texts_embedded == before  # decided from the points, nothing embedded
    assert again.document_hash("curie") == first.document_hash("curie")


def test_a_second_instance_is_read_only_with_a_clear_error(instance, client: QdrantClient) -> None:
    writer = instance("writer-host:10")
    writer.upsert([CURIE])
    reader = instance("reader-host:11")
    assert writer.writable and not reader.writable
    with pytest.raises(CollectionLeasedError, match=r"writer-host:10.*read-only"):
        reader.upsert([RIVER])
    with pytest.raises(CollectionLeasedError):
        reader.delete("curie")
    assert top(reader, "Who discovered polonium?")[0] == "curie"  # reads still work
    assert writer.document_ids() == ["curie"]

    writer.upsert([RIVER])  # written after the reader opened: the reader still sees it
    assert "river" in top(reader, "Amazon River Atlantic")
    writer.upsert([DocumentIn(id="curie", text="Marie Curie won two Nobel prizes.")])
    found = reader.retrieve(reader.embedder.embed_query("Nobel prizes"), 3)
    assert [p.text for p in found if p.doc_id == "curie"] == ["Marie Curie won two Nobel prizes."]

    writer.release_writer()
    change = reader.upsert([DocumentIn(id="new", text="Kellerby lies on the river Zorn.")])
    assert change.added == ["new"] and reader.writable
    with pytest.raises(CollectionLeasedError, match="reader-host:11"):
        writer.upsert([THEIRS])


def test_only_this_instances_unfinished_writes_are_cleaned_up(
    instance, client: QdrantClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected: the commit (``set_payload``) fails after the chunks were added."""
    other = instance("other")
    other.upsert([THEIRS])
    # The other instance crashed mid-write: its pending point stays, hidden.
    theirs_pending = "6f1c0c3e-2222-4a4a-9b9b-000000000002"
    payload = {
        "doc_id": "half",
        "doc_hash": "h",
        shared_points.STATE_KEY: shared_points.PENDING,
        shared_points.WRITER_KEY: "id-other",
    }
    client.upsert(
        NAME, [qm.PointStruct(id=theirs_pending, vector=[1.0] * EMBEDDING_DIM, payload=payload)]
    )
    other.release_writer()

    kb = instance("me")
    assert theirs_pending in all_ids(client)

    def broken_commit(*args: object, **kwargs: object) -> None:
        raise RuntimeError("injected: commit failed")

    before = all_ids(client)
    monkeypatch.setattr(shared_points, "commit", broken_commit)
    with pytest.raises(RuntimeError, match="injected"):
        kb.upsert([CURIE])
    assert all_ids(client) == before  # its own pending chunks were removed, nothing else
    assert kb.document_ids() == ["theirs"]
    monkeypatch.undo()
    assert kb.upsert([CURIE]).added == ["curie"]
    assert theirs_pending in all_ids(client)
    assert "half" not in top(kb, "anything at all")


def test_a_crash_between_commit_and_clean_up_is_finished_at_the_next_start(
    instance, client: QdrantClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected: deleting the replaced version's chunks fails (as a crash would leave it)."""
    kb = instance("me")
    kb.upsert([RIVER])
    old = all_ids(client) - {LEASE_POINT_ID}
    monkeypatch.setattr(kb, "_remove_chunks", lambda added, ids: None)
    kb.upsert([DocumentIn(id="river", text="The Amazon River flows through Brazil and Peru.")])
    assert old <= all_ids(client)  # both versions stored; only the new one is current
    kb.release_writer()

    again = instance("me")  # same writer id: its own half-finished replace
    assert not (old & all_ids(client))
    assert again.document_ids() == ["river"]
    assert "Peru" in again.chunk_texts("river")[0][1]


def test_the_lease_point_and_pending_chunks_are_never_retrieved(
    instance, client: QdrantClient
) -> None:
    kb = instance("me")
    kb.upsert([CURIE])
    found = kb.retrieve(kb.embedder.embed_query("Marie Curie"), 10)
    assert [p.doc_id for p in found] == ["curie"]
    assert kb.count_chunks() == 1
    assert LEASE_POINT_ID in all_ids(client)


def _lease(client: QdrantClient, holder: str, clock: list[float]) -> CollectionLease:
    shared_points.ensure_collection(client, NAME, EMBEDDING_DIM, hnsw_m=16, hnsw_ef_construct=100)
    return CollectionLease(
        client, NAME, holder=holder, name=holder, vector_size=EMBEDDING_DIM, ttl_s=60,
        clock=lambda: clock[0],
    )  # fmt: skip


def test_a_lease_lapses_when_its_holder_stops_renewing(client: QdrantClient) -> None:
    clock = [1000.0]
    a, b = _lease(client, "a", clock), _lease(client, "b", clock)
    a.acquire()
    with pytest.raises(CollectionLeasedError, match=r"\(a, lease until"):
        b.acquire()
    clock[0] += 59
    assert a.renew()  # renewed at 1059: good until 1119
    clock[0] += 59
    with pytest.raises(CollectionLeasedError):
        b.acquire()
    clock[0] += 2  # a crashed: nobody renewed
    b.acquire()
    assert b.held and not a.renew() and not a.held


def test_of_two_instances_racing_for_a_lapsed_lease_exactly_one_wins(
    client: QdrantClient,
) -> None:
    """Both read the same lapsed lease, then both write: the conditional upsert lets
    only the first through, and the second reads the winner back."""
    clock = [1000.0]
    old = _lease(client, "old", clock)
    old.acquire()
    clock[0] += 120
    a, b = _lease(client, "a", clock), _lease(client, "b", clock)
    seen = a.read()
    assert seen is not None and seen == b.read()
    after_a = a._write_if(seen, clock[0] + 60)
    after_b = b._write_if(seen, clock[0] + 60)
    assert after_a is not None and after_b is not None
    assert after_a.holder == after_b.holder == "a"


def test_on_a_server_a_full_data_folder_fails_no_write(
    instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected: the local docstore file cannot be written (ENOSPC). On a server it is
    only a cache: the write commits in the collection, and a new folder sees it."""
    import errno

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    kb = instance("me")
    monkeypatch.setattr(SqliteKVStore, "commit", full)
    assert kb.upsert([CURIE]).added == ["curie"]
    monkeypatch.undo()
    kb.release_writer()
    assert instance("other", folder="elsewhere").document_ids() == ["curie"]


def test_a_kill_before_the_commit_is_cleaned_up_at_the_next_start(
    instance, client: QdrantClient
) -> None:
    """Injected: this data folder's write was killed after its chunks were added and
    before the commit, so its pending chunks are all that is left of it."""
    kb = instance("me")
    kb.upsert([CURIE])
    kb.release_writer()
    left = "6f1c0c3e-3333-4a4a-9b9b-000000000003"
    payload = {
        "doc_id": "river",
        "doc_hash": "h",
        shared_points.STATE_KEY: shared_points.PENDING,
        shared_points.WRITER_KEY: "id-me",  # the folder "me"'s writer id
    }
    vector = [1.0] * EMBEDDING_DIM
    client.upsert(NAME, [qm.PointStruct(id=left, vector=vector, payload=payload)])

    again = instance("me")
    assert left not in all_ids(client)
    assert again.document_ids() == ["curie"]
    assert top(again, "Amazon River")[0] == "curie"
