"""Retrieval quality on a corpus with gold answers: does a question find its section?

Per question, the ranked document ids (chunks deduplicated to their document, first
occurrence counts) give the gold document's rank; recall@1/3/10 and MRR (1/rank within
the top 10, else 0) follow. "Gold text in prompt" asks the stricter question the chat
cares about: does the gold section's first paragraph reach the passages a prompt is
built from? Two retrievers are scored the same way: warmrag's own (``evaluate_service``)
and llama-index's defaults over the same documents and embedding model
(``evaluate_llamaindex_defaults``), the baseline warmrag's chunking is compared with.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import llama_index.core
import tiktoken
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.constants import DEFAULT_SIMILARITY_TOP_K
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import MetadataMode
from pydantic import PrivateAttr

from bench.real_records import QualitySummary
from rag.knowledge.embedding import Embedder

RANK_DEPTH = 10


@dataclass(frozen=True)
class GoldQuestion:
    question: str
    gold: str  # the document id that answers it
    gold_text: str  # a passage of the gold document that should reach the prompt


@dataclass(frozen=True)
class QuestionResult:
    question: str
    gold: str
    rank: int | None  # 1-based among distinct documents within the top RANK_DEPTH
    gold_text_in_prompt: bool


@dataclass(frozen=True)
class Quality:
    """Aggregates over ``n`` questions, with each question's result for comparisons."""

    recall_at_1: float
    recall_at_3: float
    recall_at_10: float
    mrr: float
    gold_text_in_prompt: float
    n: int
    results: tuple[QuestionResult, ...]
    seconds: float = 0.0  # ingest (index build) time, when the evaluator measured one

    def summary(self) -> QualitySummary:
        return QualitySummary(
            n=self.n,
            recall_at_1=round(self.recall_at_1, 3),
            recall_at_3=round(self.recall_at_3, 3),
            recall_at_10=round(self.recall_at_10, 3),
            mrr=round(self.mrr, 3),
            gold_text_in_prompt=round(self.gold_text_in_prompt, 3),
        )

    def fixed_and_broken(self, baseline: Quality, k: int = 3) -> tuple[list[str], list[str]]:
        """Questions found in the top ``k`` here but not by ``baseline``, and the reverse."""
        theirs = {r.question: r.rank for r in baseline.results}
        fixed, broken = [], []
        for r in self.results:
            ours_in = r.rank is not None and r.rank <= k
            other = theirs.get(r.question)
            theirs_in = other is not None and other <= k
            if ours_in and not theirs_in:
                fixed.append(r.question)
            elif theirs_in and not ours_in:
                broken.append(r.question)
        return fixed, broken


def dedupe(doc_ids: Iterable[str]) -> list[str]:
    """Document ids in first-occurrence order (several chunks of one document count once)."""
    return list(dict.fromkeys(doc_ids))


def gold_rank(doc_ids: Sequence[str], gold: str, depth: int = RANK_DEPTH) -> int | None:
    """1-based rank of ``gold`` among the distinct documents of the top ``depth`` hits."""
    ranked = dedupe(doc_ids[:depth])
    return ranked.index(gold) + 1 if gold in ranked else None


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def gold_text_reaches(gold_text: str, passage_texts: Iterable[str]) -> bool:
    """Whether ``gold_text`` (whitespace normalised) lies inside one of the passages."""
    wanted = _squash(gold_text)
    return any(wanted in _squash(text) for text in passage_texts)


def score(
    questions: Sequence[GoldQuestion],
    rankings: Sequence[Sequence[str]],
    prompts: Sequence[Sequence[str]],
    seconds: float = 0.0,
) -> Quality:
    """Quality from each question's ranked doc ids (hits, best first, duplicates allowed)
    and the texts its prompt would be built from."""
    results = tuple(
        QuestionResult(
            q.question, q.gold, gold_rank(ids, q.gold), gold_text_reaches(q.gold_text, p)
        )
        for q, ids, p in zip(questions, rankings, prompts, strict=True)
    )
    n = len(results)

    def share(hits: Iterable[bool]) -> float:
        return sum(hits) / n if n else 0.0

    def recall(k: int) -> float:
        return share(r.rank is not None and r.rank <= k for r in results)

    return Quality(
        recall_at_1=recall(1),
        recall_at_3=recall(3),
        recall_at_10=recall(10),
        mrr=sum(1 / r.rank for r in results if r.rank) / n if n else 0.0,
        gold_text_in_prompt=share(r.gold_text_in_prompt for r in results),
        n=n,
        results=results,
        seconds=seconds,
    )


