"""The memo of stored queries' retrievals: kept until a write, never across one."""

from __future__ import annotations

from rag.prompt import PromptBuilder
from warmup.retrieval_memo import RetrievalMemo, Retrieved


def retrieved() -> Retrieved:
    return Retrieved(PromptBuilder().prefix([], []), 0.5)


def test_a_write_clears_the_memo() -> None:
    memo = RetrievalMemo()
    memo.put("q", memo.generation, retrieved())
    assert memo.get("q") == retrieved() and len(memo) == 1
    memo.invalidate()
    assert memo.get("q") is None and len(memo) == 0


def test_a_retrieval_that_overlapped_a_write_is_not_kept() -> None:
    memo = RetrievalMemo()
    started = memo.generation  # read before retrieving
    memo.invalidate()  # a write lands while the retrieval runs
    memo.put("q", started, retrieved())
    assert memo.get("q") is None


def test_at_most_max_entries_least_recently_used_out() -> None:
    memo = RetrievalMemo(max_entries=2)
    for key in ("a", "b"):
        memo.put(key, memo.generation, retrieved())
    assert memo.get("a") is not None  # a is now the most recently used
    memo.put("c", memo.generation, retrieved())
    assert len(memo) == 2 and memo.get("b") is None
    assert memo.get("a") is not None and memo.get("c") is not None
