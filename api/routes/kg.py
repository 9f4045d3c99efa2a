"""Admin views of the knowledge graph."""

from __future__ import annotations

import anyio
from fastapi import APIRouter, HTTPException, Path, Query, status
from pydantic import BaseModel

from api.deps import AdminDep, RuntimeDep
from api.schemas import MAX_QUESTION_CHARS
from kg.models import EntityInfo, ScoredTriple, Triple
from rag.models import DOC_ID_PATTERN, Passage

router = APIRouter(prefix="/admin/kg", tags=["admin", "knowledge graph"], dependencies=[AdminDep])


class EntitiesResponse(BaseModel):
    entities: list[EntityInfo]
    node_count: int
    edge_count: int


class SubgraphResponse(BaseModel):
    question: str
    triples: list[ScoredTriple]
    passages: list[Passage]


class DocumentTriplesResponse(BaseModel):
    doc_id: str
    triples: list[Triple]


@router.get("/entities", response_model=EntitiesResponse)
async def entities(
    runtime: RuntimeDep,
    q: str = Query("", max_length=200, description="substring of an entity name"),
    limit: int = Query(20, ge=1, le=500),
) -> EntitiesResponse:
    graph = runtime.graph
    return EntitiesResponse(
        entities=graph.search_entities(q, limit),
        node_count=graph.node_count,
        edge_count=graph.edge_count,
    )


@router.get("/subgraph", response_model=SubgraphResponse)
async def subgraph(
    runtime: RuntimeDep,
    question: str = Query(min_length=1, max_length=MAX_QUESTION_CHARS),
    top_k: int = Query(3, ge=1, le=20),
) -> SubgraphResponse:
    """Exactly the triples a chat with this question would inject, with their scores."""
    if not question.strip():
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "question is empty")
    retrieval = await anyio.to_thread.run_sync(runtime.retriever.retrieve, question, top_k)
    triples = [t for t in retrieval.facts if isinstance(t, ScoredTriple)]
    return SubgraphResponse(question=question, triples=triples, passages=retrieval.passages)


@router.get("/documents/{doc_id}/triples", response_model=DocumentTriplesResponse)
async def document_triples(
    runtime: RuntimeDep, doc_id: str = Path(pattern=DOC_ID_PATTERN)
) -> DocumentTriplesResponse:
    if runtime.kb.document_hash(doc_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no document with id {doc_id!r}")
    return DocumentTriplesResponse(
        doc_id=doc_id, triples=runtime.graph.triples_for_document(doc_id)
    )
