"""Ingest throughput (chunks/s through the IngestionPipeline into Qdrant local mode)
next to the embedding model's raw throughput on the same chunk texts, in one process.

    .venv/bin/python bench/ingest_throughput.py --towns 200
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qdrant_client import QdrantClient

from bench.harness import bench_dir
from bench.workload import towns
from rag.embedding import shared_embedder
from rag.knowledge_base import KnowledgeBase
from rag.models import DocumentIn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--towns", type=int, default=200)
    args = parser.parse_args()
    docs = [DocumentIn.model_validate(d) for t in towns(args.towns) for d in t.documents()]
    embedder = shared_embedder()
    embedder.embed_texts(["warm the model up"])
    with bench_dir() as work:
        client = QdrantClient(path=str(work / "qdrant"))
        kb = KnowledgeBase(work, client, embedder)
        started = time.perf_counter()
        kb.upsert(docs)
        ingest_s = time.perf_counter() - started
        texts = [text for d in docs for _, text in kb.chunk_texts(d.id)]
        client.close()
    started = time.perf_counter()
    embedder.embed_texts(texts)
    raw_s = time.perf_counter() - started
    ingest, raw = len(texts) / ingest_s, len(texts) / raw_s
    print(f"{len(docs)} documents, {len(texts)} chunks")
    print(f"ingest: {ingest:.1f} chunks/s ({ingest_s:.1f} s); raw embedding: {raw:.1f} chunks/s")
    print(f"ingest / raw: {ingest / raw:.0%}")


if __name__ == "__main__":
    main()
