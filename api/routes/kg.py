"""Admin views of the knowledge graph."""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel

from api.deps import AdminDep, GraphDep, KBDep, RetrieverDep
from api.routes.documents import PathDocId
from api.schemas import ADMIN_ERRORS, Question, error_responses
from kg.models import EntityInfo, Neighbourhood, ScoredTriple, Triple
from rag.knowledge.input_checks import CleanText
from rag.knowledge.models import Passage

router = APIRouter(
    prefix="/admin/kg",
    tags=["admin", "knowledge graph"],
    dependencies=[AdminDep],
    responses=error_responses(*ADMIN_ERRORS),
)


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
    graph: GraphDep,
    q: Annotated[CleanText, Query(max_length=200, description="substring of an entity name")] = "",
    limit: Annotated[int, Query(ge=1, le=500)] = 20,
) -> EntitiesResponse:
    return EntitiesResponse(
        entities=graph.search_entities(q, limit),
        node_count=graph.node_count,
        edge_count=graph.edge_count,
    )


@router.get("/around", response_model=Neighbourhood, responses=error_responses(404))
async def around(
    graph: GraphDep,
    entity: Annotated[CleanText, Query(min_length=1, max_length=200, description="entity name")],
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> Neighbourhood:
    """The knowledge graph around one entity: the triples it is the subject or object of."""
    found = graph.around(entity, limit)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no entity named {entity!r} in the graph")
    return found


@router.get("/subgraph", response_model=SubgraphResponse)
async def subgraph(
    retriever: RetrieverDep,
    question: Annotated[Question, Query()],
    top_k: Annotated[int, Query(ge=1, le=20)] = 3,
) -> SubgraphResponse:
    """Exactly the triples a chat with this question would inject, with their scores."""
    retrieval = await anyio.to_thread.run_sync(retriever.retrieve, question, top_k)
    triples = [t for t in retrieval.facts if isinstance(t, ScoredTriple)]
    return SubgraphResponse(question=question, triples=triples, passages=retrieval.passages)


@router.get(
    "/documents/{doc_id:doc_id}/triples",
    response_model=DocumentTriplesResponse,
    responses=error_responses(404),
)
async def document_triples(
    doc_id: PathDocId, kb: KBDep, graph: GraphDep
) -> DocumentTriplesResponse:
    """A document's supplied and extracted triples (percent-encode the id)."""
    if kb.document_hash(doc_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no document with id {doc_id!r}")
    return DocumentTriplesResponse(doc_id=doc_id, triples=graph.triples_for_document(doc_id))
