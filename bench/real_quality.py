"""Retrieval quality on the real corpus, in-process and without vLLM: warmrag's
knowledge base with its default settings against llama-index's defaults, over the
same documents, questions and embedding model.

``python -m bench.real_quality --data data/real_quality [--quick]`` ingests the corpus
into a fresh local Qdrant folder under ``--data``, builds the llama-index index in
memory, and prints (and writes ``quality.json``) recall@1/3/10, MRR, gold text in the
prompt and ingest seconds for both, with the questions one finds in its top 3 and the
other does not.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient

from api.config import Settings
from bench.real_corpus import RealSpec, RealWorkload, describe
from bench.retrieval_quality import (
    Quality,
    WarmragEmbedding,
    build_llamaindex_defaults,
    evaluate_llamaindex_index,
    evaluate_service,
)
from rag.embedding import Embedder
from rag.knowledge_base import KnowledgeBase
from rag.models import DocumentIn
from rag.retriever import Retriever


def _default(name: str) -> Any:
    return Settings.model_fields[name].default


def measure(workload: RealWorkload, data: Path, embedder: Embedder) -> dict[str, Any]:
    """Both retrievers' quality over every question of the workload's corpus."""
    documents = workload.documents()
    questions = workload.gold_questions()
    folder = data / "kb"
    shutil.rmtree(folder, ignore_errors=True)
    client = QdrantClient(path=str(folder / "qdrant"))
    try:
        kb = KnowledgeBase(
            folder,
            client,
            embedder,
            chunk_tokens=_default("chunk_tokens"),
            chunk_overlap_tokens=_default("chunk_overlap_tokens"),
        )
        started = time.perf_counter()
        kb.upsert([DocumentIn.model_validate(d, strict=False) for d in documents])
        ingest_s = time.perf_counter() - started
        chunks = kb.count_chunks()
        warmrag = evaluate_service(Retriever(kb), questions, _default("top_k"), ingest_s)
    finally:
        client.close()

    started = time.perf_counter()
    index = build_llamaindex_defaults(documents, WarmragEmbedding(embedder))
    build_s = time.perf_counter() - started
    llama = evaluate_llamaindex_index(index, questions, seconds=build_s)
    llama_top3 = evaluate_llamaindex_index(index, questions, prompt_k=3, seconds=build_s)
    fixed, broken = warmrag.fixed_and_broken(llama)

    def row(quality: Quality, chunk_count: int) -> dict[str, Any]:
        return {**quality.summary(), "ingest_s": round(quality.seconds, 1), "chunks": chunk_count}

    return {
        "corpus": describe(workload),
        "warmrag": row(warmrag, chunks),
        "llamaindex_defaults": {
            **row(llama, len(index.index_struct.nodes_dict)),
            "gold_text_in_top3": round(llama_top3.gold_text_in_prompt, 3),
        },
        "found_only_by_warmrag_top3": fixed,
        "found_only_by_llamaindex_top3": broken,
        "missed_by_both_top10": [
            r.question
            for r, o in zip(warmrag.results, llama.results, strict=True)
            if r.rank is None and o.rank is None
        ],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data/real_quality"))
    parser.add_argument("--quick", action="store_true", help="the quick spec's corpus")
    args = parser.parse_args(argv)
    workload = RealWorkload(RealSpec.quick() if args.quick else RealSpec.full())
    result = measure(workload, args.data, Embedder(threads=1))
    args.data.mkdir(parents=True, exist_ok=True)
    (args.data / "quality.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
