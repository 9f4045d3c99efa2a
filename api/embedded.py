"""The CLI's embedded mode: a data folder's knowledge base and graph, opened in this
process with no server running.

For loading documents before the first start, or while the service is stopped. The
stores are the service's own (``api.stores.build_knowledge``) and the writes go through
the same ``KnowledgeService``. Warm prefixes are left alone: the next start finds the
knowledge base newer than the warm registry and checks every entry against it before
restoring any, the path a service stopped between a write and its detection takes.

One process at a time opens a data folder (``api.folder_lock``): while the service runs,
it holds the folder, and opening it here fails naming it (send to the service instead).
On a Qdrant server, the collection's writer lease decides who writes the collection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import ExitStack
from types import TracebackType
from typing import TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from api.client import ServiceError
from api.config import Settings
from api.folder_lock import DataFolderInUseError, DataFolderLock
from api.schemas import DeleteResponse, IngestResponse
from api.stores import build_knowledge
from rag.knowledge.base import DocumentNotFoundError
from rag.knowledge.lease import CollectionLeasedError
from rag.knowledge.models import ChangeSet, DocumentIn
from rag.knowledge.service import KnowledgeService

T = TypeVar("T")

#: What opening or writing the stores can raise that the user can act on.
_STORE_ERRORS = (OSError, RuntimeError, ValueError, CollectionLeasedError)


class EmbeddedService:
    """``ingest`` and ``delete`` as ``WarmragClient`` has them, on the stores directly;
    failures are ``ServiceError`` with the reason."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stack = ExitStack()
        self._portal: BlockingPortal | None = None
        self._knowledge: KnowledgeService | None = None

    @property
    def where(self) -> str:
        s = self.settings
        return f"the Qdrant server's {s.qdrant_collection!r}" if s.qdrant_url else str(s.data_dir)

    def __enter__(self) -> EmbeddedService:
        from rag.knowledge.embedding import shared_embedder  # the model stack: only when used

        s = self.settings
        lock = DataFolderLock(s.data_dir, "an embedded ingest or delete")
        try:
            lock.acquire()
        except DataFolderInUseError as exc:
            who = f" ({exc.holder})" if exc.holder else ""
            raise ServiceError(
                f"cannot open {s.data_dir}: another warmrag process holds it{who}; "
                "while the service runs, drop --embedded to write through it"
            ) from None
        except OSError as exc:
            raise ServiceError(f"cannot open {s.data_dir}: {exc}") from None
        self._stack.callback(lock.release)  # last: after the stores close
        embedder = shared_embedder(s.embedding_precision, s.embedding_default, s.question_default)
        knowledge = build_knowledge(self.settings, embedder)
        try:
            embedder.warm_up()
            knowledge.open()
        except _STORE_ERRORS as exc:
            knowledge.close()
            self._stack.close()
            raise ServiceError(f"cannot open {self.where}: {exc}") from None
        self._stack.callback(knowledge.close)
        self._portal = self._stack.enter_context(start_blocking_portal())
        self._knowledge = knowledge
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stack.close()

    def _write(self, what: str, write: Callable[[T], Awaitable[ChangeSet]], arg: T) -> ChangeSet:
        assert self._portal is not None, "not open"
        try:
            return self._portal.call(write, arg)
        except DocumentNotFoundError:
            raise
        except _STORE_ERRORS as exc:
            raise ServiceError(f"{what} failed in {self.where}: {exc}") from None

    @property
    def knowledge(self) -> KnowledgeService:
        assert self._knowledge is not None, "not open"
        return self._knowledge

    def ingest(self, documents: Sequence[DocumentIn]) -> IngestResponse:
        change = self._write("ingest", self.knowledge.ingest, documents)
        return IngestResponse.model_validate(change, from_attributes=True)

    def delete(self, doc_id: str) -> DeleteResponse | None:
        """None if there is no such document."""
        try:
            change = self._write("delete", self.knowledge.delete, doc_id)
        except DocumentNotFoundError:
            return None
        return DeleteResponse(
            deleted=doc_id,
            removed_chunks=len(change.removed_chunk_ids),
            kb_version=change.kb_version,
        )
