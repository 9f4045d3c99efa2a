"""Admin: ingest, list and delete documents (Bearer token)."""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import APIRouter, HTTPException, Path, Query, Request, status
from starlette.convertors import PathConvertor, register_url_convertor

from api.deps import AdminDep, KBDep, KnowledgeDep
from api.guards import StrictJSONRoute
from api.schemas import (
    ADMIN_ERRORS,
    WRITE_ERRORS,
    DeleteResponse,
    DocumentListResponse,
    FileIngestResponse,
    IngestRequest,
    IngestResponse,
    error_responses,
)
from rag.knowledge.base import DocumentNotFoundError
from rag.knowledge.files import (
    SUPPORTED_SUFFIXES,
    DocumentFileError,
    UnsupportedFileTypeError,
    documents_from_bytes,
)
from rag.knowledge.input_checks import DOC_ID_DESCRIPTION, DocId
from rag.knowledge.models import DocumentIn, duplicate_ids

router = APIRouter(
    prefix="/admin/documents",
    tags=["admin"],
    dependencies=[AdminDep],
    route_class=StrictJSONRoute,
)
#: Routes whose body is a file's bytes, not JSON.
files_router = APIRouter(prefix="/admin/documents", tags=["admin"], dependencies=[AdminDep])


class DocIdConvertor(PathConvertor):
    """``{doc_id:doc_id}``: like ``:path`` (slashes included), and control characters too,
    so that a bad id in a URL is a 422 that names the character, not a 404."""

    regex = r"[\s\S]*"


register_url_convertor("doc_id", DocIdConvertor())

#: A document id in a URL path (``{doc_id:doc_id}``): percent-encoded or with bare slashes.
PathDocId = Annotated[DocId, Path(description=DOC_ID_DESCRIPTION)]


@router.post("", response_model=IngestResponse, responses=error_responses(*WRITE_ERRORS))
async def ingest(request: IngestRequest, knowledge: KnowledgeDep) -> IngestResponse:
    """Upsert by content hash: unchanged documents are skipped and embed nothing."""
    change = await knowledge.ingest(request.documents)
    return IngestResponse(
        added=change.added,
        updated=change.updated,
        unchanged=change.unchanged,
        kb_version=change.kb_version,
    )


@router.get("", response_model=DocumentListResponse, responses=error_responses(*ADMIN_ERRORS))
async def list_documents(kb: KBDep) -> DocumentListResponse:
    """Every document id, and the knowledge base's version."""
    ids = kb.document_ids()
    return DocumentListResponse(documents=ids, count=len(ids), kb_version=kb.version)


@router.delete(
    "/{doc_id:doc_id}",
    response_model=DeleteResponse,
    responses=error_responses(*WRITE_ERRORS, 404),
)
async def delete_document(doc_id: PathDocId, knowledge: KnowledgeDep) -> DeleteResponse:
    """Remove a document, its chunks and its triples. Percent-encode the id
    (``guide%2Finstall.md``, ``faq%2Fgeneral%23q3``); a literal ``/`` works too."""
    try:
        change = await knowledge.delete(doc_id)
    except DocumentNotFoundError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no document with id {doc_id!r}") from None
    return DeleteResponse(
        deleted=doc_id, removed_chunks=len(change.removed_chunk_ids), kb_version=change.kb_version
    )


def _read_file(path: str, data: bytes) -> list[DocumentIn]:
    """The file's documents; its ids must be unique (a .jsonl may hold any number of
    documents: the body-size limit bounds it, as for ``warmrag ingest``)."""
    try:
        documents = list(documents_from_bytes(path, data))
    except UnsupportedFileTypeError as exc:
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, str(exc)) from None
    except DocumentFileError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    if dupes := duplicate_ids(documents):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"{path}: duplicate document ids in one file: {', '.join(dupes)}",
        )
    return documents


@files_router.post(
    "/files",
    response_model=FileIngestResponse,
    responses=error_responses(*WRITE_ERRORS, 415),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
)
async def ingest_file(
    request: Request,
    knowledge: KnowledgeDep,
    path: Annotated[
        str,
        Query(
            min_length=1,
            max_length=1024,
            description="The file's path relative to the folder it was chosen from: the "
            "document id of a text file, and its type by suffix "
            f"({', '.join(SUPPORTED_SUFFIXES)}). A .jsonl file's lines carry their own ids.",
        ),
    ],
) -> FileIngestResponse:
    """Ingest one file sent as the request body, read as ``warmrag ingest`` reads it
    (HTML and PDF text included). Nothing is stored unless the whole file is readable."""
    data = await request.body()
    documents = await anyio.to_thread.run_sync(_read_file, path, data)
    change = await knowledge.ingest(documents)
    return FileIngestResponse(
        path=path,
        documents=[d.id for d in documents],
        added=change.added,
        updated=change.updated,
        unchanged=change.unchanged,
        kb_version=change.kb_version,
    )