class PassageRetriever(Protocol):
    """What ``rag.chat.retriever.Retriever`` offers the evaluation."""

    def retrieve(self, question: str, top_k: int = 3) -> Any: ...


def evaluate_service(
    retriever: PassageRetriever,
    questions: Sequence[GoldQuestion],
    prompt_k: int = 3,
    seconds: float = 0.0,
) -> Quality:
    """warmrag's retrieval: ranks from its top ``RANK_DEPTH`` chunks; the prompt is what
    a chat's top ``prompt_k`` (the service's ``top_k``) shows, each passage as widened
    for the prompt (``window``) when it carries one (windows of a top 3 merge
    differently from those of a top 10, so it is retrieved as a chat would)."""
    rankings, prompts = [], []
    for q in questions:
        passages = retriever.retrieve(q.question, top_k=RANK_DEPTH).passages
        rankings.append([p.doc_id for p in passages])
        shown = retriever.retrieve(q.question, top_k=prompt_k).passages
        prompts.append([getattr(p, "window", None) or p.text for p in shown])
    return score(questions, rankings, prompts, seconds)


def _default_tokenizer() -> Any:
    """llama-index's default chunk tokenizer (tiktoken ``cl100k_base``), read from the
    copy llama-index ships, never downloaded; None (the splitter then counts in the
    embedding model's word-pieces) when that copy is missing."""
    cache = Path(llama_index.core.__file__).parent / "_static" / "tiktoken_cache"
    blob = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    if not (cache / hashlib.sha1(blob.encode()).hexdigest()).exists():
        return None
    previous = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    try:
        encoding = tiktoken.get_encoding("cl100k_base")
    finally:
        if previous is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = previous
    return lambda text: encoding.encode(text, allowed_special="all")


class WarmragEmbedding(BaseEmbedding):
    """warmrag's ``Embedder`` as a llama-index embedding model: the same vectors, so a
    comparison measures chunking and ranking, not the model."""

    _embedder: Embedder = PrivateAttr()

    def __init__(self, embedder: Embedder) -> None:
        super().__init__(model_name="all-MiniLM-L6-v2", embed_batch_size=16)
        self._embedder = embedder

    def _get_query_embedding(self, query: str) -> list[float]:
        return [float(x) for x in self._embedder.embed_query(query)]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_query_embedding(text)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in row] for row in self._embedder.embed_texts(texts)]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


def build_llamaindex_defaults(
    documents: Sequence[Mapping[str, object]],
    embed_model: Any,
    chunk_size: int = 512,
    chunk_overlap: int = 50,
) -> Any:
    """An in-memory ``VectorStoreIndex`` over the documents, chunked by a plain
    ``SentenceSplitter`` (tiktoken, metadata embedded with the text: llama-index's
    defaults)."""
    docs = [
        Document(id_=str(d["id"]), text=str(d["text"]), metadata=_metadata(d)) for d in documents
    ]
    splitter = SentenceSplitter(
        chunk_size=chunk_size, chunk_overlap=chunk_overlap, tokenizer=_default_tokenizer()
    )
    return VectorStoreIndex.from_documents(
        docs, embed_model=embed_model, transformations=[splitter]
    )


def _metadata(document: Mapping[str, object]) -> dict[str, object]:
    metadata = document.get("metadata")
    return dict(metadata) if isinstance(metadata, Mapping) else {}


def evaluate_llamaindex_index(
    index: Any, questions: Sequence[GoldQuestion], prompt_k: int | None = None, seconds: float = 0.0
) -> Quality:
    """Scores a built index's retriever (top ``RANK_DEPTH``); the prompt is its first
    ``prompt_k`` nodes (default: llama-index's ``similarity_top_k``, 2)."""
    prompt_k = prompt_k or DEFAULT_SIMILARITY_TOP_K
    retriever = index.as_retriever(similarity_top_k=RANK_DEPTH)
    rankings, prompts = [], []
    for q in questions:
        nodes = retriever.retrieve(q.question)
        rankings.append([n.node.ref_doc_id or n.node.node_id for n in nodes])
        prompts.append([n.node.get_content(MetadataMode.NONE) for n in nodes[:prompt_k]])
    return score(questions, rankings, prompts, seconds)


def evaluate_llamaindex_defaults(
    documents: Sequence[Mapping[str, object]],
    questions: Sequence[GoldQuestion],
    embed_model: Any,
    prompt_k: int | None = None,
) -> Quality:
    """llama-index's defaults on the same documents: build the index (timed), then score."""
    started = time.perf_counter()
    index = build_llamaindex_defaults(documents, embed_model)
    seconds = time.perf_counter() - started
    return evaluate_llamaindex_index(index, questions, prompt_k, seconds)
