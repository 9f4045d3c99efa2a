"""Admin: ingest and delete documents (Bearer token)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Path, status

from api.deps import AdminDep, KBDep, RuntimeDep
from api.schemas import DeleteResponse, IngestRequest, IngestResponse
from rag.knowledge_base import DocumentNotFoundError
from rag.models import DOC_ID_PATTERN

router = APIRouter(prefix="/admin/documents", tags=["admin"], dependencies=[AdminDep])


@router.post("", response_model=IngestResponse)
async def ingest(request: IngestRequest, runtime: RuntimeDep) -> IngestResponse:
    """Upsert by content hash: unchanged documents are skipped and embed nothing."""
    change = await runtime.knowledge.ingest(request.documents)
    return IngestResponse(
        added=change.added,
        updated=change.updated,
        unchanged=change.unchanged,
        kb_version=change.kb_version,
    )


@router.get("")
async def list_documents(kb: KBDep) -> dict[str, object]:
    ids = kb.document_ids()
    return {"documents": ids, "count": len(ids), "kb_version": kb.version}


@router.delete(
    "/{doc_id}", response_model=DeleteResponse, responses={404: {"description": "no such document"}}
)
async def delete_document(
    runtime: RuntimeDep, doc_id: str = Path(pattern=DOC_ID_PATTERN)
) -> DeleteResponse:
    try:
        change = await runtime.knowledge.delete(doc_id)
    except DocumentNotFoundError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no document with id {doc_id!r}") from None
    return DeleteResponse(
        deleted=doc_id, removed_chunks=len(change.removed_chunk_ids), kb_version=change.kb_version
    )
