"""Change-detection time vs registry size, for a one-document change.

Synthetic registry (no vLLM needed): N entries with 3 chunks each and one query per
entry with a random normalized embedding and the bars its context sets; the change
replaces one document (two chunks removed, two added) and brings 12 new facts (what a
section of the real corpus states: 3,613 facts in 300). Times the work
``WarmupService.flush`` does before it re-warms anything: the entry index and query
matrix (cold: rebuilt from the registry in memory; warm: cached since the last registry
change), then ``ChangeDetector.detect``.

    .venv/bin/python bench/detection_scaling.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import percentile
from rag.chat.change_rule import ChangeRule, ContextBars
from rag.knowledge.models import ChangeSet, ChunkRecord
from warmup.detector import ChangeDetector
from warmup.models import WarmEntry
from warmup.registry import Registry

DIM = 384
FACTS_PER_DOCUMENT = 12


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def build(registry: Registry, n: int, rng: np.random.Generator) -> None:
    vectors = unit(rng, n)
    for i in range(n):
        fp = f"fp{i:06d}"
        registry.put_entry(
            WarmEntry(
                fingerprint=fp,
                messages=[{"role": "system", "content": f"prefix {i}"}],
                chunk_ids=[f"c{i}-{j}" for j in range(3)],
                doc_ids=[f"d{i}"],
                content_hashes=["h"] * 3,
                triples=[],
                prefix_tokens=700,
                cached_block_tokens=640,
                warmed_at=0.0,
                expires_at=1e12,
            )
        )
        key = f"question {i}"
        registry.record_query(key, key, vectors[i], 0.0, 3600.0)
        registry.assign(key, fp, ContextBars(0.45, 0.5))


def measure(n: int, rounds: int, rng: np.random.Generator) -> tuple[list[float], list[float], int]:
    """Detection of a one-document change against ``n`` entries, ``rounds`` times with
    caches rebuilt and reused: (cold ms, warm ms, entries affected)."""
    facts = unit(rng, FACTS_PER_DOCUMENT)
    detector = ChangeDetector(
        ChangeRule(fact_vectors=lambda docs: facts, min_fact_score=0.3, fact_gain=0.2)
    )  # the graph's lookup, for a change that did not note its new facts
    registry = Registry()
    build(registry, n, rng)
    change = ChangeSet(
        updated=["d7"],
        removed_chunk_ids=["c7-0", "c7-1"],
        added_chunks=[
            ChunkRecord(doc_id="d7", chunk_id=f"new{j}", embedding=v.tolist())
            for j, v in enumerate(unit(rng, 2))
        ],
        new_facts=facts.tolist(),
        kb_version=2,
    )
    cold: list[float] = []
    warm: list[float] = []
    affected = 0
    for _ in range(rounds):
        entry = registry.entry("fp000000")
        assert entry is not None
        registry.retire(entry.fingerprint)  # drops the cached entry index and matrix
        registry.put_entry(entry)
        registry.assign("question 0", entry.fingerprint, ContextBars(0.45, 0.5))
        for timings in (cold, warm):  # caches rebuilt, then reused
            started = time.perf_counter()
            result = detector.detect(registry.entry_index(), registry.query_matrix(), [change])
            timings.append((time.perf_counter() - started) * 1000)
        affected = len(result.affected)
    return cold, warm, affected


def main() -> None:
    rng = np.random.default_rng(3)
    print("            cold caches (ms)    warm caches (ms)")
    print("entries     p50        p99        p50        p99    affected")
    for n in (100, 1_000, 10_000):
        cold, warm, affected = measure(n, 15, rng)
        print(
            f"{n:7d} {percentile(cold, 50):10.1f} {percentile(cold, 99):10.1f}"
            f" {percentile(warm, 50):10.2f} {percentile(warm, 99):10.2f} {affected:9d}"
        )


if __name__ == "__main__":
    main()
