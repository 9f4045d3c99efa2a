"""The embedded index's own figures at one size, for the scale section (``bench.scale``):
recall against exact search, a build with searches waiting on it, and RSS."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Sequence

import numpy as np
from llama_index.core.schema import BaseNode

from rag.knowledge.edge import EdgeIndex


def build_while_searching(index: EdgeIndex, queries: np.ndarray) -> tuple[float, float]:
    """The HNSW build after the inserts, with searches sent meanwhile as chats would send
    them: (the build's seconds, the longest a search waited). The index's one process
    serves calls in turn, so a search sent during a build waits for its end."""
    done = threading.Event()
    waits: list[float] = []

    def search() -> None:
        for query in itertools.cycle(queries):
            if done.is_set():
                return
            t0 = time.perf_counter()
            index.search(query.tolist(), 3, None)
            waits.append(time.perf_counter() - t0)
            time.sleep(0.05)

    searcher = threading.Thread(target=search, name="scale-searcher")
    t0 = time.perf_counter()
    searcher.start()
    index.optimize()
    built = time.perf_counter() - t0
    done.set()
    searcher.join()
    return built, max(waits, default=0.0)


class Stored:
    """The ids and vectors written so far, in order: exact search's ground truth."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.parts: list[np.ndarray] = []

    @property
    def count(self) -> int:
        return len(self.ids)

    def extend(self, nodes: Sequence[BaseNode]) -> None:
        self.ids.extend(n.node_id for n in nodes)
        self.parts.append(np.array([n.get_embedding() for n in nodes], np.float32))

    def exact_top(self, query: np.ndarray, k: int) -> set[str]:
        matrix = np.concatenate(self.parts)
        self.parts = [matrix]
        scores = matrix @ (query / np.linalg.norm(query))
        return {self.ids[i] for i in np.argpartition(-scores, k)[:k]}


def index_recall(index: EdgeIndex, stored: Stored, queries: np.ndarray, k: int = 10) -> float:
    """Mean share of the exact top-``k`` (cosine, numpy) that the index's search returns."""
    found = 0
    for query in queries:
        hits = {h.node.node_id for h in index.search(query.tolist(), k, None)}
        found += len(hits & stored.exact_top(query, k))
    return found / (k * len(queries))


def rss_mib() -> int:
    """This process's resident memory now (the service's side of the index)."""
    with open("/proc/self/statm") as statm:
        return round(int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20)
